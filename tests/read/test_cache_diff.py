"""Why it compiled again (issue 47): two runs' compile-cache lookups compared, the changed key
part named.

The stored runs (tests/traces/cache/torch-2.13, recorded by ``.venv/bin/python
scripts/record_cache_runs.py``: one tiny program in fresh processes sharing one Inductor cache)
are read without torch; the live test records two runs now and reads them the same way.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

import dynscope
from dynscope._cli import main
from dynscope._model.cache import (
    BYPASSED,
    FROM_FX,
    GRAPH,
    INDUCTOR_CONFIG,
    INPUT,
    PARTS_DIFFER,
    SAME_KEY,
    THREADS,
    CacheLookup,
    compare_lookups,
)
from dynscope._torch import cache_keys, records
from dynscope._torch.trace_log import read_log

ROOT = Path(__file__).resolve().parents[2]
RUNS = ROOT / "tests" / "traces" / "cache" / "torch-2.13"
#: The same program, with AOTAutograd's cache logger at DEBUG (it logs its key's parts then).
AOT_DEBUG = ROOT / "tests" / "traces" / "cache" / "torch-2.13-aot-debug"
#: run -> the (family, part name, field, before, after) of the one change planted in it.
PLANTED = {
    "config": [(INDUCTOR_CONFIG, "inductor_config[max_autotune]", "max_autotune", "False", "True")],
    "dtype": [(INPUT, "example_inputs[1]", "dtype", "torch.float32", "torch.float64")],
    "source": [(GRAPH, "gm", "", "mul = torch.ops.aten.mul.Tensor(arg0_1, 2)", "mul = torch.ops.aten.mul.Tensor(arg0_1, 3)")],
    # a transposed input: one part, two of its fields
    "stride": [(INPUT, "example_inputs[1]", "stride", "(4, 1)", "(1, 8)"),
               (INPUT, "example_inputs[1]", "memory_format", "torch.contiguous_format", "None")],
    "threads": [(THREADS, "cpp_runtime_thread_count", "", "1", "2")],
}
#: run -> the words its change is named in.
WORDS = {
    "config": "Inductor config `max_autotune` changed: False -> True",
    "dtype": "input 1's dtype changed: float32 -> float64",
    "source": "`mul = torch.ops.aten.mul.Tensor(arg0_1, 2)` -> `mul = torch.ops.aten.mul.Tensor(arg0_1, 3)`",
    "stride": "input 1's stride changed: (4, 1) -> (1, 8)",
    "threads": "the CPU thread count the C++ code specialises on changed: 1 -> 2",
}


@pytest.mark.parametrize("run", sorted(PLANTED))
def test_each_planted_change_is_the_one_cause_named(run: str) -> None:
    d = dynscope.cache_diff(RUNS / "cold", RUNS / run)
    # both caches missed in B, each for the one planted change and nothing else
    assert {(m.cache, m.after.result) for m in d.misses} == {("fx_graph", "miss"), ("aot_autograd", "miss")}
    for miss in d.misses:
        assert miss.compile_id == "0/0" and miss.after.frame == "f"
        assert [(c.family, c.name, c.field, c.before, c.after) for c in miss.changes] == PLANTED[run]
        # AOTAutograd logs no key parts by default: its miss borrows the FX lookup's, and says so
        assert miss.why == (PARTS_DIFFER if miss.cache == "fx_graph" else FROM_FX)
        assert miss.seconds is not None and miss.seconds > 0  # the compile after the miss, from its metrics
    assert len(d.causes) == len(PLANTED[run])
    text = d.summary()
    assert WORDS[run] in text
    assert text.count("what to do:") == 2  # once per miss: the changes of a miss share one remedy


def test_the_unchanged_run_hits_and_names_no_cause() -> None:
    d = dynscope.cache_diff(RUNS / "cold", RUNS / "unchanged")
    assert d.misses == () and d.causes == ()
    assert d.counts("b") == {("fx_graph", "hit"): 1, ("aot_autograd", "hit"): 1}
    assert d.counts("a") == {("fx_graph", "miss"): 1, ("aot_autograd", "miss"): 1}
    # the hit saved what the cold compile cost (PyTorch's time_saved_ns): seconds on this CPU
    assert d.seconds_saved_b > 1.0
    assert "B missed nothing A had: no cause to name." in d.summary()
    # and the same keys: what A put in the cache is what B found
    assert {(lk.cache, lk.key) for lk in d.lookups_a} == {(lk.cache, lk.key) for lk in d.lookups_b}


def test_a_graph_under_another_compile_id_is_matched_by_its_function() -> None:
    # B's graph numbered 1/0 (say, a break earlier in B): still A's "f", still named by its change
    cold, dtype = (dynscope.load_trace(RUNS / run) for run in ("cold", "dtype"))
    renumbered = [replace(lk, compile_id="1/0") for lk in dtype.cache_lookups]  # type: ignore[union-attr]
    d = compare_lookups(cold.cache_lookups, tuple(renumbered))  # type: ignore[union-attr]
    assert {(m.compile_id, m.before.compile_id if m.before else None) for m in d.misses} == {("1/0", "0/0")}
    assert [(c.name, c.field) for c in d.causes] == [("example_inputs[1]", "dtype")]


def test_a_miss_on_the_same_key_says_the_cache_was_not_there() -> None:
    # cold against itself: B made A's keys and still missed, as a run on an empty cache folder does
    d = dynscope.cache_diff(RUNS / "cold", RUNS / "cold")
    assert [m.why for m in d.misses] == [SAME_KEY, SAME_KEY]
    assert all(m.changes == () for m in d.misses)
    assert "TORCHINDUCTOR_CACHE_DIR" in d.summary()


def test_aotautograd_names_the_change_from_its_own_parts_when_it_logs_them() -> None:
    d = dynscope.cache_diff(AOT_DEBUG / "cold", AOT_DEBUG / "config")
    aot = next(m for m in d.misses if m.cache == "aot_autograd")
    assert aot.why == PARTS_DIFFER and aot.after.parts and aot.before is not None and aot.before.parts
    assert [(c.name, c.before, c.after) for c in aot.changes] == [("inductor_config[max_autotune]", "False", "True")]
    # its own parts beside the FX ones: AOTAutograd's config, grad mode
    names = {p.name.split("[")[0] for p in aot.after.parts}
    assert {"aot_config", "grad_enabled", "autograd_config", "gm", "inductor_config"} <= names


def test_a_bypass_says_why_and_the_other_cache_names_the_change() -> None:
    d = dynscope.cache_diff(RUNS / "cold", RUNS / "freezing")
    by = {m.cache: m for m in d.misses}
    assert by["aot_autograd"].why == BYPASSED and by["aot_autograd"].after.result == "bypass"
    assert by["aot_autograd"].after.bypass_reason == "Cannot cache a graph with freezing enabled"
    assert [(c.name, c.before, c.after) for c in by["fx_graph"].changes] == [("inductor_config[freezing]", "False", "True")]
    assert "leave torch._inductor.config.freezing off" in d.summary()


def test_assert_warm_passes_a_warm_run_and_fails_a_cold_one() -> None:
    assert dynscope.assert_warm(RUNS / "unchanged").misses == ()
    with pytest.raises(dynscope.CacheMissError) as err:
        dynscope.assert_warm(RUNS / "dtype")
    assert "2 of 2 cache lookup(s) did not hit" in str(err.value)
    assert "A made no lookup" not in str(err.value)  # no reference: no comparison claimed
    assert isinstance(err.value, AssertionError)  # pytest shows it as a failed test
    with pytest.raises(dynscope.CacheMissError) as err:
        dynscope.assert_warm(RUNS / "dtype", reference=RUNS / "cold")
    assert "input 1's dtype changed: float32 -> float64" in str(err.value)
    assert err.value.diff.misses  # type: ignore[attr-defined]


def test_trace_fails_on_a_cache_miss_when_asked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["-q", "trace", str(RUNS / "unchanged"), "--fail-on-cache-miss"]) == 0
    assert main(["-q", "trace", str(RUNS / "freezing"), "--fail-on-cache-miss"]) == 1
    err = capsys.readouterr().err
    assert "AOTAutograd's cache bypass: Cannot cache a graph with freezing enabled" in err
    assert main(["-q", "trace", str(RUNS / "freezing")]) == 0


def test_another_torch_release_is_named_first_and_a_training_graph_matched_forward_and_backward() -> None:
    # the same training program (tests/traces/README.md: inductor-train.log) under 2.13 and 2.15
    traces = ROOT / "tests" / "traces"
    d = dynscope.cache_diff(traces / "torch-2.13" / "logs" / "inductor-train.log",
                            traces / "torch-2.15" / "logs" / "inductor-train.log")
    # two frames (a print break), each: AOTAutograd, then FX forward (0) and backward (1)
    assert sorted((m.compile_id, m.cache, m.after.ordinal) for m in d.misses) == [
        ("0/0", "aot_autograd", 0), ("0/0", "fx_graph", 0), ("0/0", "fx_graph", 1),
        ("1/0", "aot_autograd", 0), ("1/0", "fx_graph", 0), ("1/0", "fx_graph", 1)]
    for miss in d.misses:
        torch_changes = [c for c in miss.changes if c.family == "torch"]
        assert [(c.before, c.after) for c in torch_changes] == [("2.13.0+cpu", "2.15.0+cu132")]
    text = d.summary()
    assert text.count("torch changed: 2.13.0+cpu -> 2.15.0+cu132") == 6
    assert "as between releases" in text and "max_autotune" not in text  # the new options folded


def test_a_cache_record_keeps_its_parts_in_half_the_space() -> None:
    log = read_log(next((RUNS / "cold").glob("*.log.gz")))
    fx = [ev for ev in log.events if isinstance(ev.record, CacheLookup) and ev.record.cache == "fx_graph"]
    assert len(fx) == 1
    lookup = fx[0].record
    raw = _raw_payload(RUNS / "cold", "fx_graph_cache_miss")
    assert len(lookup.parts) == len(json.loads(raw)["components"]) == 636
    assert len(fx[0].payload) < len(raw) * 0.6  # kept: names, short hashes, values cut short
    assert lookup.key == json.loads(raw)["key"] and lookup.detail == "full_miss"
    # the compile step's copy of the parts (inductor_compile's end) is dropped on arrival
    steps = [ev for ev in log.events if ev.name in records.COMPACTED and ev.record is not None
             and not isinstance(ev.record, CacheLookup)]
    assert steps and max(len(ev.payload) for ev in steps) < 10_000


def test_runs_share_the_parts_they_have_in_common() -> None:
    # a long job's lookups hold one copy of each distinct part (some 600 Inductor options)
    cold, config = (dynscope.load_trace(RUNS / run) for run in ("cold", "config"))
    a, b = (next(lk for lk in rep.cache_lookups if lk.parts) for rep in (cold, config))  # type: ignore[union-attr]
    shared = sum(x is y for x, y in zip(a.parts, b.parts, strict=True))
    # all but max_autotune and get_decomp_fn, whose printed value holds the process's address of
    # a function (its hash is the same in both runs: compared by hash, it is no change)
    assert shared == len(a.parts) - 2
    assert a.part("fx_kwargs[get_decomp_fn]").digest == b.part("fx_kwargs[get_decomp_fn]").digest  # type: ignore[union-attr]
    assert a.part("fx_kwargs[get_decomp_fn]").value != b.part("fx_kwargs[get_decomp_fn]").value  # type: ignore[union-attr]


def test_compact_reads_a_payload_as_pytorch_wrote_it() -> None:
    raw = _raw_payload(RUNS / "unchanged", "fx_graph_cache_hit")
    data = json.loads(cache_keys.compact(raw))
    assert data["cache_state"] == "hit" and data["time_saved_ns"] > 0
    assert data["parts"][0][0] == "gm" and data["parts"][1][0] == "example_inputs[0]"
    assert data["parts"][2][0] == "[1]"  # the attribute left out when it is the previous part's
    assert cache_keys.compact("not json") == "" and cache_keys.compact("[1, 2]") == ""


def test_the_command_line_prints_the_cause_and_gates_on_a_miss(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["cache-diff", str(RUNS / "cold"), str(RUNS / "config")]) == 0
    out = capsys.readouterr().out
    assert "Inductor config `max_autotune` changed: False -> True" in out
    assert main(["cache-diff", str(RUNS / "cold"), str(RUNS / "config"), "--fail-on-cache-miss"]) == 1
    capsys.readouterr()
    assert main(["cache-diff", str(RUNS / "cold"), str(RUNS / "unchanged"), "--fail-on-cache-miss"]) == 0
    assert main(["cache-diff", str(RUNS / "nowhere"), str(RUNS / "unchanged")]) == 2
    assert "no such log or folder" in capsys.readouterr().err


def test_reading_the_runs_never_imports_torch() -> None:
    code = (
        "import sys, dynscope\n"
        f"d = dynscope.cache_diff({str(RUNS / 'cold')!r}, {str(RUNS / 'dtype')!r})\n"
        "assert d.misses and d.causes[0].field == 'dtype', d\n"
        "print('torch' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


@pytest.mark.heavy
@pytest.mark.slow
def test_live_runs_in_fresh_processes_name_the_changed_config(tmp_path: Path) -> None:
    # Recorded now, as the stored runs were: cold fills a fresh cache, config reads it with
    # max_autotune on, each in its own process (seconds of Inductor on a CPU each).
    spec = importlib.util.spec_from_file_location("record_cache_runs", ROOT / "scripts" / "record_cache_runs.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    script.record(tmp_path, only=("unchanged", "config"))
    assert dynscope.cache_diff(tmp_path / "cold", tmp_path / "unchanged").misses == ()
    d = dynscope.cache_diff(tmp_path / "cold", tmp_path / "config")
    assert [(c.name, c.before, c.after) for c in d.causes] == [("inductor_config[max_autotune]", "False", "True")]


def test_reports_carry_their_lookups_through_save_and_load(tmp_path: Path) -> None:
    cold, dtype = dynscope.load_trace(RUNS / "cold"), dynscope.load_trace(RUNS / "dtype")
    assert isinstance(cold, dynscope.Report) and isinstance(dtype, dynscope.Report)
    assert [(lk.cache, lk.result) for lk in dtype.cache_lookups] == [("aot_autograd", "miss"), ("fx_graph", "miss")]
    saved = dynscope.load(dtype.save(tmp_path / "dtype.json"))
    assert saved.cache_lookups == dtype.cache_lookups
    d = dynscope.cache_diff(cold, saved)
    assert [(c.name, c.field) for c in d.causes] == [("example_inputs[1]", "dtype")]
    assert d.summary().startswith("A: report A")
    assert dynscope.assert_warm(dynscope.load_trace(RUNS / "unchanged")).misses == ()


#: A program compiled with the default Inductor inside dynscope.capture(), its report saved.
_CAPTURED = """\
import sys
import torch
import dynscope
if sys.argv[2] == "autotune":
    torch._inductor.config.max_autotune = True
