"""The whole fix corpus measured (tests/corpus/fix_measure.py): at least two thirds of its user-code
break sites removed by verified patches, none changing an output on inputs fix never saw, every
site fixed (or not) as its SITE marker says. A module of its own: at three minutes the heavy
tier's longest test, so pytest-xdist (--dist loadscope) runs it beside test_fix.py's tests, not
after them on the same worker."""

from __future__ import annotations

import pytest

from tests.corpus import fix_measure, fix_shortcuts, fix_state


@pytest.mark.heavy
def test_the_corpus_is_fixed_at_two_thirds_of_its_sites_and_no_verified_patch_changes_an_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # tests/corpus/fix_shortcuts.py's programs are each asserted live, program by program, in
    # test_fix_shortcuts.py (benchmarks/fix_corpus.py reruns their verified patches on unseen
    # inputs too): measured again here they would cost the heavy tier half a minute for nothing new.
    # The state programs (optimizers, schedulers, logged losses) are measured apart as well: their
    # own share of the sites a rewrite may fix (not marked none) is held to 90% (13 of 14 when
    # measured), so one kind of rewrite cannot hide behind the others.
    state = fix_measure.measure([fix_state])
    state_fixable = sum(r.get("fixable", 0) for r in state["per"].values())
    assert sum(r["removed"] for r in state["per"].values()) / state_fixable >= 0.9, state["per"]
    m = fix_measure.merged(state, fix_measure.measure(
        [c for c in fix_measure.CORPUS if c not in (fix_shortcuts, fix_state)]))
    per = m["per"]
    found = sum(r["found"] for r in per.values())
    removed = sum(r["removed"] for r in per.values())
    with capsys.disabled():
        print(f"\nfix corpus: {removed} of {found} break sites in user code removed by verified patches "
              f"({removed / found:.0%}); {len(m['on_purpose'])} on purpose (torch.optim)")
        for cat, r in sorted(per.items()):
            print(f"  {cat:40} found {r['found']:2}  patched {r['patched']:2}  verified {r['verified']:2}  "
                  f"removed {r['removed']:2}")
    assert found >= 40
    # 81 of 117 when measured (69%). It was three quarters until a print that prints, or a list
    # of logged floats made tensors, stopped counting as kept behaviour (fix/said.py): those
    # guards are proposed now, the message quoted.
    assert removed / found >= 2 / 3
    assert m["changed"] == [], "a verified patch changed an output on another input"
    assert m["mismatched"] == [], "a site was fixed (or not) otherwise than its SITE marker says"
