"""Checks on a tensor's value (dynscope/_capture/fix/checks.py), a branch with its own temporary
(fix/branches.py) and a size unpacked from ``.tolist()``: each on source text, where it
applies and where it must refuse, in the fast tier; each live on tests/corpus/fix_checks.py in
the heavy tier, verified where outputs and gradients equal the unpatched eager run's."""

from __future__ import annotations

import pytest

import dynscope
from dynscope._capture.fix import checks
from dynscope._capture.fix.branches import COND, WHERE
from dynscope._capture.fix.rewrites import GUARD, NEW_IDIOM, TENSOR, TENSOR_0D, TENSOR_CHECKED, candidates
from dynscope._lexicon.break_categories import BRANCH, OTHER, SCALAR
from tests.corpus import fix_checks as fc

HEAD = "import logging\nimport torch\n\nlog = logging.getLogger(__name__)\n\n\n"


def _made(body: str, line: int, category: str) -> dict[str, str]:
    """rewrite name -> its replacement lines, for the statement at ``line`` of ``body``."""
    found, _ = candidates(HEAD + body, line + HEAD.count("\n"), category)
    return {rw.name: "".join(rw.replacement) for rw in found}


def _why(body: str, line: int, category: str) -> str:
    return candidates(HEAD + body, line + HEAD.count("\n"), category)[1]


WARNS = """\
def forward(self, x, mask):
    if (mask[:, -1] == 0).any():
        log.warning("right padding")
        print("check the tokenizer", x.shape)
    return x * mask
"""


def test_a_check_whose_body_only_reports_runs_in_eager_code_only() -> None:
    for category in (BRANCH, SCALAR):
        assert _made(WARNS, 2, category)[checks.GUARD_CHECK] == (
            "    if not torch.compiler.is_compiling():\n"
            "        if (mask[:, -1] == 0).any():\n"
            "            log.warning(\"right padding\")\n"
            "            print(\"check the tokenizer\", x.shape)\n")


@pytest.mark.parametrize(("old", "new"), [
    ('        print("check the tokenizer", x.shape)\n', "        x.add_(1)\n"),  # the body changes a value in place
    ('        print("check the tokenizer", x.shape)\n',
     '        print("check the tokenizer", x.shape)\n    else:\n        log.info("fine")\n'),  # an else
])
def test_a_check_that_does_more_than_report_is_not_guarded(old: str, new: str) -> None:
    assert checks.GUARD_CHECK not in _made(WARNS.replace(old, new), 2, BRANCH)


RAISES = """\
def forward(self, loss):
    if torch.isnan(loss).any() or loss.item() > 1e9:
        raise FloatingPointError("the loss diverged")
    return loss
"""


def test_a_check_that_raises_becomes_an_assert_dynamo_traces_and_says_what_it_changes() -> None:
    assert _made(RAISES, 2, BRANCH)[checks.ASSERT] == (
        "    torch._assert_async(torch.logical_not(torch.isnan(loss).any() | (loss > 1000000000.0)), "
        "'the loss diverged')\n")
    (rw,) = [r for r in candidates(HEAD + RAISES, 2 + HEAD.count("\n"), BRANCH)[0] if r.name == checks.ASSERT]
    assert "as RuntimeError (eager and compiled; asynchronously on a GPU" in rw.note
    assert "instead of FloatingPointError: code that catches FloatingPointError no longer does" in rw.note
    # Another exception than RuntimeError: what a caller catches is behaviour no run shows.
    assert "instead of FloatingPointError" in rw.unchecked and "proposed" in rw.unchecked
    runtime = RAISES.replace("FloatingPointError", "RuntimeError")
    (same,) = [r for r in candidates(HEAD + runtime, 2 + HEAD.count("\n"), BRANCH)[0] if r.name == checks.ASSERT]
    assert not same.unchecked and "instead of" not in same.note
    # A bare raise of a class: the test is the message.
    bare = RAISES.replace('raise FloatingPointError("the loss diverged")', "raise FloatingPointError")
    assert "'torch.isnan(loss).any() or loss.item() > 1000000000.0 held'" in _made(bare, 2, BRANCH)[checks.ASSERT]


def test_an_f_string_message_names_its_values_in_braces() -> None:
    body = RAISES.replace('raise FloatingPointError("the loss diverged")',
                          'raise FloatingPointError(f"loss {loss.item():.3f} at {step}")')
    made = _made(body, 2, BRANCH)[checks.ASSERT]
    assert made.endswith(", 'loss {loss.item()} at {step}')\n"), made
    (rw,) = [r for r in candidates(HEAD + body, 2 + HEAD.count("\n"), BRANCH)[0] if r.name == checks.ASSERT]
    assert rw.note.endswith("the message names the values it showed (in braces) instead of showing them")