def f(x, y):
    return (x * 2 + y).relu().sum(dim=0)
with dynscope.capture() as cap:
    torch.compile(f)(torch.ones(8, 4), torch.ones(8, 4))
cap.report.save(sys.argv[1])
"""


@pytest.mark.heavy
@pytest.mark.slow
def test_capture_reports_in_fresh_processes_name_the_changed_config(tmp_path: Path) -> None:
    # Live, in process: dynscope.capture() keeps each lookup on the report, and watching
    # changes no cache key (the second, unchanged run hits what the first one cached).
    program = tmp_path / "program.py"
    program.write_text(_CAPTURED, encoding="utf-8")
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "cache"), "CUDA_VISIBLE_DEVICES": "",
           "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    reports = {}
    for run, how in (("cold", "same"), ("unchanged", "same"), ("config", "autotune")):
        out = tmp_path / f"{run}.json"
        done = subprocess.run([sys.executable, str(program), str(out), how], env=env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        reports[run] = dynscope.load(out)
    assert {lk.result for lk in reports["cold"].cache_lookups} == {"miss"}
    assert dynscope.assert_warm(reports["unchanged"], reference=reports["cold"]).misses == ()
    d = dynscope.cache_diff(reports["cold"], reports["config"])
    assert [(c.name, c.before, c.after) for c in d.causes] == [("inductor_config[max_autotune]", "False", "True")]


def _raw_payload(folder: Path, name: str) -> str:
    """The payload of the first artifact of this name in a stored run's log, as PyTorch wrote it."""
    lines = gzip.decompress(next(folder.glob("*.log.gz")).read_bytes()).decode("utf-8").split("\n")
    for i, line in enumerate(lines):
        if not line.startswith("\t") and f'{{"artifact": {{"name": "{name}"' in line:
            body = []
            for nxt in lines[i + 1:]:
                if not nxt.startswith("\t"):
                    break
                body.append(nxt[1:])
            return "\n".join(body)
    raise AssertionError(f"no {name} record in {folder}")


