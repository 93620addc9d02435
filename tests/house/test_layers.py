"""Where knowledge of PyTorch lives: private torch names only inside dynscope/_torch/."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "dynscope"


def _private_torch_uses(path: Path) -> list[str]:
    """`import torch._x`, `from torch._x import ...` and `torch._x` attribute chains."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("torch._"):
            found.append(f"{path.name}:{node.lineno} from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and node.module == "torch":
            found += [f"{path.name}:{node.lineno} from torch import {a.name}" for a in node.names if a.name.startswith("_")]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value.startswith("torch._"):
            found.append(f"{path.name}:{node.lineno} {node.value!r} (import_module / getattr by name)")
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and isinstance(node.args[0], ast.Name)
            and node.args[0].id == "torch"
            and isinstance(node.args[1], ast.Constant)
            and str(node.args[1].value).startswith("_")
        ):
            found.append(f"{path.name}:{node.lineno} getattr(torch, {node.args[1].value!r})")
        elif isinstance(node, ast.Import):
            found += [f"{path.name}:{node.lineno} import {a.name}" for a in node.names if a.name.startswith("torch._")]
        elif isinstance(node, ast.Attribute):
            chain = []
            inner: ast.expr = node
            while isinstance(inner, ast.Attribute):
                chain.append(inner.attr)
                inner = inner.value
            first = chain[-1] if chain else ""
            private = first.startswith("_") and not first.endswith("__")  # torch.__version__ is public
            if isinstance(inner, ast.Name) and inner.id == "torch" and private:
                found.append(f"{path.name}:{node.lineno} torch.{'.'.join(reversed(chain))}")
    return found


def test_private_torch_only_inside_the_torch_package() -> None:
    # Every floor (_capture, _model, _render and their subpackages) and the front ends. The
    # lexicon is words matched against PyTorch's messages ("torch._dynamo.graph_break()" is a
    # phrase there, not a name it uses): the next test holds it to importing nothing at all.
    outside = [p for p in PACKAGE.rglob("*.py") if not {"_torch", "_lexicon"} & set(p.relative_to(PACKAGE).parts)]
    assert any(p.parent.name == "_capture" for p in outside), "dynscope's modules were not found"
    uses = [use for p in outside for use in _private_torch_uses(p)]
    assert uses == [], "private torch API outside dynscope/_torch/: " + "; ".join(uses)


def test_the_lexicon_imports_nothing_and_calls_nothing_by_name() -> None:
    """The lexicon's rules are plain text: no import but the standard library's, and no
    import_module or getattr through which a torch name could be reached."""
    modules = sorted((PACKAGE / "_lexicon").glob("*.py"))
    assert {p.name for p in modules} >= {"wording.py", "break_categories.py"}
    for path in modules:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {a.name.split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
        imported |= {(n.module or "").split(".")[0] for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        assert imported <= {"__future__", "re", "typing", "dataclasses", "collections"}, (path.name, imported)
        calls = {n.func.id for n in ast.walk(tree) if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
        assert not calls & {"getattr", "__import__", "eval", "exec"}, (path.name, calls)


def test_the_check_sees_private_uses(tmp_path: Path) -> None:
    inside = [use for p in (PACKAGE / "_torch").glob("*.py") for use in _private_torch_uses(p)]
    assert any("torch._dynamo" in use for use in inside)
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text(
        "import importlib\nimport torch\nfrom torch import _dynamo\n"
        "a = getattr(torch, '_inductor')\nb = importlib.import_module('torch._guards')\n"
        "c = torch._C\nd = torch.__version__\n",
        encoding="utf-8",
    )
    found = _private_torch_uses(sneaky)
    assert len(found) == 4, found  # from-import, getattr, import_module by name, torch._C
