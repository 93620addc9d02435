# The two set-up commands the README promises. Each sets the machine up first.
.PHONY: demo test setup lint bench

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/python examples/quickstart.py dynscope-report

test: setup
	.venv/bin/python -m pytest -q

lint: setup
	.venv/bin/ruff check dynscope tests examples benchmarks scripts

bench: setup
	.venv/bin/python benchmarks/capture_overhead.py
