"""The state and control-flow rewrites (dynscope/_capture/fix/state.py, issue "Fix what we have
never seen"): each on source text, where it applies and where it must refuse, in the fast tier;
each live on tests/corpus/fix_state.py in the heavy tier, verified where outputs and gradients
equal the unpatched eager run's and refused, with the reason, where they would not."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dynscope
from dynscope._capture.fix import signatures, state
from dynscope._capture.fix.rewrites import _BY_CATEGORY, TENSOR, candidates
from dynscope._lexicon.break_categories import BRANCH, DEEPCOPY, OTHER, REQUIRES_GRAD, SCALAR
from tests.corpus import fix_state as fs

HEAD = "import copy\nimport torch\n\n\n"


def _made(body: str, line: int, category: str) -> dict[str, str]:
    """rewrite name -> the new text of the function, for the statement at ``line`` of ``body``
    (lines counted from the first line of ``body``, after HEAD)."""
    src = HEAD + body
    found, _ = candidates(src, line + HEAD.count("\n"), category)
    return {rw.name: "".join(rw.replacement) for rw in found}


def _why(body: str, line: int, category: str) -> str:
    return candidates(HEAD + body, line + HEAD.count("\n"), category)[1]


# -- 1. a module deep-copied in forward --------------------------------------------------------------


TEACHER = """\
def forward(self, x):
    teacher = copy.deepcopy(self.encoder)
    with torch.no_grad():
        t = teacher(x)
    return self.encoder(x) - t
"""


def test_a_copied_module_that_is_only_called_becomes_a_call_with_its_detached_state() -> None:
    made = _made(TEACHER, 2, DEEPCOPY)
    assert list(made) == [state.TEACHER, "clone instead of deepcopy"], "the module rewrite is tried first"
    assert made[state.TEACHER] == (
        "    _teacher_state = {k: v.detach().clone() for k, v in [*self.encoder.named_parameters(), "
        "*self.encoder.named_buffers()]}\n"
        "    def teacher(*args, **kwargs):\n"
        "        return torch.func.functional_call(self.encoder, _teacher_state, args, kwargs)\n")


@pytest.mark.parametrize("use", [
    "    teacher.eval()\n    return teacher(x)\n",  # its mode changed: the copy's own, not the module's
    "    self.ema = teacher\n    return teacher(x)\n",  # kept beyond the call
    "    return teacher\n",  # handed back, not called
    "    return sum(p.sum() for p in teacher.parameters())\n",  # its weights read
])
def test_a_copied_module_used_otherwise_is_no_call_with_detached_state(use: str) -> None:
    body = "def forward(self, x):\n    teacher = copy.deepcopy(self.encoder)\n" + use
    assert state.TEACHER not in _made(body, 2, DEEPCOPY)


def test_a_copy_called_at_once_or_with_gradients_off_is_a_call_with_detached_state() -> None:
    body = "def forward(self, x):\n    t = copy.deepcopy(self.encoder)(x, scale=2)\n    return t\n"
    assert _made(body, 2, DEEPCOPY)[state.TEACHER] == (
        "    t = torch.func.functional_call(self.encoder, {k: v.detach().clone() for k, v in "
        "[*self.encoder.named_parameters(), *self.encoder.named_buffers()]}, (x,), {'scale': 2})\n")
    body = TEACHER.replace("copy.deepcopy(self.encoder)", "copy.deepcopy(self.encoder).requires_grad_(False)")
    assert "torch.func.functional_call(self.encoder, _teacher_state" in _made(body, 2, DEEPCOPY)[state.TEACHER]
    body = TEACHER.replace("copy.deepcopy(self.encoder)", "copy.deepcopy(self.encoder).eval()")
    assert state.TEACHER not in _made(body, 2, DEEPCOPY), "eval() changes the copy's mode, not the module's"


def test_a_copy_kept_on_self_across_calls_is_left_to_the_clone_rewrite() -> None:
    body = "def forward(self, x):\n    if self.ema is None:\n        self.ema = copy.deepcopy(self.encoder)\n" \
           "    return self.ema(x)\n"
    assert list(_made(body, 3, DEEPCOPY)) == ["clone instead of deepcopy"]


# -- 2. a gradient taken inside forward ----------------------------------------------------------------


SALIENCY = """\
def forward(self, x):
    x = x.detach().requires_grad_(True)
    score = self.net(x).max(-1).values.sum()
    grad, = torch.autograd.grad(score, x)
    return self.net(x.detach() * grad.abs())
