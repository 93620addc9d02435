"""report() gives the same answer whatever ran before: random programs, random histories.

A small version of benchmarks/order_agreement.py (which holds the generator; benchmarks/ is
not a package, so it is imported from its file). Each example writes one random program to
two files: copy A is reported on fresh code, copy B after the user's own torch.compile runs
(and sometimes an earlier report); both reports must agree.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from hypothesis import HealthCheck, given, settings

if TYPE_CHECKING:
    from types import ModuleType

_PATH = Path(__file__).resolve().parents[2] / "benchmarks" / "order_agreement.py"


def _load_generator() -> ModuleType:
    name = "dynscope_benchmarks_order_agreement"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _PATH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the file runs
    spec.loader.exec_module(module)
    return module


oa = _load_generator()


@pytest.mark.heavy
def test_generated_programs_hit_the_history_sensitive_cases() -> None:
    # The property below only means something if the programs contain the cases that
    # history used to change: a loop break that makes Dynamo skip the frame.
    S = oa.Step
    case = oa.Case(
        steps=(S("relu"), S("loop", body=(S("sin"), S("print"))), S("helper", body=(S("item"),))),
        batches=(2, 3),
        user=(oa.Compile("eager", None, (0, 1)),),
        prior_report="after",
        b_first=True,
    )
    fresh, after, source = oa.run_case(case)
    assert "for _ in range(2):" in source
    assert fresh == after
    frames = fresh[4]
    assert ("Program.forward", "failed") in frames, "the loop break makes Dynamo give up on forward"
    assert fresh[1] >= 2 and fresh[3] >= 1, "breaks and a recompile (batch 2 then 3) are seen"


@pytest.mark.heavy
@settings(
    max_examples=12,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(oa.case_strategy(max_steps=4, max_calls=2))
def test_report_agrees_with_fresh_code_whatever_ran_before(case: object) -> None:
    fresh, after, source = oa.run_case(case)
    assert fresh == after, (
        f"{oa.describe(case)}\n{source}\n"
        f"fresh {oa.FIELDS}: {fresh}\nafter {oa.FIELDS}: {after}"
    )
