"""dynscope.fix (issue 35): each rewrite on a program where it applies and on one where it
must not, verified by rerunning live compiles; library code left alone; --write with a
backup; the CLI (the whole corpus measured: test_fix_corpus.py).

Each fix reruns its program several times under torch.compile: those tests are in the heavy
tier (the whole suite); the rewrites' text tests stay in the fast tier."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import dynscope
from dynscope._capture.fix.rewrites import _BY_CATEGORY, candidates, combined
from dynscope._capture.fix.verify import compare, copied, counterpart, patched_module, run_eager
from tests.corpus import fix_programs as fp

ROOT = Path(__file__).resolve().parents[3]


def _fix(name: str, **kw: Any) -> dynscope.FixResult:
    model, inputs = fp.PROGRAMS[name]()
    return dynscope.fix(model, inputs, **kw)


def _patch(result: dynscope.FixResult, rewrite: str) -> dynscope.Patch:
    (p,) = [p for p in result.patches if p.rewrite == rewrite]
    return p


# -- each rewrite, where it applies and where it must not -----------------------------------------


@pytest.mark.heavy
def test_a_guarded_print_is_verified_and_a_print_that_mutates_is_not(capsys: pytest.CaptureFixture[str]) -> None:
    res = _fix("logged_stack")
    guarded = [p for p in res.patches if p.rewrite == "guard side effect"]
    assert guarded and all(p.verified and p.breaks_after == 0 for p in guarded)
    assert all("if not torch.compiler.is_compiling():" in p.diff for p in guarded)
    assert "+            print(\"stack input\", x.shape)  # SITE: guard side effect" in guarded[0].diff + guarded[1].diff
    (mutating,) = _fix("mutating").patches
    assert mutating.rewrite == "guard side effect" and not mutating.verified
    assert mutating.outputs_matched is False and "outputs differ" in mutating.why_not
    capsys.readouterr()


@pytest.mark.heavy
def test_a_branch_becomes_torch_where_unless_the_branches_differ_in_shape() -> None:
    res = _fix("clipped")
    where = _patch(res, "branch to torch.where")
    assert where.verified and where.outputs_matched and where.breaks_before == 1 and where.breaks_after == 0
    assert "+    _pred = scores.mean() > threshold" in where.diff
    assert "+    offset = torch.where(_pred, scores.mean(), scores.min())" in where.diff
    (shape,) = _fix("shapes").patches
    assert shape.rewrite == "branch to torch.where" and not shape.verified
    assert "the patched program raised" in shape.why_not


@pytest.mark.heavy
def test_a_multi_statement_branch_becomes_torch_cond() -> None:
    cond = _patch(_fix("regularised"), "branch to torch.cond")
    assert cond.verified and cond.gradients_matched is True
    assert "torch.cond(penalty > 1, _then, _else, (penalty,))" in cond.diff
    assert "return (penalty.clone(),)" in cond.diff  # no operand returned as it is


@pytest.mark.heavy
def test_branches_of_other_shapes_are_neither_torch_where_nor_torch_cond() -> None:
    (p,) = _fix("uneven").patches
    assert not p.verified and p.rewrite == "branch to torch.where"
    assert "also tried branch to torch.cond: the patched program raised" in p.why_not


@pytest.mark.heavy
def test_a_deepcopy_of_a_module_in_forward_is_a_call_with_its_detached_state() -> None:
    # copy.deepcopy(self.fc) then frozen(x): a module, not a tensor, so never .clone(); the
    # copy is called with a detached snapshot of the module's state (functional_call).
    (p,) = _fix("copies_layer").patches
    assert p.rewrite == "call with detached state instead of deepcopy" and p.verified, p.why_not
    assert "functional_call" in p.diff and p.gradients_matched is True
@pytest.mark.heavy
def test_several_calls_are_verified_call_by_call(capsys: pytest.CaptureFixture[str]) -> None:
    model, (x, mask) = fp.PROGRAMS["attention"]()
    res = dynscope.fix(model, calls=[(x, mask), (x * 2, mask), (x[:1], mask[:1])])
    printed = [p for p in res.patches if not p.verified]
    # Every patch verifies but the guard of the print that prints: its line is silenced under compile.
    assert len(res.patches) == 5 and [p.site for p in printed] == ["fix_programs.py:45"]
    assert "not said under torch.compile: 'print: attention scores (#" in printed[0].why_not
    assert printed[0].breaks_after == 0 and printed[0].outputs_matched
    assert res.breaks_before > 6, "three calls, more break events (recompiles) than one"
    capsys.readouterr()


@pytest.mark.heavy
def test_item_stays_a_detached_tensor_unless_python_needs_the_number() -> None:
    res = _fix("train_loss")
    item = _patch(res, "keep it a tensor")
    assert item.verified and item.gradients_matched is True
    assert "+        value = loss.detach()" in item.diff
    loops = _fix("loops")
    # range() needs a Python int: kept a tensor, the number would be read back there (the break
    # would move to range()), so no patch is written and the reason names the line.
    assert not loops.patches
    (left,) = loops.unpatched
    assert "is read as a size at line" in left.why and "range(" in left.why, left.why


@pytest.mark.heavy
def test_a_moved_break_is_followed_into_one_patch_of_both_statements() -> None:
    res = _fix("kv_step")
    (both,) = [p for p in res.patches if p.site.endswith(":133")]
    assert both.verified and both.rewrite == "keep it a tensor, then branch to torch.where"
    assert "-        norm = cache.norm().item()" in both.diff and "torch.where(norm > 100" in both.diff
    # A break that moves to a statement no rewrite can fix stays proposed, and says where it went.
    routing = _fix("routing")
    (moved,) = [p for p in routing.patches if p.site.endswith(":79")]
    assert not moved.verified and "the break moved to fix_programs.py:80" in moved.why_not


@pytest.mark.heavy
def test_a_train_step_is_verified_on_its_updated_weights(capsys: pytest.CaptureFixture[str]) -> None:
    model, opt, x, y = fp.PROGRAMS["train_step"]()[1]
    before = [p.detach().clone() for p in model.parameters()]
    res = dynscope.fix(fp.sgd_step, (model, opt, x, y))
    (guard,) = res.patches
    # Outputs and the updated weights equal, the break gone: only the step's log line is not
    # printed under compile, so the guard is proposed, the message quoted.
    assert guard.rewrite == "guard side effect" and guard.category == ".item()/scalar output"
    assert guard.outputs_matched and guard.breaks_after == 0 and not guard.verified
    assert guard.why_not.startswith("what the program prints or logs changes: ") and "'print: step loss #'" in guard.why_not
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True)), "fix trained the model"
    owners = {u.owner for u in res.unpatched}
    assert owners == {"your code"} and {u.category for u in res.unpatched} >= {"torch.optim (on purpose)"}
    # The weights after the step are part of what must match: a different update is caught.
    from dynscope._capture.fix.verify import Run

    same, other = Run([torch.ones(1)], {}, {"w": torch.zeros(2)}), Run([torch.ones(1)], {}, {"w": torch.ones(2)})
    assert compare(same, same).outputs_matched and not compare(same, other).outputs_matched
    capsys.readouterr()


@pytest.mark.heavy
def test_a_model_with_batchnorm_is_verified_and_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _net_file(tmp_path, "bnmodel", ["self.fc = nn.Linear(4, 4)", "self.bn = nn.BatchNorm1d(4)"],
              ["h = self.bn(self.fc(x))", 'logging.debug("batch %s", h.shape)', "return h.relu()"])
    sys.path.insert(0, str(tmp_path))
    try:
        import bnmodel  # type: ignore[import-not-found]

        torch.manual_seed(0)
        model = bnmodel.Net()
        stats = model.bn.running_mean.clone(), int(model.bn.num_batches_tracked)
        res = dynscope.fix(model, torch.randn(8, 4))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("bnmodel", None)
    (p,) = res.patches
    assert p.verified, p.why_not
    assert torch.equal(model.bn.running_mean, stats[0]) and int(model.bn.num_batches_tracked) == stats[1]
    capsys.readouterr()


@pytest.mark.heavy
def test_masks_clones_and_detaches() -> None:
    mask = _patch(_fix("clipped"), "mask instead of select")
    assert mask.verified and "torch.where(scores > 0.5, scores, 0).sum()" in mask.diff
    res = _fix("regularised")
    clone = _patch(res, "clone instead of deepcopy")
    assert clone.verified and "+        ref = x.clone()" in clone.diff
    detach = _patch(res, "detach instead of requires_grad = False")
    assert detach.verified and "+        noise = noise.detach()" in detach.diff
    assert res.breaks_before == 3 and res.breaks_after == 0 and res.outputs_matched_after is True


@pytest.mark.heavy
def test_a_statement_no_rewrite_knows_is_said_with_pytorchs_remedy() -> None:
    # max(x.abs().tolist()[0]): a Python max over a list no rewrite turns into tensor ops.
    res = _fix("preprocessing")
    (left,) = res.unpatched
    assert left.site.endswith(":187") and left.owner == "your code"
    assert left.why.startswith("no patch: the statement at line 187 is not a shape")
    assert "capture_scalar_outputs = True" in left.why  # the category's own remedy follows


def test_rewrites_refuse_statements_of_other_shapes() -> None:
    src = "import torch\ndef f(x):\n    x.add_(1)\n    return x\n"
    assert candidates(src, 3, "logging/print side effect")[0] == []
    assert candidates(src, 3, "no such category")[1] == "no rewrite is known for a 'no such category' break"
    assert "does not parse" in candidates("def f(:\n", 1, "logging/print side effect")[1]
    branchy = "import torch\ndef f(x):\n    if x.sum() > 0:\n        print(x)\n    return x\n"
    # A branch with a side effect is no torch.where; one that only reports runs in eager code only.
    assert [r.name for r in candidates(branchy, 3, "data-dependent branch")[0]] == ["guard a check that reports"]
    mean = "import torch\ndef f(x):\n    return x[x > 0].mean()\n"
    # The mean of the selected values is the masked sum over the count, not the masked tensor's mean.
    assert ["".join(r.replacement) for r in candidates(mean, 3, "data-dependent guard/shape")[0]] == [
        "    return torch.where(x > 0, x, 0).sum() / (x > 0).sum()\n"]
    on = "import torch\ndef f(x):\n    y = x * 2\n    y.requires_grad = True\n    return y\n"
    assert candidates(on, 4, "tensor attribute mutation (requires_grad)")[0] == [], "detach cannot turn grad on"


def test_rewrites_refuse_what_would_change_meaning() -> None:
    head = "import torch\ndef f(x, mask, n, y, z):\n"

    def names(body: str, line: int, category: str) -> list[str]:
        return [r.name for r in candidates(head + body, line, category)[0] if not (r.taken or r.skipped)]

    # An elif, or a statement sharing its line, is not rewritten line by line.
    assert candidates(head + "    if x.sum() > 0:\n        y = x\n    elif x.sum() < 0:\n        y = -x\n    return y\n",
                      5, "data-dependent branch")[1].endswith("does not start its line (an elif, or after another statement)")
    assert "does not start its line" in candidates(head + "    y = x; print(y)\n    return y\n", 3,
                                                   "logging/print side effect")[1]
    assert "does not `import torch`" in candidates("def f(x):\n    print(x)\n", 2, "logging/print side effect")[1]
    # `is None and ...` short-circuits: no `&`; the Python test stays an `if` around the where.
    # A plain name may be a Python bool: the same.
    # (The last resorts that need a run's evidence, dropping the test, come after: left out here.)
    (split,) = [r for r in candidates(head + "    if mask is not None and mask.any():\n        y = x * 2\n    return y\n",
                                      3, "data-dependent branch")[0] if not r.skipped]
    assert "".join(split.replacement) == "    if mask is not None:\n        y = torch.where(mask.any(), x * 2, y)\n"
    assert "".join(candidates(head + "    if n and x.sum() > 0:\n        y = x * 2\n    return y\n", 3,
                              "data-dependent branch")[0][0].replacement) == (
        "    if n:\n        y = torch.where(x.sum() > 0, x * 2, y)\n")
    # With an else, the where picks between both branches and the else stays for Python's test;
    # with `or`, Python's test cannot be split off: nothing.
    (split,) = [r for r in candidates(head + "    if mask is not None and mask.any():\n        y = x\n    else:\n"
                                      "        y = z\n    return y\n", 3, "data-dependent branch")[0] if not r.skipped]
    assert "".join(split.replacement) == (
        "    if mask is not None:\n        y = torch.where(mask.any(), x, z)\n    else:\n        y = z\n")
    assert names("    if mask is None or mask.any():\n        y = x * 2\n    return y\n", 3, "data-dependent branch") == []
    # int() truncates toward zero: as .long() does (of a plain name it stays: a Python number's).
    (where,) = [r for r in candidates(head + "    if int(x.sum()) > 0:\n        y = x * 2\n    return y\n", 3,
                                      "data-dependent branch")[0] if not r.skipped]
    assert "torch.where(x.sum().long() > 0, x * 2, y)" in where.source
    (named,) = [r for r in candidates(head + "    if int(n) > 0:\n        y = x * 2\n    return y\n", 3,
                                      "data-dependent branch")[0] if not r.skipped]
    assert "torch.where(int(n) > 0, x * 2, y)" in named.source
    # One where per name must read what the branch reads: else `b = z; a = b * 2` reads its new
    # b, so b's where comes first; where no order reads what both branches read, no where.
    order = "    if x.sum() > 0:\n        a = x\n        b = y\n    else:\n        b = z\n        a = b * 2\n    return a + b\n"
    (where,) = [r for r in candidates(head + order, 3, "data-dependent branch")[0] if r.name == "branch to torch.where"]
    assert "".join(where.replacement) == ("    _pred = x.sum() > 0\n    b = torch.where(_pred, y, z)\n"
                                          "    a = torch.where(_pred, x, b * 2)\n")
    crossed = order.replace("        a = x\n", "        a = b + 1\n")  # then reads the old b, else the new one
    assert "branch to torch.where" not in names(crossed, 3, "data-dependent branch")
    # A sum over a dim of a 1-D selection is no masked sum; a mask of another tensor is widened
    # over the selected tensor's trailing dimensions (fix/masks.py), not applied as it is.
    assert names("    return x[x > 0].sum(dim=1)\n", 3, "data-dependent guard/shape") == []
    (other,) = candidates(head + "    return x[mask > 0].sum()\n", 3, "data-dependent guard/shape")[0]
    assert other.name == "masked reduction inline" and "(mask > 0).view(*(mask > 0).shape" in other.source
    # float() around something the rewrite did not make stays.
    (item,) = candidates(head + "    s = float(n) * x.sum().item()\n    return x / s\n", 3, ".item()/scalar output")[0]
    assert "float(n) * x.sum().detach()" in item.source


def test_every_rewrite_of_the_corpus_names_its_assumption() -> None:
    # Text only (no rerun): every rewrite every category offers at every SITE line of the
    # corpus says what it relies on; the heavy corpus measure asserts the same of each patch,
    # and that every unverified one says why.
    text = Path(fp.__file__).read_text(encoding="utf-8")
    seen = 0
    for lineno, line in enumerate(text.splitlines(), 1):
        if "# SITE:" not in line:
            continue
        for category in _BY_CATEGORY:
            for rw in candidates(text, lineno, category)[0]:
                seen += 1
                assert rw.note, f"fix_programs.py:{lineno} {rw.name} names no assumption"
    assert seen >= 40


def test_a_failed_rerun_says_its_root_cause_and_what_the_rewrite_assumed() -> None:
    from dynscope._capture.fix import _root_cause
    from dynscope._errors import CaptureError

    try:
        try:
            raise RuntimeError("Attempting to broadcast a dimension of length 4\nmore")
        except RuntimeError as inner:
            raise CaptureError("the model raised during call 0 of 1: TorchRuntimeError: ...",
                               report=dynscope.Report(), call_index=0, party="compiler") from inner
    except CaptureError as err:
        said = _root_cause(err)
    assert said == "RuntimeError: Attempting to broadcast a dimension of length 4 (under torch.compile)"
    try:
        raise CaptureError("the model raised during call 0 of 1 (eagerly too, without torch.compile): x",
                           report=dynscope.Report(), call_index=0, party="model") from (
            AttributeError("'Linear' object has no attribute 'clone'"))
    except CaptureError as err:
        said = _root_cause(err)
    assert said == "AttributeError: 'Linear' object has no attribute 'clone' (in eager too, without torch.compile)"


@pytest.mark.heavy
def test_the_must_not_programs_say_why_in_the_terms_of_the_rewrites_assumption() -> None:
    # A deepcopy of a module kept on self made .clone(); branches of two shapes made torch.where: each
    # says the error it met and what the rewrite assumed, not a cut-off traceback.
    from tests.corpus import fix_state

    model, x = fix_state.PROGRAMS["ema_teacher"]()  # an EMA copy kept on self: only .clone() is tried
    (p,) = dynscope.fix(model, x).patches
    assert not p.verified and "'Linear' object has no attribute 'clone'" in p.why_not
    assert p.why_not.endswith("the rewrite assumes the copied value is a tensor")
    (p,) = _fix("shapes").patches
    assert not p.verified and "Attempting to broadcast" in p.why_not and "one shape and dtype" in p.why_not


BLOCKED = """import torch