"""


def test_autograd_grad_in_forward_becomes_torch_func_grad_from_either_of_its_sites() -> None:
    want = ("    x = x.detach()\n"
            "    def _forward(x):\n"
            "        score = self.net(x).max(-1).values.sum()\n"
            "        return score\n"
            "    grad = torch.func.grad(_forward)(x)\n"
            "    grad = grad.detach()\n")
    from_requires_grad = _made(SALIENCY, 2, REQUIRES_GRAD)
    from_grad = _made(SALIENCY, 4, OTHER)
    assert from_requires_grad[state.FUNC_GRAD] == from_grad[state.FUNC_GRAD] == want
    (rw,) = [r for r in candidates(HEAD + SALIENCY, 4 + HEAD.count("\n"), OTHER)[0]]
    assert (rw.first, rw.last) == (2 + HEAD.count("\n"), 4 + HEAD.count("\n")), "one patch of the three statements"


def test_autograd_grad_with_its_tensors_as_keywords_is_the_same_pattern() -> None:
    body = """\
def forward(self, real, fake, alpha):
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d = self.critic(interp)
    grads = torch.autograd.grad(outputs=d, inputs=interp, grad_outputs=[torch.ones_like(d)], create_graph=True,
                                retain_graph=True, only_inputs=True)[0]
    return grads
"""
    new = _made(body, 2, REQUIRES_GRAD)[state.FUNC_GRAD]
    assert "    d, _vjp = torch.func.vjp(_forward, interp)\n    grads, = _vjp(torch.ones_like(d))\n" in new
    assert state.FUNC_GRAD not in _made(body.replace("only_inputs=True", "allow_unused=True"), 2, REQUIRES_GRAD)


def test_requires_grad_set_as_an_attribute_starts_the_same_pattern() -> None:
    body = "def f(net, x):\n    x.requires_grad = True\n    g, = torch.autograd.grad(net(x).sum(), x)\n    return g\n"
    assert _made(body, 2, REQUIRES_GRAD)[state.FUNC_GRAD] == (
        "    def _forward(x):\n        return net(x).sum()\n    g = torch.func.grad(_forward)(x)\n    g = g.detach()\n")


def test_a_gradient_penalty_keeps_its_graph_and_its_grad_outputs() -> None:
    body = """\
def forward(self, real, fake, alpha):
    interp = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
    d = self.critic(interp)
    grads = torch.autograd.grad(d, interp, grad_outputs=torch.ones_like(d), create_graph=True)[0]
    return ((grads.norm(2, dim=1) - 1) ** 2).mean()
"""
    new = _made(body, 2, REQUIRES_GRAD)[state.FUNC_GRAD]
    assert "    interp = alpha * real + (1 - alpha) * fake\n" in new
    assert "    d, _vjp = torch.func.vjp(_forward, interp)\n    grads, = _vjp(torch.ones_like(d))\n" in new
    assert ".detach()" not in new, "create_graph=True: the penalty is differentiated again"


def test_names_of_the_forward_read_after_the_gradient_come_back_as_aux() -> None:
    body = """\
def f(net, x):
    x.requires_grad_(True)
    h = net(x)
    out = h.sum()
    g, = torch.autograd.grad(out, x)
    return g + h