# -- across ranks: which ranks missed what the others hit, and why ----------------------------------

RANK_RUNS = Path(__file__).resolve().parents[1] / "traces" / "cache" / "torch-2.13-ranks"


def _cache_divergence(run: str) -> dynscope.Divergence:
    merged = dynscope.load_trace(RANK_RUNS / run)
    assert isinstance(merged, dynscope.MultiRankReport) and merged.ranks == (0, 1)
    (d,) = [d for d in merged.divergences if d.kind == "cache"]
    return d


def test_a_rank_with_a_cache_folder_of_its_own_is_named_with_the_same_key() -> None:
    # Recorded by scripts/record_cache_ranks.py: a real two-rank gloo job restarted, rank 1 on
    # an empty node-local cache folder. Its keys are rank 0's: nothing in the program differs.
    d = _cache_divergence("warm")
    assert d.ranks == (1,)
    (why,) = [f for f in d.facts if f.what == "cache_why"]
    assert why.ranks == (1,) and why.others == (0,) and why.args[2] == "same key"
    assert ("rank 1 missed 0/0's AOTAutograd's cache where rank 0 hit: the same key as theirs, so the entry was "
            "not in these ranks' cache: a rank-local cache folder") in d.detail


def test_a_rank_on_another_core_count_is_named_by_the_key_part_that_differs() -> None:
    d = _cache_divergence("threads")
    (why,) = [f for f in d.facts if f.what == "cache_why"]
    # AOTAutograd logs no parts unless its logger is at DEBUG: the FX lookup's parts say it.
    assert why.args[2] in ("parts differ", "parts from the FX graph cache") and why.args[4] == "threads"
    assert "rank 1 missed 0/0's AOTAutograd's cache where rank 0 hit: the CPU thread count the C++ code " \
           "specialises on changed: 1 -> 2" in d.detail