def step(x):
    print("step", x.shape)
    y = x * 2
    if y.shape[0] == 4:
        y = y + 1
    return y.sin()


def build():
    x = torch.ones(4, 3)
    torch._dynamo.mark_dynamic(x, 0)  # the if above specializes it: compile fails, eager runs
    return step, x
"""


@pytest.mark.heavy
def test_a_program_that_fails_under_compile_gets_patches_before_the_failure(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "blocked.py").write_text(BLOCKED)
    sys.path.insert(0, str(tmp_path))
    try:
        import blocked  # type: ignore[import-not-found]

        res = dynscope.fix(*blocked.build())
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("blocked", None)
    assert res.blocked.startswith("torch.compile fails compiling step from blocked.py:5 on: ConstraintViolationError")
    assert "specialized it" in res.blocked and "run fix again" in res.blocked
    (p,) = res.patches  # the print before the failure: patched, its break gone, not verified
    assert p.rewrite == "guard side effect" and not p.verified and p.breaks_after == 0 and p.outputs_matched is None
    assert p.why_not.startswith("the program fails under torch.compile after this site (ConstraintViolationError")
    assert "Blocked: torch.compile fails" in res.summary() and "<h2>Blocked</h2>" in res.to_html()
    capsys.readouterr()


def test_outputs_compare_dtypes_and_python_numbers() -> None:
    from dynscope._capture.fix.verify import Run

    def ev(a: Any, b: Any) -> bool:
        return compare(Run([a], {}), Run([b], {})).outputs_matched

    assert ev({"loss": 1.0, "t": torch.ones(2)}, {"loss": 1.0, "t": torch.ones(2)})
    assert not ev({"loss": 1.0}, {"loss": 1.5}), "a Python number that changed"
    assert not ev(torch.ones(2), torch.ones(2, dtype=torch.float64)), "a dtype that changed"
    assert not ev((torch.ones(1), "a"), (torch.ones(1), "b"))


def test_two_rewrites_of_one_file_apply_together() -> None:
    src = "import torch\ndef f(x):\n    print(x.shape)\n    s = x.sum().item()\n    return x / s\n"
    (a,), _ = candidates(src, 3, "logging/print side effect")
    (b,), _ = candidates(src, 4, ".item()/scalar output")
    both = combined(src, [a, b])
    assert "    if not torch.compiler.is_compiling():\n        print(x.shape)\n" in both
    assert "    s = x.sum().detach()\n" in both and both.endswith("    return x / s\n")


# -- whose code, and writing --------------------------------------------------------------------


@pytest.mark.heavy
def test_a_break_inside_an_installed_package_gets_no_edit(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pkg = tmp_path / "site-packages" / "fakepkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("def report_shape(t):\n    print('shape', t.shape)\n    return t\n")
    sys.path.insert(0, str(pkg.parent))
    try:
        import fakepkg  # type: ignore[import-not-found]

        def step(x: torch.Tensor) -> torch.Tensor:
            return fakepkg.report_shape(x.sin()) * 2

        res = dynscope.fix(step, torch.ones(3))
    finally:
        sys.path.remove(str(pkg.parent))
        sys.modules.pop("fakepkg", None)
    assert not res.patches
    (left,) = res.unpatched
    assert left.owner == "fakepkg" and "dynscope does not edit installed packages" in left.why
    assert left.site == "__init__.py:2"
    capsys.readouterr()


def _net_file(tmp_path: Path, name: str, layers: list[str], forward: list[str], tail: str = "") -> Path:
    """``tmp_path/name.py``: a module ``Net`` with ``layers`` in __init__ and ``forward``'s lines."""
    init = "".join(f"        {ln}\n" for ln in layers)
    body = "".join(f"        {ln}\n" for ln in forward)
    path = tmp_path / f"{name}.py"
    path.write_text("import logging\n\nimport torch\nfrom torch import nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
                    f"        super().__init__()\n{init}\n    def forward(self, x):\n{body}{tail}")
    return path


