"""A compile id's parts are asked of one module (issue 46): dynscope._model.compile_ids."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dynscope._model.compile_ids import compile_id, compile_number, frame_of, is_recompile

PACKAGE = Path(__file__).resolve().parents[2] / "dynscope"


@pytest.mark.parametrize(("cid", "frame", "number", "again"), [
    ("0/0", "0", 0, False), ("3/1", "3", 1, True), ("12/10", "12", 10, True), ("7", "7", None, False),
    ("", "", None, False), ("2/x", "2", None, False),
])
def test_a_compile_ids_parts(cid: str, frame: str, number: int | None, again: bool) -> None:
    assert (frame_of(cid), compile_number(cid), is_recompile(cid)) == (frame, number, again)
    if number is not None:
        assert compile_id(frame, number) == cid


def test_no_module_above_the_torch_floor_splits_a_compile_id_itself() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if "_torch" in path.parts or path.name == "compile_ids.py":
            continue  # PyTorch's own "[F/C]" text is read in dynscope/_torch
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr in ("split", "partition", "rpartition", "rsplit") and node.args
                    and isinstance(node.args[0], ast.Constant) and node.args[0].value == "/"
                    and any(w in ast.unparse(node.func.value) for w in ("compile_id", "cid"))):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}")
    assert found == [], found
