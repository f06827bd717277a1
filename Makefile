# kfed: `make run` starts the local federation, `make test` runs lint, types and every test.
# Both create .venv and install into it first, so they work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast lint bench clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/kfed local up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy metadata_log controller deploy broker_agent sdk spark_pipeline

test: lint
	$(BIN)/pytest -q

# Everything except the multi-process scenarios marked slow.
test-fast: lint
	$(BIN)/pytest -q -m 'not slow'

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