"""
    new = _made(body, 2, REQUIRES_GRAD)[state.FUNC_GRAD]
    assert "        return out, (h,)\n" in new
    assert "    g, (h,) = torch.func.grad(_forward, has_aux=True)(x)\n" in new


@pytest.mark.parametrize("body", [
    # Another statement between: it would run inside torch.func's transform.
    "def f(net, x):\n    x.requires_grad_(True)\n    print(x)\n    g, = torch.autograd.grad(net(x).sum(), x)\n"
    "    return g\n",
    # allow_unused: another contract than torch.func's.
    "def f(net, x):\n    x.requires_grad_(True)\n    g, = torch.autograd.grad(net(x).sum(), x, allow_unused=True)\n"
    "    return g\n",
    # The gradient of another tensor than the one made to require grad.
    "def f(net, x, y):\n    x.requires_grad_(True)\n    g, = torch.autograd.grad(net(x).sum(), y)\n    return g\n",
    # requires_grad_(False) is the detach rewrite's.
    "def f(net, x):\n    x.requires_grad_(False)\n    g, = torch.autograd.grad(net(x).sum(), x)\n    return g\n",
])
def test_gradients_of_other_shapes_are_not_rewritten_to_torch_func(body: str) -> None:
    assert state.FUNC_GRAD not in _made(body, 2, REQUIRES_GRAD)


# -- 3. state set up in forward ----------------------------------------------------------------------


def test_a_module_made_in_forward_gets_no_patch_and_the_reason_names_init() -> None:
    body = "def forward(self, x):\n    if self.head is None:\n        self.head = nn.Linear(x.shape[-1], 3)\n" \
           "    return self.head(x)\n"
    why = _why(body, 3, OTHER)
    assert why.startswith("self.head is made in forward (nn.Linear(...)): Dynamo cannot trace nn.Parameter's")
    assert "Make it in __init__ (torch.nn.LazyLinear" in why
    # A tensor cache made on the first call does not break on torch 2.13: not this shape.
    cache = "def forward(self, x):\n    self.cache = torch.zeros(3)\n    return x\n"
    assert _why(cache, 2, OTHER) == "the statement at line 6 is not a shape a 'other' rewrite knows"
    init = "def __init__(self):\n    self.head = nn.Linear(4, 3)\n"
    assert "__init__" not in _why(init, 2, OTHER)


# -- 4. generators with an early exit --------------------------------------------------------------


def test_next_any_and_all_over_a_tensor_become_tensor_ops() -> None:
    body = "def f(s, t):\n    i = next(i for i, v in enumerate(s) if v > t)\n    return i\n"
    assert _made(body, 2, BRANCH)[state.TENSOR_OPS] == "    i = (s > t).int().argmax()\n"
    body = "def f(s, t):\n    v = next((v for v in s if v.abs() > t), s[0])\n    return v\n"
    assert _made(body, 2, BRANCH)[state.TENSOR_OPS] == (
        "    v = torch.where((s.abs() > t).any(), s.index_select(0, (s.abs() > t).int().argmax().reshape(1))"
        ".squeeze(0), s[0])\n")
    body = "def f(s):\n    if all(v > 0 and v < 1 for v in s):\n        s = s * 2\n    return s\n"
    assert _made(body, 2, BRANCH)[state.TENSOR_OPS] == "    s = torch.where(((s > 0) & (s < 1)).all(), s * 2, s)\n"
    body = "def f(s):\n    if any(v > 2 for v in s):\n        return s * 2\n    return s\n"
    assert _made(body, 2, BRANCH)[state.TENSOR_OPS] == "    return torch.where((s > 2).any(), s * 2, s)\n"


def test_a_next_without_default_says_it_would_raise_where_argmax_gives_zero() -> None:
    src = HEAD + "def f(s, t):\n    i = next(i for i, v in enumerate(s) if v > t)\n    return i\n"
    (rw,) = candidates(src, 6, BRANCH)[0]
    assert "next() without a default raises when no element passes; argmax then gives 0" in rw.note


@pytest.mark.parametrize("gen", [
    "any(v.sum() > 0 for v in s)",  # a reduction of each element: not elementwise
    "any(v > i for i, v in enumerate(s))",  # the index as a number
    "any(f(v) for v in s)",  # a function of the element
    "any(v is None for v in s)",  # identity, not a tensor test
    "any([v > 0 for v in s])",  # a list, not a generator: evaluated whole
    "any(v.shape[0] > 2 for v in s)",  # a property of each element
    "any(v[0] > 2 for v in s)",  # a part of each element (rows of a matrix)
])
def test_generators_that_are_not_elementwise_tests_stay(gen: str) -> None:
    body = f"def f(s, i):\n    if {gen}:\n        s = s * 2\n    return s\n"
    assert state.TENSOR_OPS not in _made(body, 2, BRANCH)


def test_a_loops_first_match_becomes_argmax() -> None:
    body = """\
