# Two commands: `make run` (install + run the main job on the embedded simulated default)
# and `make test` (install + run the whole suite). Everything lives in .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: run test lint ui clean
UI_PORT ?= 3000

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install --quiet -e '.[dev]'
	touch $(STAMP)

run: $(STAMP)
	$(BIN)/trm run

test: $(STAMP)
	$(BIN)/ruff check trm_assets trm_bench trm_assets_tests
	$(BIN)/ruff format --check trm_assets trm_bench trm_assets_tests
	$(BIN)/mypy trm_assets trm_bench trm_assets_tests
	$(BIN)/pytest -q -n 2 --dist loadscope --no-loadscope-reorder

# The Dagster UI and daemon (the run queue, the epoch sensors) on 127.0.0.1, against the
# project's instance; `dg dev` supersedes `dagster dev`.
ui: $(STAMP)
	DAGSTER_HOME=$(CURDIR)/dagster_home $(BIN)/dg dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

lint: $(STAMP)
	$(BIN)/ruff check trm_assets trm_bench trm_assets_tests
	$(BIN)/ruff format --check trm_assets trm_bench trm_assets_tests

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
