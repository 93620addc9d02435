"""An early return under a test on a tensor, attributes updated under one, and rows set over
numbers read back one by one, as torch.where (issue "Fix what we have never seen",
fix/branches.py): on source text, where each applies and where it must refuse, in the fast
tier; live on tests/corpus/fix_branches.py in the heavy tier, verified where outputs, gradients
and what the model keeps equal the unpatched eager run's, and not verified where the early
value has another shape or the state is a Python number."""

from __future__ import annotations

import pytest

import dynscope
from dynscope._capture.fix.branches import CONDITIONAL, EARLY, ELEMENTWISE, STATE_WHERE, WHERE
from dynscope._capture.fix.numbers import INDEX, LENGTHS
from dynscope._capture.fix.rewrites import candidates
from dynscope._lexicon.break_categories import BRANCH, SCALAR
from tests.corpus import fix_branches as fb

HEAD = "import torch\n\n\n"


def _made(body: str, line: int, category: str = BRANCH) -> dict[str, str]:
    found, _ = candidates(HEAD + body, line + HEAD.count("\n"), category)
    return {rw.name: "".join(rw.replacement) for rw in found}


MEAN = ("def masked_mean(values, mask):\n"
        "    w = mask.to(values.dtype)\n"
        "    if mask.sum() == 0:\n"
        "        return values.sum(0) * 0.0\n"
        "    return (values * w).sum(0) / mask.sum()\n")


def test_an_early_return_is_picked_by_torch_where_and_a_zero_count_divides_clamped() -> None:
    assert _made(MEAN, 3)[EARLY] == (
        "    return torch.where(mask.sum() == 0, values.sum(0) * 0.0, (values * w).sum(0) / torch.where(mask.sum() == 0, 1, mask.sum()))\n")
    # The count divides as 1 where the test holds in the statements between the test and the return too (they run
    # when it is 0: an infinity there makes the gradient NaN through torch.where).
    body = ("def f(x, n):\n    if n == 0:\n        return x.sum() * 0, n\n    m = x.sum() / n\n    return m, n\n")
    assert _made(body, 2)[EARLY] == "    m = x.sum() / torch.where(n == 0, 1, n)\n    return torch.where(n == 0, x.sum() * 0, m), n\n"
    # Tuples part by part; a test the statements after it rebind is read first.
    body = ("def f(x, y):\n    if x.sum() > 0:\n        return x, y\n    x = x * 2\n    return x, y + 1\n")
    assert _made(body, 2)[EARLY] == (
        "    _pred = x.sum() > 0\n    _early = x, y\n    x = x * 2\n"
        "    return torch.where(_pred, _early[0], x), torch.where(_pred, _early[1], y + 1)\n")


def test_an_if_else_that_returns_in_both_branches_is_an_early_return_dicts_key_by_key() -> None:
    # A masked L1 loss as text detectors write it: the count read back, the loss and its log in a dict.
    body = ("def l1(pred, gt, mask):\n    mask_sum = mask.sum()\n    if mask_sum.item() == 0:\n"
            "        return mask_sum, dict(l1_loss=mask_sum)\n    else:\n"
            "        loss = (torch.abs(pred - gt) * mask).sum() / mask_sum\n        return loss, dict(l1_loss=loss)\n")
    assert _made(body, 3, SCALAR)[EARLY] == (
        "    loss = (torch.abs(pred - gt) * mask).sum() / torch.where(mask_sum == 0, 1, mask_sum)\n"
        "    return torch.where(mask_sum == 0, mask_sum, loss), dict(l1_loss=torch.where(mask_sum == 0, mask_sum, loss))\n")
    display = body.replace("dict(l1_loss=mask_sum)", "{'l1_loss': mask_sum}").replace("dict(l1_loss=loss)", "{'l1_loss': loss}")
    assert "dict(l1_loss=torch.where(mask_sum == 0, mask_sum, loss))" in _made(display, 3, SCALAR)[EARLY]
    # Dicts of other keys cannot be picked key by key; an else that does more than assign names runs always.
    for old, new in (("dict(l1_loss=loss)", "dict(loss=loss)"), ("        loss = (", "        print(mask)\n        loss = (")):
        assert EARLY not in _made(body.replace(old, new), 3, SCALAR), new


@pytest.mark.parametrize(("old", "new"), [
    ("        return values.sum(0) * 0.0\n", "        return None\n"),  # None is no tensor
    ("        return values.sum(0) * 0.0\n", "        return values, mask\n"),  # a tuple against one value
    ("    return (values", "    print(mask)\n    return (values"),  # an effect after the test would run always
    ("    if mask.sum() == 0:\n", "    if mask is None:\n"),  # no tensor in the test
])
def test_an_early_return_is_left_alone_where_torch_where_cannot_pick(old: str, new: str) -> None:
    assert EARLY not in _made(MEAN.replace(old, new), 3)