def _user_file(tmp_path: Path) -> Path:
    return _net_file(tmp_path, "mymodel", ["self.a = nn.Linear(8, 8)"], [
        "h = self.a(x).relu()",
        'logging.debug("features %s", h.shape)  # debug output: written nowhere at the default level',
        "if h.sum() > 0:",
        "    h = h * 2",
        "else:",
        "    h = h - 1",
        "scale = h.abs().mean().item()",
        "return h / scale",
    ], "\n\ndef build():\n    print('building features')\n    torch.manual_seed(0)\n    return Net(), torch.randn(4, 8)\n")


@pytest.mark.heavy  # two fix reruns (seconds): the main tier
def test_write_applies_the_verified_patches_and_keeps_a_backup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _user_file(tmp_path)
    before = path.read_text()
    sys.path.insert(0, str(tmp_path))
    try:
        import mymodel  # type: ignore[import-not-found]

        model, x = mymodel.build()
        dry = dynscope.fix(model, x)
        assert path.read_text() == before, "nothing of the user's changes without write"
        res = dynscope.fix(model, x, write=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mymodel", None)
    assert [p.verified for p in dry.patches] == [True, True, True] and dry.breaks_after == 0
    assert res.written == (str(path),) and Path(res.backups[0]).read_text() == before
    after = path.read_text()
    assert "torch.where(h.sum() > 0, h * 2, h - 1)" in after and "scale = h.abs().mean().detach()" in after
    # The written file compiles without a break, and computes what the old one did.
    with patched_module(str(path), after) as new, patched_module(str(path), before) as old:
        torch.manual_seed(0)
        model_new, xs = new.build()
        assert dynscope.report(model_new, xs).break_count == 0
        torch.manual_seed(0)
        model_old, _ = old.build()
        assert compare(run_eager(model_old, [((xs,), {})]), run_eager(model_new, [((xs,), {})])).outputs_matched
    capsys.readouterr()


@pytest.mark.heavy
def test_the_result_as_text_page_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    res = _fix("clipped")
    text = res.summary()
    assert text.startswith("dynscope fix: clipped_scores\n2 break sites, 2 break events; 2 verified patches")
    assert "--- a/fix_programs.py" in text and "outputs equal to eager: yes" in text
    page = res.to_html()
    assert '<pre class="detail">--- a/fix_programs.py' in page and "mask instead of select" in page
    assert "<h2>Patches</h2>" in page and page.index("<h2>Patches</h2>") < page.index("outputs equal to eager")
    data = json.loads(json.dumps(res.to_dict()))
    assert data["kind"] == "dynscope-fix" and len(data["patches"]) == 2 and data["patches"][0]["verified"]


@pytest.mark.heavy
def test_the_cli_prints_json_and_writes(tmp_path: Path) -> None:
    path = _user_file(tmp_path)
    env = {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "dynscope", "fix", f"{path}:build", "--json", "-q"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(done.stdout)  # the program's own prints went to stderr
    assert [p["verified"] for p in data["patches"]] == [True, True, True]
    assert "building features" in done.stderr
    wrote = subprocess.run([sys.executable, "-m", "dynscope", "fix", f"{path}:build", "--write", "-q"],
                           capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert wrote.returncode == 0 and "Written: " in wrote.stdout
    assert (tmp_path / "mymodel.py.dynscope-backup").is_file()


def line_of(marker: str) -> int:
    """The line of this file that ends with ``# MARK: marker``."""
    lines = Path(__file__).read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if ln.rstrip().endswith(f"# MARK: {marker}"))


@pytest.mark.heavy
def test_a_function_defined_inside_another_is_verified_on_copies_of_what_it_closes_over() -> None:
    # A train step a builder returns, closing over its model and a statistic it updates (the
    # shape of gaussian-splatting's densify step): the patched copy is the patched file's def,
    # over copies; every run starts from the state given, and the user's objects are not changed.
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 4)
    seen = torch.zeros(4)
    weights = {k: v.clone() for k, v in model.state_dict().items()}

    def step(x: torch.Tensor) -> torch.Tensor:
        y = model(x)
        seen[y.sum(0) > 0] += 1  # MARK: closure-write
        return y[y > 0].mean() + seen.sum()  # MARK: closure-select

    res = dynscope.fix(step, torch.randn(8, 4))
    assert {p.lineno: p.verified for p in res.patches} == {line_of("closure-write"): True,
                                                          line_of("closure-select"): True}, res
    assert all(p.breaks_after == 0 for p in res.patches)
    assert torch.equal(seen, torch.zeros(4)), "fix ran the step on a copy of what it closes over"
    assert all(torch.equal(weights[k], v) for k, v in model.state_dict().items())
    with patched_module(__file__, Path(__file__).read_text()) as module:
        twin, why = counterpart(step, __file__, module)
    assert twin is not None and twin is not step and not why
    assert twin.__code__.co_filename == module.__file__, "the patched file's code"
    x = torch.randn(8, 4)
    assert torch.equal(twin(x), copied(step)(x)), "over copies of the same values, the same result"
    assert torch.equal(seen, torch.zeros(4))


@pytest.mark.heavy
def test_a_nested_function_the_patch_cannot_find_says_why() -> None:
    def local(x: torch.Tensor) -> torch.Tensor:
        return x + 1

    # The patched file's def sits at another line (a rewrite above it moved it by one): found by
    # its line, so a map that sends the line nowhere finds none, and says so.
    with patched_module(__file__, Path(__file__).read_text()) as module:
        twin, why = counterpart(local, __file__, module, lambda line: None)
    assert twin is None and "defined inside another function" in why and "no def of it" in why


@pytest.mark.heavy
def test_advise_ranks_verified_patches_beside_the_config_remedies(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    _user_file(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        import mymodel  # type: ignore[import-not-found]

        model, x = mymodel.build()
        adv = dynscope.advise(model, x, patches=True)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("mymodel", None)
    names = [t.remedy for t in adv.trials]
    patches = [t for t in adv.trials if t.remedy.startswith("source patch")]
    assert len(patches) == 3 and all(t.helped and t.outputs_match for t in patches)
    assert {t.target for t in patches} == {(dynscope.Target(site=f"mymodel.py:{n}"),) for n in (14, 15, 19)}
    # Whatever helped comes before what did not, and what was not run comes last.
    assert names.index("is_compiling guard") > max(names.index(t.remedy) for t in patches)
    assert all(t.after is not None and t.after.breaks < t.before.breaks for t in patches)
    # Each trial's code is the lines its patch puts in (Patch.added, from the two texts).
    assert all(t.code and "torch.where(" in t.code for t in patches if "torch.where" in t.remedy), [
        (t.remedy, t.code) for t in patches]
    assert "source patch (branch to torch.where)" in adv.summary()
    capsys.readouterr()


@pytest.mark.heavy
def test_fix_leaves_pytorch_and_the_users_state_as_it_found_them(capsys: pytest.CaptureFixture[str]) -> None:
    from dynscope import _torch

    model, inputs = fp.PROGRAMS["clipped"]()
    compiled = torch.compile(model, backend="eager")
    compiled(*inputs)  # the user's own compile first: it must survive fix
    torch.manual_seed(123)
    rng = torch.random.get_rng_state()
    state = _torch.snapshot_state()
    modules = set(sys.modules)
    with dynscope.capture() as cap:  # a capture open around fix sees the user's program only
        res = dynscope.fix(model, inputs)
    assert res.verified and torch.equal(torch.random.get_rng_state(), rng)
    assert _torch.snapshot_state() == state
    assert not [m for m in set(sys.modules) - modules if m.startswith("_dynscope_fix_")]
    assert all(g.frame.startswith(("clipped_scores", "torch_dynamo_resume")) for g in cap.report.graphs)
    assert cap.report.break_count == res.breaks_before  # the patched copies' compiles are not counted
    assert torch.equal(compiled(*inputs), model(*inputs))
    capsys.readouterr()


def test_a_closure_is_run_over_copies_of_what_it_holds_copied_together() -> None:
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def step(x: torch.Tensor) -> torch.Tensor:
        opt.zero_grad()
        loss = model(x).sum() + later
        loss.backward()
        opt.step()
        return loss

    twin = copied(step)
    with pytest.raises(NameError):  # a cell not yet filled stays unfilled in the copy
        twin(torch.ones(2))
    later = 0.0
    twin = copied(step)
    held = dict(zip(twin.__code__.co_freevars, (c.cell_contents for c in twin.__closure__), strict=True))
    assert held["model"] is not model and held["opt"] is not opt
    assert held["opt"].param_groups[0]["params"][0] is held["model"].weight, "the optimizer steps the copied model"
    before = model.weight.detach().clone()
    twin(torch.ones(2))
    assert torch.equal(model.weight, before) and not torch.equal(held["model"].weight, before)
