"""dynscope.fix across the files of the user's project: a break inside a helper of another
file (reached by name, through a module, through a helper of a third file) is patched in that
file and verified by running the model against the patched copy; the patches of several files
verify together and ``write`` writes each file; a helper the model does not reach by name is
proposed, not verified, and says why. Live fixes: heavy tier."""

from __future__ import annotations

import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch

import dynscope

pytestmark = pytest.mark.heavy


def _project(tmp_path: Path) -> tuple[str, dict[str, Path]]:
    """A project of three files, their module names unique to this test: ``helpers`` (two
    breaking helpers), ``layers`` (a block calling one of them by name) and ``model`` (a Net
    calling the block, the other helper through the module, and breaking itself)."""
    tag = uuid.uuid4().hex[:8]
    files = {
        f"helpers_{tag}": """
            import logging

            import torch


            def scale(x: torch.Tensor) -> torch.Tensor:
                if x.sum() > 0:
                    x = x * 2
                return x


            def report(x: torch.Tensor) -> None:
                logging.debug("mean %s", x.mean())


            class Meter:
                def __init__(self) -> None:
                    self.total = 0.0

                def update(self, v: torch.Tensor) -> None:
                    self.total = self.total + v


            def agreeing(pred: torch.Tensor, target: torch.Tensor, k: int) -> torch.Tensor:
                both = pred[pred == target]
                return torch.histc(both.float(), bins=k, min=0, max=k - 1)
            """,
        f"layers_{tag}": f"""
            import torch

            from helpers_{tag} import scale


            def block(x: torch.Tensor) -> torch.Tensor:
                return torch.relu(scale(x)) + 1
            """,
        f"model_{tag}": f"""
            import logging

            import torch
            from torch import nn

            import helpers_{tag} as helpers
            from layers_{tag} import block


            class Net(nn.Module):
                def __init__(self) -> None:
                    super().__init__()
                    self.lin = nn.Linear(8, 8)

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    h = block(self.lin(x))
                    helpers.report(h)
                    logging.debug("out %s", h.shape)
                    return h.sum(-1)


            def step(x: torch.Tensor) -> torch.Tensor:
                return block(x) * 3


            OPS = {{"scale": helpers.scale}}  # bound at import: no name of the helper is read at call time


            def hidden(x: torch.Tensor) -> torch.Tensor:
                return OPS["scale"](x) * 3


            class Picked(nn.Module):
                # a helper picked in __init__ and held as an attribute (PyG's and OGB's pooling)
                def __init__(self) -> None:
                    super().__init__()
                    self.lin = nn.Linear(8, 8)
                    self.act = helpers.scale

                def forward(self, x: torch.Tensor) -> torch.Tensor:
                    return self.act(self.lin(x)).sum(-1)


            @torch.no_grad()
            def sample(x: torch.Tensor) -> torch.Tensor:
                # a decorated function (LLaDA's generate): torch's wrapper is what the name holds
                if x.mean() > 0:
                    x = x - 1
                return x * 3


            class Scored(nn.Module):
                # holds an object of the helpers' class and calls a helper function of theirs
                def __init__(self) -> None:
                    super().__init__()
                    self.head = nn.Linear(8, 3)
                    self.meter = helpers.Meter()

                def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
                    counts = helpers.agreeing(self.head(x).argmax(-1), target, 3)
                    self.meter.update(counts.sum())
                    return counts
            """,
    }
    paths = {}
    for name, text in files.items():
        paths[name.split("_")[0]] = tmp_path / f"{name}.py"
        paths[name.split("_")[0]].write_text(textwrap.dedent(text).lstrip())
    return tag, paths