def test_attributes_updated_under_a_test_are_updated_always_picking_by_it() -> None:
    body = ("class M:\n    def forward(self, x):\n        if self.step < self.warmup:\n"
            "            self.step += 1\n        return x\n")
    assert _made(body, 3)[STATE_WHERE] == "        self.step += torch.where(self.step < self.warmup, 1, 0)\n"
    # Several updates read the test once, before any of them changes what it reads.
    body = ("class M:\n    def forward(self, loss):\n        if loss < self.best:\n"
            "            self.best = loss\n            self.count *= 2\n        return loss\n")
    assert _made(body, 3)[STATE_WHERE] == (
        "        _pred = loss < self.best\n        self.best = torch.where(_pred, loss, self.best)\n"
        "        self.count *= torch.where(_pred, 2, 1)\n")
    for other in ("            best = loss\n",  # a local: not state
                  "            self.log.append(loss)\n",  # a call
                  "            self.count **= 2\n"):  # no operand that leaves it as it is
        changed = body.replace("            self.best = loss\n            self.count *= 2\n", other)
        assert STATE_WHERE not in _made(changed, 3), other


def test_updates_in_place_of_elements_and_over_a_loop_pick_by_the_test_read_once() -> None:
    body = ("class C:\n    def forward(self, x):\n        if self.calls.item() % self.every == 0:\n"
            "            for p in self.net.parameters():\n                p.data.clamp_(-self.c, self.c)\n"
            "        return x\n")
    assert _made(body, 3, SCALAR)[STATE_WHERE] == (
        "        _pred = self.calls % self.every == 0\n        for p in self.net.parameters():\n"
        "            p.data.copy_(torch.where(_pred, p.data.clamp(-self.c, self.c), p.data))\n")
    body = ("def f(x, t, rates, b):\n    if t.any():\n        rates[b] = x.sum()\n        x.zero_()\n"
            "        t.fill_(2)\n    return rates\n")
    assert _made(body, 2)[STATE_WHERE] == (
        "    _pred = t.any()\n    rates[b] = torch.where(_pred, x.sum(), rates[b])\n"
        "    x.copy_(torch.where(_pred, torch.zeros_like(x), x))\n    t.copy_(torch.where(_pred, torch.full_like(t, 2), t))\n")
    for other in ("        x.normal_()\n",  # no out-of-place twin kept here (random)
                  "        x.add_(**kw)\n",  # arguments it cannot name
                  "        print(x)\n"):  # not an update
        assert STATE_WHERE not in _made(body.replace("        x.zero_()\n", other), 2), other
    loop = body.replace("        x.zero_()\n", "        for q in qs:\n            q.mul_(q)\n            print(q)\n")
    assert STATE_WHERE not in _made(loop, 2), "a loop that does more than update in place"


def test_an_if_tree_of_updates_picks_each_by_the_tests_on_its_path_read_where_they_stood() -> None:
    # A loss scaler (torch.amp's shape): grow every k good steps, halve on a non-finite loss.
    body = ("class S:\n    def forward(self, loss):\n        if torch.isfinite(loss):\n"
            "            self.good += 1\n            if self.good.item() % self.k == 0:\n"
            "                self.scale *= 2.0\n        else:\n            self.scale /= 2.0\n"
            "            self.good.zero_()\n        return loss * self.scale\n")
    assert _made(body, 3)[STATE_WHERE] == (
        "        _pred = torch.isfinite(loss)\n        self.good += torch.where(_pred, 1, 0)\n"
        "        _pred1 = _pred & (self.good % self.k == 0)\n        self.scale *= torch.where(_pred1, 2.0, 1)\n"
        "        _pred2 = ~_pred\n        self.scale /= torch.where(_pred2, 2.0, 1)\n"
        "        self.good.copy_(torch.where(_pred2, torch.zeros_like(self.good), self.good))\n")
    # A flag kept as a buffer (a bare attribute broke: it is a tensor; read as a copy, since the
    # else fills it in place), chained in-place updates under no_grad.
    body = ("class T:\n    def forward(self, t):\n        if self.ready:\n            with torch.no_grad():\n"
            "                self.center.mul_(0.9).add_(0.1 * t.mean(0))\n        else:\n"
            "            self.center.copy_(t.mean(0))\n            self.ready.fill_(True)\n        return t\n")
    assert _made(body, 3)[STATE_WHERE] == (
        "        _pred = self.ready.clone()\n        with torch.no_grad():\n"
        "            self.center.copy_(torch.where(_pred, self.center.mul(0.9).add(0.1 * t.mean(0)), self.center))\n"
        "        _pred1 = ~_pred\n        self.center.copy_(torch.where(_pred1, t.mean(0), self.center))\n"
        "        self.ready.copy_(torch.where(_pred1, torch.full_like(self.ready, True), self.ready))\n")
    for other in ("if self.ready is None:", "if isinstance(self.ready, bool):"):  # Python decides these
        assert STATE_WHERE not in _made(body.replace("if self.ready:", other), 3), other
    taken = body.replace("return t", "_pred = 1\n        return t")
    assert STATE_WHERE not in _made(taken, 3), "the names it binds are the function's own"