def f(cum, p):
    cutoff = cum.shape[0] - 1
    for i in range(cum.shape[0]):
        if cum[i] > p:
            cutoff = i
            break
    return cutoff
"""
    assert _made(body, 4, BRANCH)[state.FIRST_MATCH] == (
        "    _hit = cum > p\n    cutoff = torch.where(_hit.any(), _hit.int().argmax(), cutoff)\n")
    # The loop's own name read after it: the new code never sets it.
    assert state.FIRST_MATCH not in _made(body.replace("return cutoff", "return cutoff + i"), 4, BRANCH)
    # Something else in the loop body: not a scan.
    assert state.FIRST_MATCH not in _made(body.replace("    for i in range(cum.shape[0]):\n",
                                                       "    for i in range(cum.shape[0]):\n        p = p * 2\n"),
                                          5, BRANCH)


# -- 5. an early stop -------------------------------------------------------------------------------


DECODE = """\
def decode(self, tok, eos):
    out = torch.zeros(tok.shape[0], 6, dtype=torch.long)
    toks = []
    for i in range(6):
        tok = self.step(tok)
        out[:, i] = tok
        toks.append(tok)
        total += tok
        if (tok == eos).all():
            break
    return out
"""


def test_an_early_stop_becomes_a_stop_mask_that_freezes_what_the_loop_carries() -> None:
    assert _made(DECODE, 9, BRANCH)[state.STOP_MASK] == (
        "    _stopped = torch.zeros((), dtype=torch.bool)\n"
        "    for i in range(6):\n"
        "        tok = torch.where(_stopped, tok, self.step(tok))\n"
        "        out[:, i] = torch.where(_stopped, out[:, i], tok)\n"
        "        toks.append(torch.where(_stopped, torch.zeros_like(tok), tok))\n"
        "        total = torch.where(_stopped, total, total + tok)\n"
        "        _stopped = _stopped | (tok == eos).all()\n")
    found = candidates(HEAD + DECODE, 9 + HEAD.count("\n"), BRANCH)[0]
    # The stop mask first: dropping the break (the shortcut rewrite) is the last resort.
    assert [rw.name for rw in found] == [state.STOP_MASK, "shortcut dropped"]
    assert "longer than the eager run's when the loop stopped early" in found[0].note


GROWN = """\
def generate(self, ids, eos):
    for _ in range(5):
        tok = self.step(ids[:, -1:])
        ids = torch.cat([ids, tok], dim=1)
        if (tok == eos).all():
            break
    return ids