@pytest.fixture
def project(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Any:
    tag, paths = _project(tmp_path)
    sys.path.insert(0, str(tmp_path))
    try:
        module = __import__(f"model_{tag}")
        yield module, paths
    finally:
        sys.path.remove(str(tmp_path))
        for name in [n for n in sys.modules if n.endswith(tag)]:
            del sys.modules[name]
        capsys.readouterr()


def test_a_helper_in_another_file_is_patched_there_and_verified(project: Any) -> None:
    module, paths = project
    torch.manual_seed(0)
    res = dynscope.fix(module.Net(), torch.randn(4, 8))
    by_site = {p.site: p for p in res.patches}
    scale = by_site[f"{paths['helpers'].name}:7"]  # reached through layers.block, a third file
    report = by_site[f"{paths['helpers'].name}:13"]  # reached through the module's name
    own = by_site[f"{paths['model'].name}:18"]
    for p in (scale, report, own):
        assert p.verified and p.breaks_after == 0 and p.outputs_matched, (p.site, p.why_not)
        assert p.program_breaks_after is not None and p.program_breaks_after < p.program_breaks_before
    assert scale.rewrite == "branch to torch.where" and scale.filename == str(paths["helpers"])
    assert "torch.where" in scale.diff and scale.diff.startswith(f"--- a/{paths['helpers'].name}")
    # The patches of both files together: no break left, outputs equal.
    assert res.breaks_after == 0 and res.outputs_matched_after is True, res.note


def test_a_function_model_reaches_the_patched_helper_through_another_file(project: Any) -> None:
    module, paths = project
    res = dynscope.fix(module.step, torch.randn(4, 8))
    (p,) = res.patches
    assert p.site == f"{paths['helpers'].name}:7" and p.verified and p.breaks_after == 0
    assert res.breaks_after == 0


def test_a_helper_reached_only_through_a_table_is_proposed_with_the_reason(project: Any) -> None:
    module, paths = project
    res = dynscope.fix(module.hidden, torch.randn(4, 8))
    (p,) = res.patches
    assert not p.verified
    assert f"does not reach the functions of {paths['helpers'].name} by name" in p.why_not


def test_a_helper_held_as_an_attribute_is_the_patched_one_in_the_copy_that_runs(project: Any) -> None:
    module, paths = project
    torch.manual_seed(0)
    model = module.Picked()
    res = dynscope.fix(model, torch.randn(4, 8))
    (p,) = res.patches
    assert p.site == f"{paths['helpers'].name}:7" and p.verified and p.breaks_after == 0, p.why_not
    assert model.act is module.helpers.scale, "the user's model keeps its own helper"


def test_a_decorated_function_runs_as_its_patched_copy_decorated_the_same_way(project: Any) -> None:
    module, paths = project
    res = dynscope.fix(module.sample, torch.randn(4, 8))
    (p,) = res.patches
    line = paths["model"].read_text().splitlines().index("    if x.mean() > 0:") + 1
    assert p.site == f"{paths['model'].name}:{line}" and p.verified and p.breaks_after == 0, p.why_not
    assert res.breaks_after == 0


def test_write_patches_each_file_and_leaves_the_others(project: Any) -> None:
    module, paths = project
    before = {k: p.read_bytes() for k, p in paths.items()}
    res = dynscope.fix(module.Net(), torch.randn(4, 8), write=True)
    assert sorted(res.written) == sorted([str(paths["helpers"]), str(paths["model"])]), res.note
    assert paths["layers"].read_bytes() == before["layers"]  # no break there: untouched
    for key in ("helpers", "model"):
        assert Path(str(paths[key]) + ".dynscope-backup").read_bytes() == before[key]
    assert "torch.where" in paths["helpers"].read_text()
    assert "is_compiling()" in paths["model"].read_text()


def test_a_model_holding_a_helper_class_s_object_calls_the_patched_helper_function_too(project: Any) -> None:
    # The Meter the model holds is swapped for the patched file's class, and the model's own
    # class (of another file) calls the patched file's agreeing(): both, in one copy.
    module, paths = project
    torch.manual_seed(0)
    res = dynscope.fix(module.Scored(), (torch.randn(6, 8), torch.randint(0, 3, (6,))))
    (p,) = res.patches
    line = paths["helpers"].read_text().splitlines().index("    both = pred[pred == target]") + 1
    assert p.site == f"{paths['helpers'].name}:{line}" and p.verified and p.breaks_after == 0, p.why_not
    assert "both = torch.where(pred == target, pred, -1)" in p.diff