def test_a_cold_job_whose_ranks_all_missed_names_no_cause() -> None:
    merged = dynscope.load_trace(RANK_RUNS / "cold")
    assert isinstance(merged, dynscope.MultiRankReport)
    assert not [d for d in merged.divergences if d.kind == "cache"]
    assert all(lk.result == "miss" for r in merged.reports for lk in r.cache_lookups)


def test_a_large_job_with_rank_local_keys_explains_a_bounded_number_of_groups() -> None:
    # 64 ranks, each its own keys (as a device index in every key makes them) and half of
    # them missing: the divergence explains the first groups, not 64 x 64 comparisons.
    from dataclasses import replace

    from dynscope._model.merge import CACHE_GROUPS_SAID, merge_reports

    warm = dynscope.load_trace(RANK_RUNS / "warm")
    assert isinstance(warm, dynscope.MultiRankReport)
    reports = []
    for r in range(64):
        base = warm.reports[r % 2]
        lookups = tuple(replace(lk, key=f"{lk.key}-{r}") for lk in base.cache_lookups)
        reports.append((replace(base, rank=r, world_size=64, cache_lookups=lookups), f"rank-{r}.json"))
    merged = merge_reports(reports)
    (d,) = [d for d in merged.divergences if d.kind == "cache"]
    whys = [f for f in d.facts if f.what == "cache_why"]
    # The groups explained alike are one fact naming all their ranks.
    (why,) = whys
    assert len(why.ranks) == CACHE_GROUPS_SAID and why.others == (0,)
    assert f"ranks {', '.join(map(str, why.ranks[:2]))}" in d.detail
