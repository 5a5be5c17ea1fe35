# Two commands: `make run` (install + run the main job on the embedded simulated default)
# and `make test` (install + run the whole suite). Everything lives in .venv.
PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
MYPY = $(BIN)/mypy trm_assets trm_bench trm_assets_tests
RUFF_CHECK = $(BIN)/ruff check trm_assets trm_bench trm_assets_tests
RUFF_FORMAT = $(BIN)/ruff format --check trm_assets trm_bench trm_assets_tests

.PHONY: run test lint typecheck ui clean bytecode
UI_PORT ?= 3000

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip

# uv installs the project in ~20 s where pip took ~110 s from a cold cache (the same resolution:
# the newest release each bound admits; docs/decision-install-with-uv.md). pip stays in the venv:
# `trm bench real-model` builds its own environment with it.
# Where uv cannot be had or fails, pip does the install as before.
$(BIN)/uv: | $(BIN)/python
	$(BIN)/pip install --quiet uv || echo "uv unavailable: the install falls back to pip"

# Then compileall over site-packages: uv, unlike pip, writes no bytecode for what it installs,
# and where PYTHONDONTWRITEBYTECODE is set (this sandbox) none is ever cached, so every process
# compiled dagster, pandas, pydantic... from source: `import trm_assets.definitions` took
# 7.2-8.5 s instead of 3.0 s (docs/decision-install-with-uv.md). Bytecode is only a speed-up:
# a file that does not compile is left to Python, as before. The Makefile is a prerequisite, so
# a changed recipe runs again (a venv built before this line gets its bytecode).
SITE_PACKAGES = $$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
$(STAMP): pyproject.toml Makefile | $(BIN)/uv
	$(BIN)/uv pip install --quiet --python $(BIN)/python -e '.[dev]' \
		|| $(BIN)/pip install --quiet -e '.[dev]'
	$(BIN)/python -m compileall -q -j 0 $(SITE_PACKAGES) >/dev/null || true
	touch $(STAMP)

# Where PYTHONDONTWRITEBYTECODE is set (this sandbox sets it) Python never caches the bytecode
# of the editable package, so every process compiled its ~100 modules again: 0.3 s per `trm`
# command, code server, daemon-launched run worker or test child (docs/decision-bytecode-before-
# running.md). compileall writes it even there, only for files whose source changed; Python
# reads it, and recompiles in memory any file edited since.
bytecode: $(STAMP)
	$(BIN)/python -m compileall -q trm_assets trm_bench trm_assets_tests

run: bytecode
	$(BIN)/trm run

test: bytecode
	$(RUFF_CHECK)
	$(RUFF_FORMAT)
	$(MYPY)
	$(BIN)/pytest -q -n 2 --dist loadscope --no-loadscope-reorder

# The Dagster UI and daemon (the run queue, the epoch sensors) on 127.0.0.1, against the
# project's instance; `dg dev` supersedes `dagster dev`.
ui: bytecode
	DAGSTER_HOME=$(CURDIR)/dagster_home $(BIN)/dg dev -w workspace.yaml -h 127.0.0.1 -p $(UI_PORT)

lint: $(STAMP)
	$(RUFF_CHECK)
	$(RUFF_FORMAT)

typecheck: $(STAMP)
	$(MYPY)

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
