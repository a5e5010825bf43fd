PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test lint bench

install:
	$(PIP) install -q -e '.[data,train]'

install-test:
	$(PIP) install -q -e '.[test]'
	@# redis-server for the head-persistence tests (Debian's package; root only, best effort)
	@if ! command -v redis-server >/dev/null 2>&1 && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
		(apt-get install -y -q redis-server || (apt-get update -q && apt-get install -y -q redis-server)) >/dev/null 2>&1 \
		|| echo "redis-server could not be installed: the Redis persistence tests will be skipped"; fi

run: install
	$(PYTHON) examples/demo.py

test: install-test
	$(PYTHON) -m pytest -q --timeout=300 -m "not slow" tests

lint:
	$(PYTHON) -m ruff check raylite tests bench examples

bench:
	$(PYTHON) bench/core.py