@pytest.mark.parametrize("raise_line", [
    'raise ValueError("loss " + str(loss))',  # a message made by a call
    'raise ValueError("a", "b")',  # more than one argument
    "raise",  # a re-raise
])
def test_a_raise_an_assert_cannot_carry_is_left_alone(raise_line: str) -> None:
    body = RAISES.replace('raise FloatingPointError("the loss diverged")', raise_line)
    assert checks.ASSERT not in _made(body, 2, BRANCH)


TEMPORARY = """\
def forward(self, scores, mask):
    if (mask == 0).any():
        bias = (1.0 - mask.float()) * -1e4
        scores = scores + bias
    return scores.softmax(-1)
"""


def test_a_branch_that_makes_its_own_temporary_computes_it_whatever_the_test() -> None:
    assert _made(TEMPORARY, 2, BRANCH)[WHERE] == (
        "    _pred = (mask == 0).any()\n"
        "    bias = (1.0 - mask.float()) * -1e4\n"
        "    scores = torch.where(_pred, scores + bias, scores)\n")
    (rw,) = [r for r in candidates(HEAD + TEMPORARY, 2 + HEAD.count("\n"), BRANCH)[0] if r.name == WHERE]
    assert "`bias` is computed whatever the test" in rw.note
    # Read after the if (on one path only): no value to give it on the other.
    assert WHERE not in _made(TEMPORARY.replace("return scores.softmax(-1)", "return scores + bias"), 2, BRANCH)
    # Bound before the if: a where keeps its old value, as before.
    before = TEMPORARY.replace("    if (mask", "    bias = scores * 0\n    if (mask")
    assert "    bias = torch.where(_pred, (1.0 - mask.float()) * -1e4, bias)\n" in _made(before, 3, BRANCH)[WHERE]


ELSE_TEMPORARY = """\
def oks(xd, xg, x0, x1, k1):
    if k1 > 0:
        dx = xd - xg
    else:
        z = torch.zeros_like(xd)
        dx = torch.maximum(z, x0 - xd) + torch.maximum(z, xd - x1)
    return dx
"""


def test_a_temporary_of_the_else_branch_is_made_before_the_names_that_read_it() -> None:
    # COCO's OKS: the else branch makes `z` first; the where keeps that order, and torch.cond
    # keeps `z` a local of its branch (no operand: it has no value before the if).
    assert _made(ELSE_TEMPORARY, 2, BRANCH)[WHERE] == (
        "    _pred = k1 > 0\n"
        "    z = torch.zeros_like(xd)\n"
        "    dx = torch.where(_pred, xd - xg, torch.maximum(z, x0 - xd) + torch.maximum(z, xd - x1))\n")
    cond = _made(ELSE_TEMPORARY, 2, BRANCH)[COND]
    assert "def _else():" in cond and "dx, = torch.cond(k1 > 0, _then, _else, ())" in cond
    assert "return (dx,)" in cond and "_else(z)" not in cond


def test_an_element_of_a_tensor_read_back_by_int_stays_a_0_dim_tensor() -> None:
    # GNMT's length penalty, hypothesis by hypothesis: int() of one element, used in arithmetic.
    body = "def pen(scores, lengths, b, k):\n    n = int(lengths[b, k])\n    return scores / ((5.0 + n) / 6.0)\n"
    assert _made(body, 2, SCALAR)[TENSOR] == "    n = lengths[b, k].detach().long()\n"
    # A size's element or a slice is no tensor element read back.
    assert TENSOR not in _made(body.replace("lengths[b, k]", "lengths.shape[0]"), 2, SCALAR)
    assert TENSOR not in _made(body.replace("lengths[b, k]", "lengths[1:]"), 2, SCALAR)


def test_a_name_read_back_by_int_stays_a_tensor_where_nothing_else_is_read_back() -> None:
    # A logQ correction's step counter, a buffer: int(self.step) at the break is a tensor read.
    body = "def seen(self, a):\n    t = int(self.step)\n    return t - a\n"
    assert _made(body, 2, SCALAR)[TENSOR] == "    t = self.step.detach().long()\n"
    # float() of one: a float tensor (a counter is integral; Python's float is a float).
    assert _made(body.replace("int(self.step)", "float(t)"), 2, SCALAR)[TENSOR] == "    t = t.detach().float()\n"
    # Beside a tensor read back, a name stays as it is (it may be a Python number).
    both = body.replace("int(self.step)", "int(self.k) * int(mask.sum())")
    assert _made(both, 2, SCALAR)[TENSOR] == "    t = int(self.k) * mask.sum().detach().long()\n"


