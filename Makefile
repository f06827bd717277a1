# kfed: `make run` starts the local federation, `make test` runs lint, types and every test.
# Both create .venv and install into it first, so they work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast lint bench faults browser kcat clean

# The C modules (sdk/_speedups.c, metadata_log/_columns.c) are compiled by the install (an editable install
# builds them in place): rebuild on change.
$(STAMP): pyproject.toml sdk/_speedups.c metadata_log/_columns.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

run: $(STAMP)
	$(BIN)/kfed local up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy metadata_log controller deploy broker_agent sdk spark_pipeline gateway

test: lint browser kcat
	$(BIN)/pytest -q

# The dashboard tests (tests/ui) drive Debian's chromium through Playwright; install it when missing.
browser:
	@command -v chromium >/dev/null || { \
		echo "installing Debian's chromium for the dashboard tests (tests/ui)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }

# The gateway tests (tests/gateway) drive Debian's kcat, an unmodified librdkafka client; install it when missing.
kcat:
	@command -v kcat >/dev/null || { \
		echo "installing Debian's kcat for the gateway tests (tests/gateway)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq kcat >/dev/null; }

# Seeded fault injection against a real 3-node quorum: make faults SEED=7 DURATION=120
SEED     ?= 1
DURATION ?= 60
faults: $(STAMP)
	$(BIN)/python -m tests.faults --seed $(SEED) --duration $(DURATION)

# Everything except the multi-process scenarios marked slow.
test-fast: lint
	$(BIN)/pytest -q -m 'not slow'

bench: $(STAMP)
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
