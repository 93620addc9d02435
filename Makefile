# The set-up commands the README promises. Each sets the machine up first.
.PHONY: demo test test-fast setup lint bench

# The fast tier leaves out what takes seconds a test (pyproject.toml names each marker):
# Inductor, the headless browser, venv and wheel builds, torchrun jobs, and the heavy family.
FAST = not slow and not browser and not venv and not torchrun and not heavy

setup:
	@scripts/setup.sh

demo: setup
	.venv/bin/python examples/quickstart.py dynscope-report

test: setup
	.venv/bin/python -m pytest -q

# -p no:logging: no test reads caplog, and Dynamo's many log records cost seconds to capture.
test-fast: setup
	.venv/bin/python -m pytest -q -p no:logging -m "$(FAST)"

lint: setup
	.venv/bin/ruff check dynscope tests examples benchmarks scripts

bench: setup
	.venv/bin/python benchmarks/capture_overhead.py