def test_a_one_element_tensor_of_another_shape_read_back_stays_a_0_dim_tensor() -> None:
    # Mask2Former's mask count: a (1,) tensor clamped, then .item(); .detach() alone would keep
    # the (1,) and make every loss divided by it a (1,) too. Offered after .detach().
    body = ("def norm(loss, n):\n"
            "    num = torch.as_tensor([n], dtype=torch.float)\n"
            "    num = torch.clamp(num, min=1).item()\n"
            "    return loss / num\n")
    found, _ = candidates(HEAD + body, 3 + HEAD.count("\n"), SCALAR)
    assert [rw.name for rw in found][:2] == [TENSOR, TENSOR_0D]
    assert _made(body, 3, SCALAR)[TENSOR_0D] == "    num = torch.clamp(num, min=1).detach().reshape(())\n"
    # A name (a loss) or a reduction over everything is 0-dim already: nothing more is offered.
    for value in ("num.item()", "num.sum().item()", "torch.mean(num).item()"):
        assert TENSOR_0D not in _made(body.replace("torch.clamp(num, min=1).item()", value), 3, SCALAR), value


METRIC_LOGGER = """\
def update(self, **kwargs):
    for k, v in kwargs.items():
        if v is None:
            continue
        if isinstance(v, torch.Tensor):
            v = v.item()
        assert isinstance(v, (float, int))
        self.meters[k].update(v)
"""


def test_a_value_read_back_then_checked_to_be_a_number_stays_a_tensor_the_check_taking_one() -> None:
    # DeiT's, MAE's and ConvNeXt's MetricLogger.update: kept a tensor alone, the assert after it
    # fails in eager; the check takes a tensor too.
    assert _made(METRIC_LOGGER, 6, SCALAR)[TENSOR_CHECKED] == (
        "        if isinstance(v, torch.Tensor):\n"
        "            v = v.detach()\n"
        "        assert isinstance(v, (float, int, torch.Tensor))\n")
    one = METRIC_LOGGER.replace("(float, int))", "float), 'a number'")
    assert _made(one, 6, SCALAR)[TENSOR_CHECKED].endswith("        assert isinstance(v, (float, torch.Tensor)), 'a number'\n")
    # A check of another name or of other types, none after the if, or an else: not this rewrite.
    for old, new in (("isinstance(v, (float, int))", "isinstance(k, (float, int))"),
                     ("isinstance(v, (float, int))", "isinstance(v, (float, str))"),
                     ("        assert isinstance(v, (float, int))\n", ""),
                     ("            v = v.item()\n", "            v = v.item()\n        else:\n            v = 0\n")):
        assert TENSOR_CHECKED not in _made(METRIC_LOGGER.replace(old, new), 6, SCALAR), new


def test_the_old_tensor_new_idioms_are_the_factories_that_say_the_same() -> None:
    body = "def f(a, w, h):\n    y = a.new().resize_as_(a).fill_(1)\n    return y\n"
    assert _made(body, 2, OTHER)[NEW_IDIOM] == "    y = torch.full_like(a, 1)\n"
    other = body.replace("a.new().resize_as_(a).fill_(1)", "w.new().resize_as_(a).zero_()")
    assert _made(other, 2, OTHER)[NEW_IDIOM] == "    y = torch.zeros_like(a, dtype=w.dtype, device=w.device)\n"
    assert _made(body.replace("a.new().resize_as_(a).fill_(1)", "w.new(*h).zero_()"), 2, OTHER)[NEW_IDIOM] == (
        "    y = w.new_zeros(*h)\n")
    assert _made(body.replace("a.new().resize_as_(a).fill_(1)", "w.new(2, 3).fill_(0.5)"), 2, OTHER)[NEW_IDIOM] == (
        "    y = w.new_full((2, 3), 0.5)\n")
    # new() of data (a list, a float) makes a tensor of those values: no rewrite.
    for data in ("w.new([1, 2]).zero_()", "w.new(0.5).fill_(1)"):
        assert NEW_IDIOM not in _made(body.replace("a.new().resize_as_(a).fill_(1)", data), 2, OTHER), data


def test_a_size_unpacked_from_tolist_stays_tensors() -> None:
    body = "def crop(boxes, hw):\n    h, w = hw.tolist()\n    return boxes / w + h\n"
    assert _made(body, 2, SCALAR)[TENSOR] == "    h, w = hw.detach().unbind(0)\n"
    assert TENSOR not in _made(body.replace("hw.tolist()", "hw.tolist()[0]"), 2, SCALAR)


