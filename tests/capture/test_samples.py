"""timing.Samples: one definition of median, spread and noisy for per-graph and end-to-end timing."""

from __future__ import annotations

import statistics

import pytest
import torch

import dynscope
from dynscope._capture.sampling import Samples

FAST = dynscope.TimingOptions(warmup=1, repeats=6, min_time_s=0.01, min_sample_ms=0.2, progress=False)


def test_known_values() -> None:
    s = Samples((5.0, 1.0, 4.0, 2.0, 3.0))
    assert s.median == 3.0
    # Quartiles of 1..5 (statistics.quantiles, exclusive method): 1.5 and 4.5 -> IQR 3 / median 3.
    assert s.spread == pytest.approx(1.0)
    assert s.noisy and not Samples(s.ms, noisy_spread=1.5).noisy
    steady = Samples((2.0, 2.0, 2.0, 2.0, 2.0))
    assert (steady.median, steady.spread, steady.noisy) == (2.0, 0.0, False)


def test_too_few_samples_have_no_spread_and_none_no_median() -> None:
    assert Samples((1.0, 9.0, 5.0)).spread == 0.0, "no quartiles below 4 samples"
    assert (Samples(()).median, Samples(()).spread, Samples(()).noisy) == (0.0, 0.0, False)
    assert Samples((0.0, 0.0, 0.0, 0.0)).spread == 0.0, "a zero median divides nothing"


def test_timing_default_threshold_is_the_options_default() -> None:
    assert Samples(()).noisy_spread == dynscope.TimingOptions().noisy_spread


def _graph_fn(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x @ x.T).sum(-1)


@pytest.mark.slow
def test_live_timing_fields_are_the_samples_view() -> None:
    """Per graph and end to end, medians, spread and noisy are what Samples derives."""
    x = torch.randn(16, 16, generator=torch.Generator().manual_seed(0))
    rep = dynscope.report(_graph_fn, x, timing=True, timing_options=FAST)
    (g,) = rep.graphs
    measured = [g.timing, *rep.timing]
    assert len(measured) == 2 and all(t is not None and not t.error for t in measured)
    for t in measured:
        assert t is not None
        eager, comp = Samples(t.eager_samples_ms), Samples(t.compiled_samples_ms)
        assert 5 <= len(eager.ms) == len(comp.ms) <= 6
        assert (t.eager_ms, t.compiled_ms) == (eager.median, comp.median)
        assert t.eager_ms == statistics.median(t.eager_samples_ms) > 0
        assert t.spread == max(eager.spread, comp.spread)
        assert t.noisy == (t.spread > FAST.noisy_spread) == (eager.noisy or comp.noisy)