"""


def test_a_sequence_grown_each_turn_and_returned_gets_no_stop_mask_and_says_why() -> None:
    # The stop decides the returned length: a stop mask would give a longer sequence whenever
    # the loop stops early, and a verification whose inputs never stop could not see it.
    assert state.STOP_MASK not in _made(GROWN, 5, BRANCH)
    why = _why(GROWN, 5, BRANCH)
    assert "the loop's stop decides how long `ids` grows" in why and "compile the loop's step" in why
    listed = DECODE.replace("    return out\n", "    return torch.stack(toks, 1)\n")
    assert state.STOP_MASK not in _made(listed, 9, BRANCH)
    assert "how long `toks` grows" in _why(listed, 9, BRANCH)


def test_a_sequence_grown_each_turn_but_only_totalled_grows_by_zeros_after_the_stop() -> None:
    body = GROWN.replace("    return ids\n", "    return ids.sum() * 2\n")
    assert _made(body, 5, BRANCH)[state.STOP_MASK] == (
        "    _stopped = torch.zeros((), dtype=torch.bool)\n"
        "    for _ in range(5):\n"
        "        tok = self.step(ids[:, -1:])\n"
        "        ids = torch.cat([ids, torch.where(_stopped, torch.zeros_like(tok), tok)], dim=1)\n"
        "        _stopped = _stopped | (tok == eos).all()\n")
    # A mean is not a total (zeros after the stop change it), nor is sum() of a tensor (its rows).
    assert state.STOP_MASK not in _made(GROWN.replace("return ids", "return ids.float().mean()"), 5, BRANCH)
    assert state.STOP_MASK not in _made(GROWN.replace("return ids", "return sum(ids)"), 5, BRANCH)
    # A list totalled by sum() or stacked and summed whole keeps its stop mask.
    for total in ("sum(toks)", "torch.stack(toks).sum()"):
        assert state.STOP_MASK in _made(DECODE.replace("    return out\n", f"    return {total}\n"), 9, BRANCH)


def test_an_early_stop_on_a_python_number_is_a_stop_mask_on_the_tensor() -> None:
    body = DECODE.replace("if (tok == eos).all():", "if bool((tok == eos).all().item()):")
    assert "        _stopped = _stopped | (tok == eos).all()\n" in _made(body, 9, SCALAR)[state.STOP_MASK]


def test_a_stop_whose_if_runs_the_turns_last_statements_first_reads_its_test_before_them() -> None:
    # Power iteration (held-out set 3): `if moved < tol: u = u_next; break` then `u = u_next`.
    body = ("def power(W, u, tol):\n    v = W[0]\n    for _ in range(60):\n        v = W.t() @ u\n"
            "        u_next = W @ v\n        if torch.norm(u_next - u) < tol:\n            u = u_next\n"
            "            break\n        u = u_next\n    return u, v\n")
    assert _made(body, 6, BRANCH)[state.STOP_MASK] == (
        "    _stopped = torch.zeros((), dtype=torch.bool)\n    for _ in range(60):\n"
        "        v = torch.where(_stopped, v, W.t() @ u)\n        u_next = W @ v\n"
        "        _stop_now = torch.norm(u_next - u) < tol\n        u = torch.where(_stopped, u, u_next)\n"
        "        _stopped = _stopped | _stop_now\n")
    # Statements after the `if` that are not the ones it runs before its break: no stop mask.
    assert state.STOP_MASK not in _made(body.replace("        u = u_next\n    return", "        u = 2 * u_next\n    return"),
                                        6, BRANCH)


@pytest.mark.parametrize(("old", "new"), [
    ("    for i in range(6):\n", "    for i in tok:\n"),  # no fixed count of turns
    ("        toks.append(tok)\n", "        print(tok)\n"),  # an effect the mask cannot hold
    ("        toks.append(tok)\n", "        if i == 2:\n            continue\n"),  # another exit
    ("            break\n", "            break\n    else:\n        tok = eos\n"),  # an else that runs without a stop
])
def test_loops_that_a_stop_mask_cannot_hold_stay(old: str, new: str) -> None:
    body = DECODE.replace(old, new)
    line = next(n for n, ln in enumerate(body.splitlines(), 1) if "(tok == eos).all()" in ln)
    assert state.STOP_MASK not in _made(body, line, BRANCH)


# -- 6. a logged loss --------------------------------------------------------------------------------


def test_a_loss_kept_for_the_record_stays_a_tensor_and_the_note_says_what_the_user_holds() -> None:
    body = "def step(loss, history, stats):\n    history.append(loss.item())\n    return loss\n"
    src = HEAD + body
    first, *_ = candidates(src, 6, SCALAR)[0]
    assert first.name == state.LOGGED and "".join(first.replacement) == "    history.append(loss.detach())\n"
    assert first.note.startswith("history holds 0-dim tensors (detached, on the loss's device) instead of Python floats")
    body = "def step(loss, total):\n    total += float(loss.item())\n    return total\n"
    assert _made(body, 2, SCALAR)[state.LOGGED] == "    total += loss.detach()\n"


def test_a_call_that_only_reports_the_value_is_guarded() -> None:
    body = "def step(loss, bar):\n    bar.set_postfix(loss=loss.item())\n    return loss\n"
    assert _made(body, 2, SCALAR)[state.REPORTED] == (
        "    if not torch.compiler.is_compiling():\n        bar.set_postfix(loss=loss.item())\n")
    for kept in ("meter.update(loss.item())", "history.append(loss.item())", "bar.set_postfix(loss=loss)"):
        assert state.REPORTED not in _made(f"def step(loss, bar, meter, history):\n    {kept}\n    return loss\n",
                                           2, SCALAR), kept


# -- the corpus, as text -------------------------------------------------------------------------------


def test_every_site_of_the_state_corpus_gets_its_rewrite_and_each_names_its_assumption() -> None:
    # Text only: every SITE line marked with one of state.py's rewrites is offered it (by some
    # category), and every rewrite offered at any SITE line says what it relies on.
    text = Path(fs.__file__).read_text(encoding="utf-8")
    ours = {state.TEACHER, state.FUNC_GRAD, state.TENSOR_OPS, state.FIRST_MATCH, state.STOP_MASK, state.LOGGED,
            state.REPORTED}
    marked = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        found = re.search(r"# SITE: (.*)$", line)
        if not found:
            continue
        offered = [rw for category in _BY_CATEGORY for rw in candidates(text, lineno, category)[0]]
        assert all(rw.note for rw in offered), f"fix_state.py:{lineno}: a rewrite names no assumption"
        if found.group(1) in ours:
            marked += 1
            assert found.group(1) in {rw.name for rw in offered}, f"fix_state.py:{lineno} is not offered its rewrite"
    # the corpus's sites of these rewrites: a marker lost is a site untested (12 since the gradient
    # accumulation's logged float, kept a tensor by the writer of the program's own class, is none)
    assert marked >= 12


def test_a_call_retried_without_a_keyword_on_type_error_is_chosen_by_the_signature() -> None:
    src = ("import torch\n\n\n"
           "def run(blocks, x, lengths):\n"
           "    for layer in blocks:\n"
           "        try:\n"
           "            x = layer(x, lengths=lengths)\n"
           "        except TypeError:\n"
           "            x = layer(x)\n"
           "    return x\n")
    (rw,) = [r for r in candidates(src, 7, OTHER)[0] if r.name == signatures.SIGNATURE]
    assert "".join(rw.replacement) == (
        "        import inspect\n"
        "        _accepts = inspect.signature(getattr(layer, 'forward', layer)).parameters\n"
        "        if all(k in _accepts for k in ('lengths',)) or any(p.kind == p.VAR_KEYWORD for p in _accepts.values()):\n"
        "            x = layer(x, lengths=lengths)\n"
        "        else:\n"
        "            x = layer(x)\n")
    assert rw.taken == (9,)  # verified only where the fallback ran
    # Another exception, a name bound to it, a fallback that changes an argument, more in a body:
    # what the try catches is not only the signature's refusal.
    for old, new in (("except TypeError:", "except ValueError:"), ("except TypeError:", "except TypeError as e:"),
                     ("x = layer(x)\n    return", "x = layer(x * 2)\n    return"),
                     ("            x = layer(x)\n", "            x = layer(x)\n            x = x + 1\n")):
        changed = src.replace(old, new)
        assert signatures.SIGNATURE not in [r.name for r in candidates(changed, 7, OTHER)[0]], new


# -- live: dynscope.fix on the corpus ---------------------------------------------------------------------


def _fix(name: str) -> dynscope.FixResult:
    model, inputs = fs.PROGRAMS[name]()
    return dynscope.fix(model, inputs)


def _verified(res: dynscope.FixResult, rewrite: str) -> list[dynscope.Patch]:
    found = [p for p in res.patches if p.rewrite == rewrite]
    assert found, f"no {rewrite!r} patch: {[(p.rewrite, p.why_not) for p in res.patches]}"
    for p in found:
        assert p.verified and p.breaks_after == 0 and p.outputs_matched, (p.site, p.why_not)
    return found


@pytest.mark.heavy
def test_teacher_copies_and_gradients_in_forward_are_verified() -> None:
    distill = _fix("distill")
    (p,) = _verified(distill, state.TEACHER)
    assert p.gradients_matched is True and distill.breaks_after == 0
    assert "torch.func.functional_call(self.student, _teacher_state, args, kwargs)" in p.diff
    saliency = _fix("saliency")
    # One torch.func patch spans the requires_grad_ site and the autograd.grad site: the later of
    # the two is part of it.
    (grad,) = _verified(saliency, state.FUNC_GRAD)
    assert [u.gone_with for u in saliency.unpatched] == [(grad.site,)]
    assert saliency.breaks_after == 0
    penalty = _fix("gradient_penalty")
    (gp,) = _verified(penalty, state.FUNC_GRAD)  # the second site part of it, as for saliency
    assert [u.gone_with for u in penalty.unpatched if u.owner == "your code"] == [(gp.site,)]
    assert gp.gradients_matched is True, "the penalty's second derivative reaches the critic as in eager"


@pytest.mark.heavy
def test_a_guidance_gradient_reached_through_a_solver_s_lambda_is_verified_and_the_user_s_model_untouched() -> None:
    # class_grad is made inside the wrapper, which the sampler's lambda closes over: the patched
    # file's copies of all three run, over the copied model's own modules, and the user's
    # modules get no gradient from fix's runs.
    model, x = fs.PROGRAMS["guided_sampler"]()
    res = dynscope.fix(model, x)
    (p,) = _verified(res, state.FUNC_GRAD)
    assert p.gradients_matched is True and res.breaks_after == 0
    assert all(q.grad is None for q in model.parameters())


@pytest.mark.heavy
def test_generators_loops_and_early_stops_are_verified() -> None:
    for name, rewrite in [("episode", state.TENSOR_OPS), ("outliers", state.TENSOR_OPS),
                          ("nucleus", state.FIRST_MATCH), ("greedy_buffer", state.STOP_MASK),
                          ("rollout", state.STOP_MASK)]:
        res = _fix(name)
        _verified(res, rewrite)
        assert res.breaks_after == 0, name
    (p,) = _verified(_fix("rollout"), state.STOP_MASK)
    assert p.gradients_matched is True, "rewards after the stop are zeros: the return's gradient is eager's"


@pytest.mark.heavy
def test_logged_losses_are_verified_and_the_optimizer_is_left_alone(capsys: pytest.CaptureFixture[str]) -> None:
    res = _fix("nanogpt")
    _verified(res, state.LOGGED)
    assert {u.category for u in res.unpatched} == {"backward() in compiled code", "torch.optim (on purpose)"}
    _verified(_fix("reporting"), state.REPORTED)
    capsys.readouterr()


@pytest.mark.heavy
def test_a_meter_fed_a_number_keeps_it_a_detached_tensor_of_the_same_value_said_in_the_patch() -> None:
    res = _fix("metered_step")
    (p,) = _verified(res, TENSOR)
    assert "self.loss_meter.update(loss.detach(), x.size(0))" in p.diff
    # Every number the meter keeps is now a 0-dim tensor: verified, and the patch says which.
    for key in ("model.loss_meter.avg", "model.loss_meter.sum", "model.loss_meter.val"):
        assert f"`{key}`" in p.assumes, p.assumes
    assert "`model.loss_meter.count`" not in p.assumes  # an int it still counts
    assert "calls float()" in p.assumes


@pytest.mark.heavy
def test_the_user_s_optimizer_whose_step_torch_wrapped_is_patched_and_verified() -> None:
    # torch.optim wrapped TrustSGD.step in its profiling hook when the model made the optimizer:
    # the patched copy of the class is found by the def the wrapper wraps.
    res = _fix("trusted")
    (p,) = _verified(res, "branch to torch.where")
    assert p.gradients_matched is not False and "torch.where(" in p.diff
    assert {u.category for u in res.unpatched} == {"backward() in compiled code", "torch.optim (on purpose)"}


@pytest.mark.heavy
def test_blocks_of_two_kinds_are_called_by_their_signature_live() -> None:
    res = _fix("mixed_blocks")
    (p,) = _verified(res, signatures.SIGNATURE)
    assert p.gradients_matched is True and res.breaks_after == 0


@pytest.mark.heavy
def test_an_enum_member_the_model_holds_is_the_patched_file_s_in_the_copy_that_runs() -> None:
    # Without the patched file's member, `self.reduction == Reduction.SUM` is False in the copy
    # and the outputs differ: the patch would be refused for what fix did, not what it wrote.
    model, inputs = fs.PROGRAMS["enum_setting"]()
    res = dynscope.fix(model, inputs)
    (p,) = _verified(res, "count kept a tensor")
    assert p.gradients_matched is True and res.breaks_after == 0
    assert model.reduction is fs.Reduction.SUM  # the user's model keeps its own member


@pytest.mark.heavy
@pytest.mark.parametrize(("name", "why"), [
    # A copy kept on self: no call to rewrite, and .clone() is no method of a module.
    ("ema_teacher", "'Linear' object has no attribute 'clone'"),
    # The caller's x was made to require grad and the output reads it: its gradient differs.
    ("saliency_leak", "gradients differ from the unpatched eager run"),
    # The first separator's index, a 0-dim tensor, slices the tokens: the slice breaks instead.
    ("prompt", "the break moved to fix_state.py:"),
    # The caller wants a Python float, not a tensor.
    ("eval_mean", "outputs differ from the unpatched eager run"),
])
def test_rewrites_that_would_change_what_the_program_gives_are_not_verified(name: str, why: str) -> None:
    res = _fix(name)
    assert res.patches and not any(p.verified for p in res.patches)
    assert all(why in p.why_not and p.assumes for p in res.patches), [p.why_not for p in res.patches]


@pytest.mark.heavy
def test_a_writer_the_model_holds_keeps_a_tensor_where_it_kept_a_float_and_the_patch_says_so() -> None:
    # An event writer of the program's own (held, as tensorboard's and wandb's are, which take a
    # tensor where they take a float) keeps the value as a detached 0-dim tensor: verified, said.
    res = _fix("accumulating")
    (p,) = _verified(res, "keep the logged value a tensor")
    assert "`model.writer.rows` now holds detached 0-dim tensors where the unpatched run kept Python floats" in p.assumes
    assert res.breaks_after == 0


@pytest.mark.heavy
def test_a_decode_whose_stop_decides_the_returned_length_gets_no_patch_and_says_why() -> None:
    # The decode stops at its third step: a list of all six turns would be longer. Refused by
    # shape, not left to verification (inputs that never stop early could not show it).
    res = _fix("greedy_list")
    assert not res.patches
    (u,) = [u for u in res.unpatched if u.owner == "your code"]
    assert "the loop's stop decides how long `toks` grows" in u.why


@pytest.mark.heavy
def test_a_module_made_in_forward_is_left_alone_with_the_reason() -> None:
    res = _fix("lazy_head")
    assert not res.patches
    (left,) = res.unpatched
    assert left.owner == "your code" and left.why.startswith("no patch: self.head is made in forward (nn.Linear(...))")
    assert "Make it in __init__ (torch.nn.LazyLinear" in left.why