def test_rows_set_over_numbers_read_back_are_set_by_one_where_over_the_tensor() -> None:
    body = ("class H:\n    def forward(self, coords, conf):\n        for j, c in enumerate(conf.tolist()):\n"
            "            if c < self.gate:\n                coords[j] = -1.0\n        return coords\n")
    assert _made(body, 3, SCALAR)[ELEMENTWISE] == (
        "        coords.copy_(torch.where((conf < self.gate).reshape((-1,) + (1,) * (coords.dim() - 1)), -1.0, coords))\n")
    for old, new in [("-1.0", "c * 2"),  # the number in the value: it would need its own row shape
                     ("coords[j] =", "coords[j + 1] ="),  # not the turn's own row
                     ("if c < self.gate", "if j < 2"),  # a test of the position, not of the number
                     ("enumerate(conf.tolist())", "enumerate(conf)")]:  # no number read back: no break here
        assert ELEMENTWISE not in _made(body.replace(old, new), 3, SCALAR), new


def test_an_index_by_a_zero_dim_tensor_gathers_the_same_element() -> None:
    body = "class S:\n    def step(self, t, x):\n        alpha = self.alphas[t]\n        return x * alpha\n"
    assert _made(body, 3, SCALAR)[INDEX] == "        alpha = self.alphas[t.reshape(1)][0]\n"
    for old in ("self.alphas[t]", ):
        for new in ("self.alphas[int(t)]", "self.alphas[t.item()]", "self.alphas[:t]", "self.alphas[0]"):
            assert INDEX not in _made(body.replace(old, new), 3, SCALAR), new  # another reader, or no tensor index


def test_per_row_slices_by_lengths_read_back_are_one_masked_fill() -> None:
    body = ("def pad(score, lengths):\n    for b, n in enumerate(lengths.tolist()):\n"
            "        score[b, n:] = float('-inf')\n    return score\n")
    assert _made(body, 2, SCALAR)[LENGTHS] == (
        "    score.masked_fill_((torch.arange(score.shape[1], device=score.device) >= lengths[:, None])"
        ".reshape(score.shape[0], score.shape[1], *[1] * (score.dim() - 2)), float('-inf'))\n")
    assert "< lengths[:, None]" in _made(body.replace("[b, n:]", "[b, :n]"), 2, SCALAR)[LENGTHS]
    for old, new in [("[b, n:]", "[b, n + 1:]"), ("[b, n:]", "[n, b:]"), ("float('-inf')", "n"),
                     ("[b, n:]", "[b, n::2]")]:
        assert LENGTHS not in _made(body.replace(old, new), 2, SCALAR), new


def test_branches_that_each_append_one_value_append_the_picked_one() -> None:
    body = ("def gain(wav, db, floor):\n    out = []\n    for clip in wav:\n        if db < floor:\n"
            "            out.append(clip)\n        else:\n            out.append(clip * 2.0)\n    return torch.stack(out)\n")
    assert _made(body, 4)[WHERE] == "        out.append(torch.where(db < floor, clip, clip * 2.0))\n"
    for old, new in [("out.append(clip * 2.0)", "other.append(clip * 2.0)"),  # two lists
                     ("if db < floor:", "if db is None:"),  # Python decides it
                     ("        else:\n            out.append(clip * 2.0)\n", "")]:  # no else: the list's length is the test's
        assert "out.append(torch.where" not in _made(body.replace(old, new), 4).get(WHERE, ""), new


