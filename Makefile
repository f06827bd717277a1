# kfed: `make run` starts the local federation, `make test` runs lint, types and every test.
# Both create .venv and install into it first, so they work on a fresh clone.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run test test-fast test-chaos test-ui-scale lint mutants bench faults chaos browser kcat clean kafka

# The C modules (sdk/_speedups.c, metadata_log/_columns.c, kafka_wire/_records.c) are compiled by the
# install (an editable install builds them in place): rebuild on change.
$(STAMP): pyproject.toml sdk/_speedups.c metadata_log/_columns.c kafka_wire/_records.c
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

# Apache Kafka, the sub-clusters' broker, and Spark's Kafka connector (the tests' oracle): jars from Maven Central
# (deploy/kafka/pom.xml, deploy/kafka/spark-connector/pom.xml) in a cache outside git shared by every clone
# (~/.cache/kfed; KFED_KAFKA_HOME moves the broker's). Offline once cached; reinstalled when a pom changes; when
# Maven fails, deploy/maven.py says what failed and how to retry.
KAFKA_VERSION := $(shell sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' deploy/kafka/pom.xml)
SPARK_VERSION := $(shell sed -n 's:.*<spark.version>\(.*\)</spark.version>.*:\1:p' deploy/kafka/spark-connector/pom.xml)
export KFED_KAFKA_HOME ?= $(HOME)/.cache/kfed/kafka-$(KAFKA_VERSION)
KAFKA_STAMP := $(KFED_KAFKA_HOME)/.installed-stamp
CONNECTOR_STAMP := $(HOME)/.cache/kfed/spark-connector-$(SPARK_VERSION)/.installed-stamp

$(KAFKA_STAMP): deploy/kafka/pom.xml | $(STAMP)
	$(BIN)/python -m deploy.maven install kafka

$(CONNECTOR_STAMP): deploy/kafka/spark-connector/pom.xml | $(STAMP)
	$(BIN)/python -m deploy.maven install spark-connector

kafka: $(KAFKA_STAMP) $(CONNECTOR_STAMP)

run: $(STAMP) $(KAFKA_STAMP)
	$(BIN)/kfed local up

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy metadata_log metadata_quorum metadata_client kafka_wire controller deploy broker_agent sdk spark_pipeline gateway kfed bench

# The gateway's tests run on Apache Kafka sub-clusters with the rest; two client suites and the hostile input
# again on Tansu (the light option, and a smaller matrix). The process tests mostly wait on their processes,
# so the suite runs on TEST_WORKERS pytest-xdist workers, a file per worker at a time (the longest first:
# tests/conftest.py; deploy/processes.py splits the free ports between them). The 30 slowest tests are listed
# at the end: where the suite's time goes (the aim is 25 minutes on 2 cores).
TEST_WORKERS ?= 3
XDIST := -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder
test: lint browser kcat kafka mutants
	$(BIN)/pytest -q $(XDIST) --durations=30 -m 'not chaos'
	KFED_TEST_BROKER=tansu $(BIN)/pytest -q $(XDIST) tests/gateway/test_kcat.py tests/gateway/test_kafka_python.py \
		tests/gateway/test_hostile.py

# Every branch of the two history checkers (tests/faults, tests/dataplane) and of the SDK's routing and hold-back
# decisions (sdk/routes.py, sdk/key_order.py) deleted or negated, every boundary moved and index shifted in turn, must fail one of its
# tests on an assertion (about 40 s of CPU).
mutants: $(STAMP)
	$(BIN)/python -m tests.faults.mutants

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

# The data plane's explicit chaos schedule, alone (every fault once, on pytest's Kafka pool: about 4 minutes).
test-chaos: $(STAMP) kafka
	$(BIN)/pytest -q -m chaos tests/dataplane

# Seeded chaos against a real federation's data plane (tests/dataplane): make chaos SEED=7 FAULTS=20
FAULTS ?= 13
chaos: $(STAMP) kafka
	$(BIN)/python -m tests.dataplane --seed $(SEED) --faults $(FAULTS)

# The dashboard's paging over 10,000 topics (make test runs it over 2,000: creating them is most of its time).
test-ui-scale: lint browser
	KFED_UI_TOPICS=10000 $(BIN)/pytest -q tests/ui/test_paging.py

# Everything except the multi-process scenarios marked slow.
test-fast: lint kafka
	$(BIN)/pytest -q $(XDIST) -m 'not slow'

bench: $(STAMP) kafka
	$(BIN)/python -m bench

clean:
	rm -rf $(VENV) var .pytest_cache .mypy_cache .ruff_cache
