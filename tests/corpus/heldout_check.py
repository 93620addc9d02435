"""Check a held-out set's BREAK marks against PyTorch alone (no dynscope): the checker each
set's ``check.py`` runs on its own package (tests/corpus/fix_heldout, fix_heldout2, ...).

1. Marks.  For every program: run it eagerly and under ``torch.compile(backend="eager")``
   (outputs must match), collect the graph breaks Dynamo logs (the ``graph_breaks`` artifact:
   one record per break with its user traceback), and check that every break whose site is in
   this package is on a ``# BREAK`` line, and that every ``# BREAK`` line breaks in some program.
2. Rewrites.  For every program with fixable sites: apply ``reference_rewrites.REWRITES`` to
   a copy of the package, compile the patched program, and check that its outputs and its
   parameters' gradients (of the sum of its floating outputs) equal the original eager run's,
   and that the user-code breaks left are all ``# BREAK must-not`` lines.

A break's site is the innermost frame of its traceback in this package's files when the
innermost frame overall is ours or the standard library's (``copy.deepcopy`` breaks inside
copy.py: the site is the user's call); a break whose innermost frame is inside torch
(``torch.optim``'s step) is PyTorch's own and only listed.

    .venv/bin/python -m tests.corpus.fix_heldout.check [--marks-only]   (fix_heldout2, fix_heldout3...)
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
import math
import os
import re
import sys
import tempfile
import time
import tokenize
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch._dynamo

TORCH_DIR = str(Path(torch.__file__).resolve().parent)
MARK = re.compile(r"#\s*BREAK(\s+must-not)?:\s*(.*)$")  # matched against comment tokens only
FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
NOT_PROGRAMS = {"check.py", "reference_rewrites.py"}


@dataclass(frozen=True)
class HeldOutSet:
    """One held-out set: its package folder, its programs, its reference rewrites, its name."""

    here: Path  # the package's folder
    programs: dict[str, Any]  # name -> builder
    rewrites: dict[str, list[tuple[str, str, str]]]  # name -> (file, old, new) per fixable program
    name: str  # the package's name ("fix_heldout2"), for its patched copies' names

    @classmethod
    def of(cls, check_file: str, programs: dict[str, Any],
           rewrites: dict[str, list[tuple[str, str, str]]]) -> HeldOutSet:
        """The set whose ``check.py`` is ``check_file``."""
        here = Path(check_file).resolve().parent
        return cls(here, programs, rewrites, here.name)


def package_marks(held: HeldOutSet) -> dict[tuple[str, int], tuple[str, str]]:
    """(file, line) -> ("fixable" | "must-not", the comment's words)."""
    marks = {}
    for path in sorted(held.here.glob("*.py")):
        if path.name in NOT_PROGRAMS or path.name.startswith("."):  # a tool's hidden copy beside a file
            continue
        with path.open("rb") as fh:
            for tok in tokenize.tokenize(fh.readline):
                m = MARK.match(tok.string) if tok.type == tokenize.COMMENT else None
                if m:
                    marks[(path.name, tok.start[0])] = ("must-not" if m.group(1) else "fixable", m.group(2).strip())
    return marks


class _Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


_COLLECT = _Collect()


def _install_collector() -> None:
    torch._logging.set_logs(graph_breaks=True)
    gb_log = logging.getLogger("torch._dynamo.symbolic_convert.__graph_breaks")
    gb_log.handlers.clear()
    gb_log.addHandler(_COLLECT)
    gb_log.propagate = False
    gb_log.setLevel(logging.DEBUG)


def _reason(lines: list[str]) -> str:
    for i, line in enumerate(lines):
        if line.startswith("Graph Break Reason:"):
            first = line.removeprefix("Graph Break Reason:").strip()
            in_loop = "Failed to handle graph break" in first
            if "Encountered graph break when attempting" not in first and not in_loop:
                return first
            inner = next((x.strip() for x in lines[i + 1 :] if x.strip()), first)
            return inner + (" (in a loop: frame skipped)" if in_loop else "")
    return "?"


def parse_break(message: str, pkg_dir: Path) -> dict[str, Any] | None:
    lines = message.splitlines()
    if not lines or not lines[0].startswith("Graph break in user code at"):
        return None
    tb = message.split("User code traceback:", 1)[-1]
    frames = [(os.path.realpath(f), int(n), fn) for f, n, fn in FRAME.findall(tb)]
    if not frames:
        file, line = lines[0].removeprefix("Graph break in user code at ").rsplit(":", 1)
        frames = [(os.path.realpath(file), int(line), "?")]

    def ours(path: str) -> bool:
        return Path(path).parent == pkg_dir and Path(path).name not in NOT_PROGRAMS

    in_pkg = [fr for fr in frames if ours(fr[0])]
    innermost = frames[-1][0]
    if ours(innermost):
        owner = "user"
    elif innermost.startswith(TORCH_DIR):
        owner = "torch"
    else:
        owner = "user" if in_pkg else "other"
    site = in_pkg[-1] if in_pkg else frames[-1]
    return {"owner": owner, "file": Path(site[0]).name if in_pkg else site[0], "line": site[1],
            "inner": f"{Path(frames[-1][0]).name}:{frames[-1][1]}", "reason": _reason(lines)}


def same(a: Any, b: Any, path: str = "out") -> str | None:
    """None when a and b are equal in structure and value (floats within tolerance), else where not."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: {type(a).__name__} vs {type(b).__name__}"
        if a.dtype != b.dtype or a.shape != b.shape:
            return f"{path}: {a.dtype}{tuple(a.shape)} vs {b.dtype}{tuple(b.shape)}"
        if a.is_floating_point():
            ok = torch.allclose(a.detach(), b.detach(), rtol=1e-4, atol=1e-5, equal_nan=True)
        else:
            ok = torch.equal(a, b)
        return None if ok else f"{path}: values differ"
    if isinstance(a, np.ndarray | np.generic) or isinstance(b, np.ndarray | np.generic):
        ok = np.allclose(np.asarray(a), np.asarray(b), rtol=1e-4, atol=1e-5, equal_nan=True)
        return None if ok else f"{path}: arrays differ"
    if type(a) is not type(b):
        return f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, dict):
        if a.keys() != b.keys():
            return f"{path}: keys differ"
        return next((e for k in a if (e := same(a[k], b[k], f"{path}[{k!r}]"))), None)
    if isinstance(a, list | tuple):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        return next((e for i, (x, y) in enumerate(zip(a, b, strict=True)) if (e := same(x, y, f"{path}[{i}]"))), None)
    if isinstance(a, float):
        close = (math.isnan(a) and math.isnan(b)) or math.isclose(a, b, rel_tol=1e-4, abs_tol=1e-5)
        return None if close else f"{path}: {a} vs {b}"
    return None if a == b else f"{path}: {a!r} vs {b!r}"


def call(fn: Any, inputs: Any) -> Any:
    torch.manual_seed(1234)
    if isinstance(inputs, dict):
        return fn(**inputs)
    if isinstance(inputs, tuple):
        return fn(*inputs)
    return fn(inputs)


def param_grads(model: Any, out: Any) -> dict[str, torch.Tensor]:
    """Backward the sum of the floating outputs that require grad; the parameters' gradients."""
    flat: list[torch.Tensor] = []

    def walk(o: Any) -> None:
        if isinstance(o, torch.Tensor) and o.is_floating_point() and o.requires_grad:
            flat.append(o)
        elif isinstance(o, list | tuple):
            for x in o:
                walk(x)
        elif isinstance(o, dict):
            for x in o.values():
                walk(x)

    walk(out)
    if not flat or not isinstance(model, torch.nn.Module):
        return {}
    sum(f.sum() for f in flat).backward()
    return {n: p.grad for n, p in model.named_parameters() if p.grad is not None}


def compiled_run(build: Any, pkg_dir: Path, grads: bool = False) -> tuple[Any, dict, dict]:
    """Run build()'s program under torch.compile; its output, its parameters' grads, its break sites."""
    torch._dynamo.reset()
    torch._dynamo.utils.reset_graph_break_dup_checker()
    _COLLECT.messages.clear()
    with contextlib.redirect_stdout(io.StringIO()):
        model, inputs = build()
        out = call(torch.compile(model, backend="eager"), inputs)
        g = param_grads(model, out) if grads else {}
    sites: dict[tuple[str, int], dict[str, Any]] = {}
    for message in _COLLECT.messages:
        br = parse_break(message, pkg_dir)
        if br is not None:
            sites.setdefault((br["file"], br["line"]), br)
    return out, g, sites


def eager_run(build: Any, grads: bool = False) -> tuple[Any, dict, float]:
    with contextlib.redirect_stdout(io.StringIO()):
        model, inputs = build()
        t0 = time.perf_counter()
        out = call(model, inputs)
        seconds = time.perf_counter() - t0
        g = param_grads(model, out) if grads else {}
    return out, g, seconds


def check_marks(held: HeldOutSet, marks: dict[tuple[str, int], tuple[str, str]],
                problems: list[str]) -> dict[str, set[str]]:
    """The table of break sites; returns each program's mark kinds."""
    seen: set[tuple[str, int]] = set()
    kinds_by_program: dict[str, set[str]] = {}
    rows = []
    for name, build in held.programs.items():
        expected, _, eager_s = eager_run(build)
        got, _, sites = compiled_run(build, held.here)
        if (err := same(expected, got)) is not None:
            problems.append(f"{name}: compiled output differs from eager ({err})")
        if eager_s > 2.0:  # each runs in well under a second; 2 s leaves room for a loaded machine
            problems.append(f"{name}: eager run took {eager_s:.2f}s")
        user = 0
        for (file, line), br in sorted(sites.items()):
            if br["owner"] != "user":
                rows.append((name, br["inner"], "(torch's own)", br["reason"]))
                continue
            user += 1
            kind = marks.get((file, line), ("UNMARKED", ""))[0]
            if kind == "UNMARKED":
                problems.append(f"{name}: break at {file}:{line} is not marked ({br['reason']})")
            seen.add((file, line))
            kinds_by_program.setdefault(name, set()).add(kind)
            rows.append((name, f"{file}:{line}", kind, br["reason"]))
        if not 1 <= user <= 4:
            problems.append(f"{name}: {user} user-code break sites (want 1-4)")
    for key in sorted(set(marks) - seen):
        problems.append(f"{key[0]}:{key[1]} is marked {marks[key][0]} but no program breaks there")

    widths = [max(len(str(r[i])) for r in rows) for i in range(3)]
    print(f"{'program':<{widths[0]}}  {'site':<{widths[1]}}  {'mark':<{widths[2]}}  PyTorch's reason")
    for r in rows:
        print(f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3][:90]}")
    return kinds_by_program