def test_an_assert_whose_message_formats_a_tensor_gets_a_constant_message() -> None:
    # EDM's mask check after its .item() is kept a tensor: the f-string message would break.
    body = ("def centred(x, node_mask):\n"
            "    v = (x * (1 - node_mask)).abs().sum()\n"
            "    assert v < 1e-5, f\"Error {v} too high\"\n"
            "    return x\n")
    assert _made(body, 3, BRANCH)[checks.ASSERT_MESSAGE] == "    assert v < 1e-5, 'Error {v} too high'\n"
    # A constant message (Dynamo keeps it), a test Python decides, a message made by a call: none.
    for old, new in [('f"Error {v} too high"', '"too high"'), ("v < 1e-5", "v is None"),
                     ('f"Error {v} too high"', "describe(v)")]:
        assert checks.ASSERT_MESSAGE not in _made(body.replace(old, new), 3, BRANCH), new


def _fix(name: str) -> dynscope.FixResult:
    model, inputs = fc.PROGRAMS[name]()
    return dynscope.fix(model, inputs if isinstance(inputs, tuple) else (inputs,))


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "rewrites"), [
    ("checked_regression", {checks.ASSERT}),
    ("biased_attention", {WHERE}),
    ("normalised", {TENSOR}),
    ("logged_shift", {checks.GUARD_CHECK}),
])
def test_checks_temporaries_and_unpacked_sizes_are_verified_live(name: str, rewrites: set[str]) -> None:
    res = _fix(name)
    assert {p.rewrite for p in res.patches} == rewrites, [(p.rewrite, p.why_not) for p in res.patches]
    for p in res.patches:
        assert p.verified and p.breaks_after == 0 and p.outputs_matched, (p.site, p.why_not)
    # A report inside a guarded check (logged_shift's warning) is part of that patch, no patch of its own.
    assert res.breaks_after == 0 and not [u for u in res.unpatched if u.owner == "your code" and not u.gone_with]


@pytest.mark.heavy
def test_a_check_raising_another_exception_than_runtime_error_is_proposed_with_the_exception_named() -> None:
    # The check in the graph raises RuntimeError; the program raised OverflowError: the patch
    # runs, removes the break and keeps the outputs, and is proposed all the same.
    (p,) = _fix("raising_with_values").patches
    assert p.rewrite == checks.ASSERT and p.breaks_after == 0 and p.outputs_matched and not p.verified
    assert p.why_not.startswith("a failed check would raise RuntimeError instead of OverflowError"), p.why_not


@pytest.mark.heavy
def test_a_guard_around_a_warning_is_verified_neither_where_it_never_warned_nor_where_it_did() -> None:
    # The corpus's batch is right-padded: the warning's branch never ran, so nothing shows that
    # silencing it under compile is what the user wants (HiFi-GAN's range prints, set 10's must-not).
    res = _fix("token_classifier")
    (p,) = res.patches
    assert p.rewrite == checks.GUARD_CHECK and not p.verified
    assert p.why_not.startswith("the report at line 38 was never made in the run"), p.why_not
    # Left-padded, the warning is issued eagerly (and breaks itself, a site of its own): under
    # compile either guard would drop it.
    model, (ids, _) = fc.PROGRAMS["token_classifier"]()
    left = ids.flip(1)
    patches = dynscope.fix(model, (left, (left != 0).long())).patches
    assert [(p.lineno, p.rewrite) for p in patches] == [(37, checks.GUARD_CHECK), (38, GUARD)]
    for p in patches:
        assert not p.verified
        assert p.why_not == "the warning at line 38 was issued in the run: under torch.compile it never is", p.why_not


@pytest.mark.heavy
def test_a_guard_reached_as_a_follow_on_needs_its_report_made_too() -> None:
    # .item() kept a tensor moves the break to the check; the check's guard, tried as the follow-on,
    # would silence a print the run never reached: neither patch is verified (the pair once was).
    res = _fix("overflow_report")
    assert res.patches and not any(p.verified for p in res.patches), [(p.rewrite, p.why_not) for p in res.patches]


@pytest.mark.heavy
def test_what_the_checks_cannot_carry_is_refused_or_not_verified_with_the_reason() -> None:
    # A message made by a call: no assert, no patch, and the reason is the category's.
    res = _fix("raising_with_text")
    assert not res.patches and [u.category for u in res.unpatched] == [BRANCH]
    # clamp(min=0, max=w) with w a tensor reads it back as a number: the break moves.
    (p,) = _fix("cropped").patches
    assert p.rewrite == TENSOR and not p.verified and "the break moved to fix_checks.py:" in p.why_not
