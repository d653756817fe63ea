# Letta OpenAI Gateway: local development targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: install run test unit clients e2e lint format template-check clean bench letta-dev letta-dev-down

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## Run the gateway on $(HOST):$(PORT) (configure with LETTA_BASE_URL / LETTA_API_KEY / GATEWAY_API_KEYS).
run: $(STAMP)
	$(BIN)/letta-gateway serve --host $(HOST) --port $(PORT)

## The whole test suite: unit tests, then end-to-end tests against a real Letta server (installed and started on
## first use by scripts/letta-dev; stopped afterwards unless it was already running).
test: $(STAMP)
	$(BIN)/python -m pytest tests/unit tests/clients tests/e2e

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

## Real client libraries against the gateway and the Letta double: openai Node SDK (6.x and Roo's 5.x), Vercel AI
## SDK (Cline), LangChain ChatOpenAI, Roo-shaped requests. First use runs `npm ci` in tests/clients/node.
clients: $(STAMP)
	$(BIN)/python -m pytest tests/clients

e2e: $(STAMP)
	$(BIN)/python -m pytest tests/e2e -m e2e

## A real Letta 0.16.8 server on loopback with a scripted model and a demo agent, to try the gateway without an
## account: then `LETTA_BASE_URL=<printed URL> GATEWAY_API_KEYS=sk-local make run`.
letta-dev:
	python3 scripts/letta-dev/letta_dev.py install
	python3 scripts/letta-dev/letta_dev.py up
	python3 scripts/letta-dev/letta_dev.py demo-agent --name demo-agent --parallel

letta-dev-down:
	python3 scripts/letta-dev/letta_dev.py down

lint: $(STAMP)
	$(BIN)/ruff check functions tests
	$(BIN)/ruff format --check functions tests

format: $(STAMP)
	$(BIN)/ruff format functions tests
	$(BIN)/ruff check --fix functions tests

## sam validate --lint, cfn-lint and sam build (installs its own tools).
template-check:
	bash .ci/template-check

clean:
	rm -rf $(VENV) .aws-sam .pytest_cache .ruff_cache tests/clients/node/node_modules

## Benchmarks (issue 8): prints a table and writes docs/benchmarks.md in under 10 minutes.
## Installs pyinstrument (bench-only, for the profiles) into the venv if missing. BENCH_ARGS=--quick for a smoke run.
bench: $(STAMP)
	@$(BIN)/python -c "import pyinstrument" 2>/dev/null || $(BIN)/pip install --quiet pyinstrument
	$(BIN)/python bench/run.py $(BENCH_ARGS)