def _code(line: str) -> str:
    return re.sub(r"\s*#.*$", "", line).strip()


def check_rewrites(held: HeldOutSet, marks: dict[tuple[str, int], tuple[str, str]],
                   kinds_by_program: dict[str, set[str]], problems: list[str]) -> None:
    here = held.here
    must_not_code = {_code((here / f).read_text().splitlines()[n - 1]) for (f, n), (k, _) in marks.items() if k == "must-not"}
    print("\nreference rewrites (patched program compiled vs the original in eager):")
    with tempfile.TemporaryDirectory(prefix=f"{held.name}_rw_") as tmp:
        for k, (name, rewrites) in enumerate(held.rewrites.items()):
            pkg = f"{held.name}_rw{k}"
            dst = Path(tmp) / pkg
            dst.mkdir()
            for f in (p for p in here.glob("*.py") if not p.name.startswith(".")):
                (dst / f.name).write_text(re.sub(r"[ \t]*# BREAK.*$", "", f.read_text(), flags=re.M))
            for file, old, new in rewrites:
                text = (dst / file).read_text()
                if text.count(old) != 1:
                    problems.append(f"{name}: rewrite of {file} not found once: {old.strip()[:50]!r}")
                (dst / file).write_text(text.replace(old, new, 1))
            sys.path.insert(0, tmp)
            try:
                patched = importlib.import_module(pkg).PROGRAMS[name]
            finally:
                sys.path.remove(tmp)
            expected, g_eager, _ = eager_run(held.programs[name], grads=True)
            got, g_patched, sites = compiled_run(patched, dst.resolve(), grads=True)
            err = same(expected, got)
            gerr = same(g_eager, g_patched, "grads")
            left = []
            for (file, line), br in sorted(sites.items()):
                if br["owner"] != "user":
                    continue
                code = _code((dst / file).read_text().splitlines()[line - 1])
                left.append(f"{file}:{line}")
                if code not in must_not_code:
                    problems.append(f"{name}: after its rewrites a break is left at {file}:{line} `{code}` ({br['reason']})")
            if err is not None:
                problems.append(f"{name}: patched outputs differ ({err})")
            if gerr is not None:
                problems.append(f"{name}: patched gradients differ ({gerr})")
            print(f"  {name:<22} {len(rewrites)} rewrite(s)  outputs {'equal' if err is None else 'DIFFER'}  "
                  f"gradients {'equal' if gerr is None else 'DIFFER'} ({len(g_eager)} params)  "
                  f"breaks left (must-not): {', '.join(left) or 'none'}")
    for name, kinds in kinds_by_program.items():
        if "fixable" in kinds and name not in held.rewrites:
            problems.append(f"{name}: fixable sites but no reference rewrite")
        elif "fixable" not in kinds:
            print(f"  {name:<22} no fixable site, no rewrite")


def main(held: HeldOutSet) -> int:
    """Check the set's marks (and, unless ``--marks-only``, its reference rewrites); 0 when OK."""
    _install_collector()
    started = time.perf_counter()
    marks = package_marks(held)
    problems: list[str] = []
    kinds_by_program = check_marks(held, marks, problems)
    if "--marks-only" not in sys.argv:
        check_rewrites(held, marks, kinds_by_program, problems)
    fixable = sum(1 for k in marks.values() if k[0] == "fixable")
    print(f"\n{len(held.programs)} programs, {len(marks)} marked sites ({fixable} fixable, {len(marks) - fixable} must-not), "
          f"{time.perf_counter() - started:.1f}s")
    for p in problems:
        print("PROBLEM:", p)
    print("OK" if not problems else f"{len(problems)} problem(s)")
    return 1 if problems else 0

