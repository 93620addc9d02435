"""dynscope/_torch/runtime.py: the timing runtime dynscope runs and every script carries."""

from __future__ import annotations

import ast
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._capture import sampling, timing_options
from dynscope._torch import runtime

if TYPE_CHECKING:
    from types import ModuleType

SOURCE = Path(runtime.__file__).read_text(encoding="utf-8")


def test_the_runtime_imports_only_the_standard_library_and_torch() -> None:
    # Its text runs inside standalone scripts, where dynscope is not installed.
    tree = ast.parse(SOURCE)
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert all(n.level == 0 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)), "no relative import"
    tops = {name.split(".")[0] for name in imported}
    assert "dynscope" not in tops and "torch" in tops
    assert tops - {"torch"} <= set(sys.stdlib_module_names), tops
    # In the middle of a script a __future__ import is a syntax error.
    assert "__future__" not in tops


def test_sampling_runs_the_runtime_and_shares_its_defaults() -> None:
    for name in ("Clock", "compare_outputs", "cuda_devices", "is_random", "seeded", "tensors", "SEED", "NOISY_SPREAD"):
        assert getattr(sampling, name) is getattr(runtime, name), name
    opts = timing_options.TimingOptions()
    assert (opts.warmup, opts.repeats, opts.min_time_s, opts.min_sample_ms) == (
        runtime.WARMUP, runtime.REPEATS, runtime.MIN_TIME_S, runtime.MIN_SAMPLE_MS)
    assert (opts.rtol, opts.atol, opts.noisy_spread) == (runtime.RTOL, runtime.ATOL, runtime.NOISY_SPREAD)
    assert sampling.Samples((5.0, 1.0, 4.0, 2.0, 3.0)).spread == runtime.spread([5.0, 1.0, 4.0, 2.0, 3.0])


def test_timing_options_and_sampling_import_no_circle() -> None:
    def imports(module: ModuleType) -> set[str]:
        tree = ast.parse(Path(str(module.__file__)).read_text(encoding="utf-8"))
        return {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}

    assert "dynscope._capture.sampling" not in imports(timing_options)