def _fix(name: str) -> dynscope.FixResult:
    model, inputs = fb.PROGRAMS[name]()
    return dynscope.fix(model, inputs)


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "rewrite"), [
    ("masked_pool", EARLY), ("counted_pool", EARLY), ("skip_non_finite", EARLY), ("warmup_counter", STATE_WHERE), ("best_loss", STATE_WHERE),
    ("gated_keypoints", ELEMENTWISE), ("clipped_critic", STATE_WHERE), ("loss_scaler", STATE_WHERE),
    ("calibrated_scale", STATE_WHERE),  # `self.training and <buffer test>`: Python's part an if around it
    ("corner_case_loss", STATE_WHERE),  # a local name bound before the if, an update under `weight is not None`
    ("mode_gated_head", WHERE),  # `<config test> and <tensor test>` with an else: the else kept for the config's
    ("key_frames", LENGTHS),
    # The update's value still selects by the mask: the where's own line is rewritten too.
    ("binned_calibration", f"{STATE_WHERE}, then masked reduction inline"),
    # Three steps: the bin edges kept tensors, the `if` on the bin's share a where, its means masked.
    ("binned_ece", "keep it a tensor, then branch to torch.where, then masked reduction inline"),
])
def test_early_returns_and_state_updates_are_verified_live(name: str, rewrite: str) -> None:
    res = _fix(name)
    assert len(res.patches) == 1, [q.site for q in res.patches]
    p = res.patches[0]
    if name == "loss_scaler":
        # Its inner test is a site of its own inside the first's rewrite: part of that patch.
        (inner,) = res.unpatched
        assert inner.gone_with == (p.site,) and "part of the verified patch at" in inner.why
    assert p.rewrite == rewrite and p.verified and p.breaks_after == 0 and p.outputs_matched, p.why_not
    assert p.gradients_matched is not False and res.breaks_after == 0 and p.assumes


@pytest.mark.heavy
def test_a_scheduler_indexed_by_its_previous_timestep_is_verified_as_one_patch() -> None:
    # The conditional's own line then breaks at its index (a tensor computed in the step, read
    # back as a number): rewritten too, as one patch.
    res = _fix("scheduler_step")
    assert [(p.rewrite, p.verified, p.breaks_after) for p in res.patches] == [
        (f"{CONDITIONAL}, then {INDEX}", True, 0)], [p.why_not for p in res.patches]
    assert res.breaks_after == 0


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "reason"), [
    ("shortcut_crop", "raised"), ("counted_calls", "what the model keeps changes"),
])
def test_an_early_value_of_another_shape_or_a_python_count_is_not_verified(name: str, reason: str) -> None:
    res = _fix(name)
    assert not any(p.verified for p in res.patches), [(p.rewrite, p.why_not) for p in res.patches]
    tried = [p for p in res.patches if p.rewrite in (EARLY, STATE_WHERE)]
    assert tried and all(reason in p.why_not for p in tried), [p.why_not for p in tried]


def test_a_local_name_bound_before_the_if_and_an_update_under_a_python_test_are_state_updates_too() -> None:
    body = ("def loss(conf, weight, c_pos_w):\n"
            "    pos = conf > 0.5\n"
            "    if not pos.any():\n"
            "        pos[0, 0] = True\n"
            "        if weight is not None:\n"
            "            weight[0, 0] = 0.0\n"
            "        c_pos_w = 0.0\n"
            "    return c_pos_w * conf[pos].mean()\n")
    assert _made(body, 3)[STATE_WHERE] == (
        "    _pred = torch.logical_not(pos.any())\n"
        "    pos[0, 0] = torch.where(_pred, True, pos[0, 0])\n"
        "    if weight is not None:\n"
        "        weight[0, 0] = torch.where(_pred, 0.0, weight[0, 0])\n"
        "    c_pos_w = torch.where(_pred, 0.0, c_pos_w)\n")
    # A name first bound inside the if has no value to keep where the test fails: no state update.
    assert STATE_WHERE not in _made(body.replace("def loss(conf, weight, c_pos_w):", "def loss(conf, weight):"), 3)
    # A tensor test inside is a where of its own, not an if Python decides.
    assert "    if weight.sum() > 0:\n" not in _made(body.replace("weight is not None", "weight.sum() > 0"), 3).get(
        STATE_WHERE, "")


def test_a_state_update_under_a_python_flag_and_a_tensor_test_keeps_the_flag_an_if() -> None:
    body = ("def forward(self, x):\n"
            "    if self.training and self.ready == 0:\n"
            "        self.scale.data.copy_(x.abs().mean())\n"
            "        self.ready.fill_(1)\n"
            "    return x / self.scale\n")
    assert _made(body, 2)[STATE_WHERE] == (
        "    if self.training:\n"
        "        _pred = self.ready == 0\n"
        "        self.scale.data.copy_(torch.where(_pred, x.abs().mean(), self.scale.data))\n"
        "        self.ready.copy_(torch.where(_pred, torch.full_like(self.ready, 1), self.ready))\n")
    # With an else, Python's part cannot be split off: no state update.
    assert STATE_WHERE not in _made(body.replace("    return", "    else:\n        self.ready.fill_(0)\n    return"), 2)
