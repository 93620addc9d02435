"""Shortcuts on a tensor test dropped, rows computed for every index and kept by torch.where,
and patches of a plain object's code the model holds (issue "Fix what we have never seen"): on
source text in the fast tier; live on tests/corpus/fix_shortcuts.py in the heavy tier, where a
shortcut is verified only when the run took it, a patch whose code never ran says so, and a
scheduler object's class is swapped for its patched copy with the model's."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

import dynscope
from dynscope._capture.fix.branches import CONDITIONAL, SHORTCUT, WHERE
from dynscope._capture.fix.checks import ALWAYS
from dynscope._capture.fix.frames import COMPREHENSION
from dynscope._capture.fix.host import ENDS, MATH, SCATTER, UNSORTED
from dynscope._capture.fix.masks import INLINE
from dynscope._capture.fix.numbers import INDEX
from dynscope._capture.fix.rewrites import TENSOR, candidates
from dynscope._capture.fix.verify import patched_module
from dynscope._lexicon.break_categories import BRANCH, DYNAMIC_SHAPE
from dynscope._render import fix_text
from tests.corpus import fix_shortcuts as fs

HEAD = "import torch\n\n\n"


def _found(body: str, line: int, category: str = BRANCH) -> dict[str, tuple[str, tuple[int, ...]]]:
    """rewrite name -> (its new lines, the lines that must have run), for the statement at
    ``line`` of ``body`` (counted from body's first line)."""
    found, _ = candidates(HEAD + body, line + HEAD.count("\n"), category)
    return {rw.name: ("".join(rw.replacement), tuple(t - HEAD.count("\n") for t in rw.taken)) for rw in found}


SCAN = ("def scan(u, lengths):\n"
        "    for start in range(0, 12, 3):\n"
        "        if (lengths <= start).all():\n"
        "            break\n"
        "        u = u + start\n"
        "    return u\n")


def test_a_loop_exit_on_a_tensor_test_is_dropped_and_needs_the_exit_to_have_run() -> None:
    # The if and its break go; the statement after it stays as written. Its evidence is the
    # break's line (4): verified only where the run took it.
    assert _found(SCAN, 3)[SHORTCUT] == ("        u = u + start\n", (4,))
    # continue the same way; the last statement of a block gives way to the one before it.
    body = SCAN.replace("break", "continue")
    assert _found(body, 3)[SHORTCUT] == ("        u = u + start\n", (4,))
    body = "def f(x, m):\n    y = x * 2\n    if (m == 1).all():\n        return y\n"
    assert _found(body, 3)[SHORTCUT] == ("    y = x * 2\n", (4,))


def test_an_optional_input_set_to_none_on_a_tensor_test_is_kept_and_needs_the_test_to_have_held() -> None:
    # ESM's encoder: an all-False padding mask dropped; the mask applied instead (an identity).
    body = ("def encode(self, x, padding_mask):\n"
            "    if not padding_mask.any():\n"
            "        padding_mask = None\n"
            "    return self.layer(x, padding_mask)\n")
    found = _found(body, 2)
    assert found[SHORTCUT] == ("    return self.layer(x, padding_mask)\n", (3,))
    assert WHERE not in found  # torch.where has no None to pick
    # Set to another value, or not on a tensor test: not a dropped input.
    assert SHORTCUT not in _found(body.replace("padding_mask = None", "padding_mask = x"), 2)
    assert SHORTCUT not in _found(body.replace("not padding_mask.any()", "padding_mask is None"), 2)


@pytest.mark.parametrize(("old", "new"), [
    ("    for start in range(0, 12, 3):\n", "    start = 0\n    while True:\n"),  # the while's only exit
    ("            break\n", "            u = u * 0\n            break\n"),  # not a bare exit: it does work first
    ("        if (lengths <= start).all():\n", "        if lengths is None:\n"),  # no tensor in the test
])
def test_an_exit_that_ends_a_while_loop_or_does_work_or_tests_no_tensor_is_kept(old: str, new: str) -> None:
    body = SCAN.replace(old, new)
    line = next(i for i, ln in enumerate(body.splitlines(), 1) if ln.strip().startswith("if "))
    assert SHORTCUT not in _found(body, line)


MASK = ("def extended(mask):\n"
        "    if (mask == 1).all():\n"
        "        out = None\n"
        "    else:\n"
        "        out = (1.0 - mask.float()) * -1e9\n"
        "    return out\n")


def test_an_if_else_keeps_either_side_alone_each_needing_the_other_to_have_run() -> None:
    found, _ = candidates(HEAD + MASK, 2 + HEAD.count("\n"), BRANCH)
    kept = [("".join(rw.replacement), tuple(t - HEAD.count("\n") for t in rw.taken))
            for rw in found if rw.name == SHORTCUT]
    # The else alone (needs the if's side, line 3, to have run), then the if's side alone.
    assert kept == [("    out = (1.0 - mask.float()) * -1e9\n", (3,)), ("    out = None\n", (5,))]
    # No where over the names: torch.where has no None to pick (it would raise TypeError).
    names = [rw.name for rw in found]
    assert names == [SHORTCUT, SHORTCUT]
    # The shortcuts come after every rewrite that keeps both sides (the where over the names).
    both = [rw.name for rw in candidates(HEAD + MASK.replace("out = None", "out = mask * 0.0"),
                                         2 + HEAD.count("\n"), BRANCH)[0]]
    assert both == [WHERE, SHORTCUT, SHORTCUT]


T5 = ("def block(self, h):\n"
      "    if h.dtype == torch.float16 and torch.isinf(h).any():\n"
      "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
      "        h = torch.clamp(h, min=-clamp_value, max=clamp_value)\n"
      "    h = self.ff(h)\n"
      "    if h.dtype == torch.float16 and torch.isinf(h).any():\n"
      "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
      "        h = torch.clamp(h, min=-clamp_value, max=clamp_value)\n"
      "    return h\n")


def test_a_dtype_test_stays_python_and_a_name_each_branch_binds_before_reading_is_its_own() -> None:
    # `h.dtype == torch.float16` is Python's to decide: it stays an `if` around the where. The
    # clamp value is bound in each if before it is read, so neither reads the other's: each is
    # computed whatever the tensor test, not picked (it may be unbound before the first if).
    want = ("    if h.dtype == torch.float16:\n"
            "        _pred = torch.isinf(h).any()\n"
            "        clamp_value = torch.finfo(h.dtype).max - 1000\n"
            "        h = torch.where(_pred, torch.clamp(h, min=-clamp_value, max=clamp_value), h)\n")
    assert _found(T5, 2)[WHERE][0] == want
    assert _found(T5, 6)[WHERE][0] == want
    # A read of the value after the if, before it is bound again: one path has none to give.
    read = T5.replace("    h = self.ff(h)\n", "    h = self.ff(h) * clamp_value\n")
    assert WHERE not in _found(read, 2)


def test_an_if_whose_body_runs_alone_needs_a_run_that_skipped_it() -> None:
    body = ("def step(self, pos, done):\n"
            "    if done.any():\n"
            "        pos = self.reset(pos, done)\n"
            "    return pos\n")
    assert _found(body, 2)[ALWAYS] == ("    pos = self.reset(pos, done)\n", ())
    found, _ = candidates(HEAD + body, 2 + HEAD.count("\n"), BRANCH)
    (rw,) = [r for r in found if r.name == ALWAYS]
    assert rw.skipped == (2 + HEAD.count("\n"), 3 + HEAD.count("\n"))  # the test's line, the body's
    # An exit or a raise in the body is no update that a false test makes a no-op.
    for exit_ in ("return pos", "raise ValueError(pos)"):
        assert ALWAYS not in _found(body.replace("pos = self.reset(pos, done)", exit_), 2)


def test_rows_computed_for_a_nonzero_index_and_written_back_are_one_where_over_every_row() -> None:
    body = ("def pool(pooled, levels, feat, boxes, lvl):\n"
            "    idx = torch.nonzero(levels == lvl).squeeze(1)\n"
            "    pooled[idx] = feat.mean(0) * boxes[idx, :1] + boxes.index_select(0, idx)[:, 1:2]\n"
            "    return pooled\n")
    assert _found(body, 2, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    pooled.copy_(torch.where((levels == lvl).reshape((-1,) + (1,) * (pooled.dim() - 1)), "
        "feat.mean(0) * boxes[:, :1] + boxes[:, 1:2], pooled))\n")
    # A boolean mask's selections bound to names, then written back: substituted, the mask
    # widened over the target's trailing dimensions.
    bound = ("def route(x, logits, block):\n"
             "    picked = logits > 0\n"
             "    tokens = x[picked]\n"
             "    weights = logits[picked]\n"
             "    out = x.clone()\n"
             "    out[picked] = tokens + weights.unsqueeze(-1) * block(tokens)\n"
             "    return out\n")
    assert _found(bound, 3, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    out = x.clone()\n"
        "    out.copy_(torch.where((picked).reshape((picked).shape + (1,) * (out.dim() - (picked).dim())), "
        "x + logits.unsqueeze(-1) * block(x), out))\n")
    assert SCATTER not in _found(bound.replace("    return out\n", "    return out, tokens\n"), 3, DYNAMIC_SHAPE)
    # A mask named like one (YOLOv8's `mask_gt`): its selections are rows, not an index a mask
    # picked, where nothing indexes by them.
    named = bound.replace("picked", "mask_gt")
    assert _found(named, 3, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    out = x.clone()\n"
        "    out.copy_(torch.where((mask_gt).reshape((mask_gt).shape + (1,) * (out.dim() - (mask_gt).dim())), "
        "x + logits.unsqueeze(-1) * block(x), out))\n")
    # The index read anywhere else (here as a count) keeps the selection.
    assert SCATTER not in _found(body.replace("    return pooled\n", "    return pooled, idx.numel()\n"), 2,
                                 DYNAMIC_SHAPE)


def test_a_guarded_write_of_nonzero_rows_and_an_index_a_mask_picked_are_one_where() -> None:
    # mmdet's shape: nonzero(...).squeeze() and the write under `if pos_inds.numel() > 0:`
    # (with no row named, the where writes nothing: the test goes).
    body = ("def labels(assigned, gt_labels, n):\n"
            "    out = assigned.new_full((n,), -1)\n"
            "    pos_inds = torch.nonzero(assigned > 0, as_tuple=False).squeeze()\n"
            "    if pos_inds.numel() > 0:\n"
            "        out[pos_inds] = gt_labels[assigned[pos_inds] - 1]\n"
            "    return out\n")
    assert _found(body, 3, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    out.copy_(torch.where((assigned > 0).reshape((-1,) + (1,) * (out.dim() - 1)), "
        "gt_labels[assigned - 1], out))\n")
    # A test that asks more than "any row?" keeps the rewrite away.
    assert SCATTER not in _found(body.replace("numel() > 0", "numel() > 3"), 3, DYNAMIC_SHAPE)
    # Entries of an index a mask keeps, written back: the rows they name, counted by a scatter.
    picked = ("def keep_best(flat, cand, is_pos, src):\n"
              "    index = cand.view(-1)[is_pos.view(-1)]\n"
              "    flat[index] = src[index]\n"
              "    return flat\n")
    assert _found(picked, 2, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    flat.copy_(torch.where((torch.zeros(flat.shape[0], dtype=torch.int64, device=flat.device)"
        ".index_add(0, cand.view(-1), is_pos.view(-1).long()) > 0)"
        ".reshape((-1,) + (1,) * (flat.dim() - 1)), src, flat))\n")
    # Indexed by something that does not look like a mask (a float score): no rewrite.
    assert SCATTER not in _found(picked.replace("is_pos.view(-1)", "score"), 2, DYNAMIC_SHAPE)


def test_the_last_or_first_nonzero_of_a_mask_is_an_argmax_over_its_positions() -> None:
    body = "def f(mask, reward, score):\n    last = mask.nonzero()[-1]\n    reward[last] += score\n    return reward\n"
    assert _found(body, 2, DYNAMIC_SHAPE)[ENDS][0] == (
        "    last = (mask.ne(0).long() * torch.arange(mask.shape[0], device=mask.device)).argmax().reshape(1)\n")
    assert _found(body.replace("[-1]", "[0]").replace("mask.nonzero()", "torch.nonzero(mask)"), 2,
                  DYNAMIC_SHAPE)[ENDS][0] == "    last = mask.ne(0).int().argmax().reshape(1)\n"
    assert ENDS not in _found(body.replace("[-1]", "[1]"), 2, DYNAMIC_SHAPE)  # the second: no argmax says it


def test_several_writes_through_one_nonzero_index_are_each_a_where_rows_or_columns() -> None:
    # A sparse autoencoder's dead latents re-initialised: columns of the encoder, entries of the
    # bias and of a counter, a statement between them kept as it is.
    body = ("def resample(self, dead):\n"
            "    idx = dead.nonzero().squeeze(1)\n"
            "    direction = self.W_dec.mean(0) * 0.2\n"
            "    self.W_enc[:, idx] = direction[:, None]\n"
            "    self.b_enc[idx] = 0.0\n"
            "    return self.b_enc\n")
    assert _found(body, 2, DYNAMIC_SHAPE)[SCATTER][0] == (
        "    direction = self.W_dec.mean(0) * 0.2\n"
        "    self.W_enc.copy_(torch.where((dead).reshape((1, -1) + (1,) * (self.W_enc.dim() - 2)), direction[:, None], "
        "self.W_enc))\n"
        "    self.b_enc.copy_(torch.where((dead).reshape((-1,) + (1,) * (self.b_enc.dim() - 1)), 0.0, self.b_enc))\n")
    # A statement between that rebinds the mask, or a write whose value reads the index as a
    # count: no rewrite.
    assert SCATTER not in _found(body.replace("    direction =", "    dead = ~dead\n    direction ="), 2, DYNAMIC_SHAPE)
    assert SCATTER not in _found(body.replace("direction[:, None]", "torch.zeros(len(idx))"), 2, DYNAMIC_SHAPE)


def test_a_sorted_mask_indexing_the_sort_is_scattered_back_in_the_vocabularys_order() -> None:
    body = ("def top_p(logits, p):\n"
            "    sorted_logits, sorted_indices = torch.sort(logits, descending=True)\n"
            "    remove = sorted_logits.softmax(-1).cumsum(-1) > p\n"
            "    indices = sorted_indices[remove]\n"
            "    logits[indices] = -float('inf')\n"
            "    return logits\n")
    assert _found(body, 4, DYNAMIC_SHAPE)[UNSORTED][0] == (
        "    logits.masked_fill_(remove.scatter(-1, sorted_indices, remove), -float('inf'))\n")
    # Indices that are no sort's (no permutation), or a sort over another dimension: left alone.
    assert UNSORTED not in _found(body.replace("torch.sort(logits, descending=True)", "torch.topk(logits, 3)"), 4,
                                  DYNAMIC_SHAPE)
    assert UNSORTED not in _found(body.replace("descending=True", "dim=0"), 4, DYNAMIC_SHAPE)


def test_a_patched_copy_logs_through_the_original_modules_logger(tmp_path: Path) -> None:
    # Named as the original while it runs, its logging.getLogger(__name__) is the user's own
    # logger (level, handlers): a patch elsewhere in the file says what the original said.
    patched = patched_module(fs.__file__, Path(fs.__file__).read_bytes())
    with patched as module:
        assert module.logger is logging.getLogger(fs.__name__) is fs.logger
        assert module.__name__ == fs.__name__ and module.PassedTable is not fs.PassedTable


def _fix(name: str) -> dynscope.FixResult:
    model, inputs = fs.PROGRAMS[name]()
    return dynscope.fix(model, inputs)


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "rewrites"), [
    ("chunked_scan", [SHORTCUT]), ("all_ones_mask", [SHORTCUT]), ("level_pooler", [SCATTER]),
    ("fp16_clamp", [WHERE, WHERE]), ("done_reset", [ALWAYS]), ("depth_router", [SCATTER]),
    ("last_token_reward", [ENDS]), ("nucleus_head", [UNSORTED]), ("max_iou_assigner", [SCATTER, SCATTER]),
    ("dead_latents", [SCATTER]), ("optional_padding", [SHORTCUT]),
    # criteria held in a plain list, not an nn.ModuleList: their classes swapped too
    ("listed_criteria", [INLINE]),
    # a plain object passed in as an input: its class swapped on a copy of the inputs
    ("passed_table", [TENSOR]),
    # a comprehension over a zip of a plain list, a frame of its own on 3.11: built by a loop (the
    # comprehension before it then breaks the same way, and is rewritten with it: one rewrite at two
    # statements, named once)
    ("head_losses", [COMPREHENSION]),
])
def test_shortcuts_taken_and_rows_written_back_are_verified_live(name: str, rewrites: list[str]) -> None:
    res = _fix(name)
    done = [p for p in res.patches if p.verified]
    assert [p.rewrite for p in done] == rewrites, [(p.rewrite, p.why_not) for p in res.patches]
    p = done[0]
    assert p.breaks_after == 0 and p.outputs_matched and p.gradients_matched is not False and p.assumes
    # The encoder's warning is said by the eager run: its guard is not verified, and the
    # shortcut's patch, which keeps it, is (the copy logs through the same logger).
    # (the loss's print in head_losses is said: its guard is proposed, and its break stays, once
    # a head)
    assert res.breaks_after == {"all_ones_mask": 1, "head_losses": 2}.get(name, 0)
    if name == "depth_router":
        # The second selection is a statement of the first's pattern: rewritten by its patch.
        (u,) = res.unpatched
        assert u.gone_with == (p.site,) and "part of the verified patch at" in u.why
    if name == "level_pooler":
        # The comprehension over a zip broke only because the loop after it did: no rewrite of
        # its own, gone with the loop's patch, and the result says so.
        (u,) = res.unpatched
        assert u.gone_with == (p.site,) and u.category == "generator/iterator"
        assert f"gone with the verified patches at {p.site}" in fix_text(res)


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "reason"), [
    ("never_taken", "was never taken in the run"),
    ("skip_non_finite_batch", "outputs differ"),
    ("every_step_reset", "ran every time its test did"),
])
def test_a_shortcut_not_taken_or_not_equal_and_code_that_never_ran_are_not_verified(name: str, reason: str) -> None:
    res = _fix(name)
    tried = [p for p in res.patches if p.rewrite != "guard side effect"]
    assert tried and not any(p.verified for p in tried), [(p.rewrite, p.why_not) for p in tried]
    assert all(reason in p.why_not for p in tried), [p.why_not for p in tried]


@pytest.mark.heavy
def test_a_while_loop_exit_gets_no_patch() -> None:
    res = _fix("fixed_point")
    assert not res.patches and len(res.unpatched) == 1


@pytest.mark.heavy
def test_a_scheduler_the_model_holds_as_a_plain_object_runs_its_patched_copy() -> None:
    # The scheduler is no module: fix swaps its class for the patched copy's too, so each of
    # the three rewrites in its step and its per-sample clip runs, and each verifies.
    res = _fix("scheduler_loop")
    assert sorted((p.rewrite, p.verified, p.breaks_after) for p in res.patches) == sorted([
        (INDEX, True, 0), (f"{CONDITIONAL}, then {INDEX}", True, 0), (MATH, True, 0)]), [
        (p.rewrite, p.why_not) for p in res.patches]
    assert res.breaks_before == 12 and res.breaks_after == 0 and res.outputs_matched_after
