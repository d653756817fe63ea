# Letta OpenAI Gateway: local development targets.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
HOST ?= 127.0.0.1
PORT ?= 8000
STAMP := $(VENV)/.installed

.PHONY: install run test unit lint format template-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

## Run the gateway on $(HOST):$(PORT) (configure with LETTA_BASE_URL / LETTA_API_KEY / GATEWAY_API_KEYS).
run: $(STAMP)
	$(BIN)/letta-gateway serve --host $(HOST) --port $(PORT)

## The whole test suite.
test: $(STAMP)
	$(BIN)/python -m pytest tests

unit: $(STAMP)
	$(BIN)/python -m pytest tests/unit

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
	rm -rf $(VENV) .aws-sam .pytest_cache .ruff_cache
