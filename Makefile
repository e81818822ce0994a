# text2grad: two commands on a fresh machine: `make demo` and `make test`.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
T2G := $(VENV)/bin/t2g
# torch first, so no CUDA download happens here; on a GPU machine set TORCH_SPEC (e.g. torch==2.13.0 from the CUDA index).
TORCH_SPEC ?= torch==2.13.0
WORKSPACE ?= t2g-workspace
PYTEST_ARGS ?=
# pytest-xdist workers for `make test` / `make test-quick` (auto: one per core; 0: run in one process)
TEST_WORKERS ?= auto
PYTEST := $(PY) -m pytest -n $(TEST_WORKERS) --dist loadgroup

export DO_NOT_TRACK := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export PREFECT_SERVER_UI_SHOW_PROMOTIONAL_CONTENT := false
export MLFLOW_DISABLE_TELEMETRY := true
export HF_HUB_OFFLINE := 1
export HF_HUB_DISABLE_TELEMETRY := 1
export TOKENIZERS_PARALLELISM := false
export PYTHONUNBUFFERED := 1

.PHONY: install bytecode system-packages demo test test-quick bench lint up down clean help

help:
	@echo "make demo   - set up .venv if absent and run the end-to-end pipeline on the demo data"
	@echo "make test   - set up .venv if absent and run the whole test suite"
	@echo "make test-quick - tests without the slow and e2e markers (nothing that trains, spawns or serves)"
	@echo "make bench  - run the benchmarks (results in benchmarks/results/*.json)"
	@echo "make lint   - ruff"
	@echo "make up / make down - local Prefect + MLflow servers and the deployments"

$(VENV)/.installed: pyproject.toml constraints.txt
	test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q "$(TORCH_SPEC)"
	$(PY) -m pip install -q -c constraints.txt -e ".[dev]"
	touch $@

install: $(VENV)/.installed

# The project's own modules compiled to bytecode (pip compiles the libraries it installs): where PYTHONDONTWRITEBYTECODE
# is set, as on this project's machines, every process of a run or of the tests otherwise compiled them again (about
# 0.8 CPU-s a process that imports the pipeline). Under a second; files already compiled are skipped.
bytecode: install
	$(PY) -m compileall -q -j 0 t2g_core t2g_cli t2g_mlflow t2g_env tasks flows deployments benchmarks tests >/dev/null

demo: bytecode
	$(T2G) demo --workspace $(WORKSPACE)

# Debian packages the tests use, best effort (needs root): headless Chromium for the review-page browser test, and
# bubblewrap, the code sandbox's isolation (without it the sandbox uses unprivileged user namespaces via unshare).
SYSTEM_PACKAGES := chromium bubblewrap
system-packages:
	@missing=""; command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing="chromium"; \
	  command -v bwrap >/dev/null 2>&1 || missing="$$missing bubblewrap"; \
	  if [ -n "$$missing" ]; then \
	    { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	      (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null) ; } || \
	    echo "not installed: $$missing (the browser test is skipped without chromium; the sandbox falls back to unshare)"; \
	  fi

test: bytecode system-packages
	$(PYTEST) $(PYTEST_ARGS)

test-quick: bytecode
	$(PYTEST) -m "not slow and not e2e" $(PYTEST_ARGS)

bench: install
	@mkdir -p benchmarks/results
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

lint: install
	$(VENV)/bin/ruff check .

up: install
	bash deployments/up.sh $(WORKSPACE)

down:
	bash deployments/down.sh $(WORKSPACE)

clean:
	rm -rf $(WORKSPACE) .pytest_cache .ruff_cache
