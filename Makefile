# The set-up commands the README promises. Each sets the machine up first.
.PHONY: demo test test-fast setup lint bench

# The fast tier leaves out what takes seconds a test (pyproject.toml names each marker):
# Inductor, the headless browser, venv and wheel builds, torchrun jobs, and the heavy family.
FAST = not slow and not browser and not venv and not torchrun and not heavy

setup:
	@scripts/setup.sh

# Python caches compiled modules, and pytest its rewritten test modules, in __pycache__
# (git-ignored): a second run skips rewriting ~270 test modules (4 s of the fast tier's
# collection). A shell that sets PYTHONDONTWRITEBYTECODE would turn that off.
unexport PYTHONDONTWRITEBYTECODE

demo: setup
	.venv/bin/python examples/quickstart.py dynscope-report

# pytest-xdist: one worker a core, at most 4 (each imports torch and transformers: ~1 GB), a
# test module's tests on one worker (--dist loadscope: a module's torchrun job or recorded
# fixture is made once). The invariants line adds up the workers' counts (tests/conftest.py).
# --no-loadscope-reorder: modules go out in collection order, which tests/conftest.py starts with
# the longest (xdist's own order, most tests first, handed the 2-minute one-test corpus module
# out last, to run alone at the end).
WORKERS = -n auto --maxprocesses=4 --dist loadscope --no-loadscope-reorder

# The torchrun jobs time their ranks against each other (the watch's wait, the collective
# timeout): they run after the rest, alone, not beside another worker's compiles.
test: setup
	.venv/bin/python -m pytest -q $(WORKERS) -m "not torchrun"
	.venv/bin/python -m pytest -q -m torchrun

# -p no:logging: no test reads caplog, and Dynamo's many log records cost seconds to capture.
# --dist load: the fast tier has no torchrun job or costly module fixture to share, so its
# tests spread test by test (by module, one worker was left with the last long modules alone).
test-fast: setup
	.venv/bin/python -m pytest -q -p no:logging -n auto --maxprocesses=4 --dist load -m "$(FAST)"

lint: setup
	.venv/bin/ruff check dynscope tests examples benchmarks scripts

bench: setup
	.venv/bin/python benchmarks/capture_overhead.py
