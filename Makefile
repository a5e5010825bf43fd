PYTHON ?= python3
PIP ?= $(PYTHON) -m pip

.PHONY: install install-test run test lint bench

install:
	$(PIP) install -q -e '.[data,train]'

install-test:
	$(PIP) install -q -e '.[test]'

run: install
	$(PYTHON) examples/demo.py

test: install-test
	$(PYTHON) -m pytest -q --timeout=300 -m "not slow" tests

lint:
	$(PYTHON) -m ruff check raylite tests bench examples

bench:
	$(PYTHON) bench/core.py
