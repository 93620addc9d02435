"""Does dynscope.report() give the same answer whatever ran before? A hypothesis campaign.

Each example is a small random program (an nn.Module whose forward mixes torch ops, print
breaks, ``.item()``, breaks inside loops, data-dependent branches, helper calls and
``torch._dynamo.graph_break()``) and a random history. The program is written to two files
and imported twice, so copy A and copy B have their own, fresh code objects:

- A: ``dynscope.report(model_a, calls=...)`` on fresh code: the reference answer.
- B: first the user's own ``torch.compile`` (backend "eager" or "aot_eager", dynamic None or
  False) run on a random subset and order of the calls, possibly twice, possibly with an
  earlier ``dynscope.report`` on B; then ``dynscope.report(model_b, calls=...)``.

Sometimes B's history runs before A's report. The two reports must agree on graph count,
break count, break sites, recompile count, frames (function, status) and break categories.

Run:  .venv/bin/python benchmarks/order_agreement.py --examples 300 [--seed S] [--minimise]

tests/capture/test_order_agreement.py imports the generator from this file (benchmarks/ is not a
package), so there is one copy of it.
"""

from __future__ import annotations

import argparse
import atexit
import importlib.util
import itertools
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from hypothesis import HealthCheck, Phase, given, seed, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import dynscope  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from types import ModuleType

FEATURES = 4  # every step keeps x of shape (batch, FEATURES)
N_PARAMS = 3  # lin0..lin2 and w0..w2 exist in every program; steps pick one
BATCHES = (2, 3, 4, 5)  # no 0 or 1: PyTorch specialises those sizes

# ---------------------------------------------------------------- program spec


@dataclass(frozen=True)
class Step:
    """One statement of a program: ``kind`` with its arguments and nested bodies."""

    kind: str  # linear matmul relu sin addc softmax print item loop helper branch graph_break
    arg: float = 0.0  # parameter index (linear, matmul) or the constant (addc)
    body: tuple[Step, ...] = ()  # loop body, helper body, branch "then"
    orelse: tuple[Step, ...] = ()  # branch "else"


@dataclass(frozen=True)
class Compile:
    """One of the user's own torch.compile calls on copy B, and the calls it runs."""

    backend: str  # "eager" or "aot_eager"
    dynamic: bool | None
    order: tuple[int, ...]  # indices into the program's calls, in the order run


@dataclass(frozen=True)
class Case:
    """A program, its calls and the history copy B has before its report."""

    steps: tuple[Step, ...]
    batches: tuple[int, ...]  # one call per entry: x of shape (batch, FEATURES)
    user: tuple[Compile, ...]  # the user's compiles of B, in order (may be empty)
    prior_report: str  # "none", "before" or "after" the user's compiles
    b_first: bool  # B's history runs before A's report
    seed: int = 0  # weights and inputs


OPS = ("linear", "matmul", "relu", "sin", "addc", "softmax")
BREAKS = ("print", "item", "graph_break")


def _op(draw: Callable[..., Any]) -> Step:
    kind = draw(st.sampled_from(OPS))
    if kind in ("linear", "matmul"):
        return Step(kind, float(draw(st.integers(0, N_PARAMS - 1))))
    if kind == "addc":
        return Step(kind, draw(st.sampled_from((0.5, -0.25, 1.0))))
    return Step(kind)


@st.composite
def steps_strategy(draw: Callable[..., Any], depth: int = 0, max_steps: int = 5) -> tuple[Step, ...]:
    """A list of steps; loops, helpers and branches nest up to depth 2."""
    n = draw(st.integers(1 if depth == 0 else 0, max_steps if depth == 0 else 2))
    kinds = OPS + BREAKS + (("loop", "helper", "branch") if depth < 2 else ())
    out: list[Step] = []
    for _ in range(n):
        kind = draw(st.sampled_from(kinds))
        if kind in OPS:
            out.append(_op(draw))
        elif kind in BREAKS:
            out.append(Step(kind))
        elif kind == "loop":
            # A break inside the loop body: Dynamo cannot resume there, gives up on the frame.
            body = draw(steps_strategy(depth + 1, max_steps))
            out.append(Step("loop", body=body + (Step(draw(st.sampled_from(BREAKS))),)))
        elif kind == "helper":
            out.append(Step("helper", body=draw(steps_strategy(depth + 1, max_steps))))
        else:
            then = draw(steps_strategy(depth + 1, max_steps))
            out.append(Step("branch", body=then, orelse=(_op(draw),)))
    return tuple(out)


@st.composite
def case_strategy(draw: Callable[..., Any], max_steps: int = 5, max_calls: int = 3) -> Case:
    """A program plus a random history for copy B."""
    steps = draw(steps_strategy(0, max_steps))
    batches = tuple(draw(st.lists(st.sampled_from(BATCHES), min_size=1, max_size=max_calls)))
    indices = st.integers(0, len(batches) - 1)
    user = tuple(
        draw(
            st.lists(
                st.builds(
                    Compile,
                    backend=st.sampled_from(("eager", "aot_eager")),
                    dynamic=st.sampled_from((None, False)),
                    order=st.lists(indices, min_size=1, max_size=len(batches) + 1).map(tuple),
                ),
                min_size=0, max_size=2,
            )
        )
    )
    prior = draw(st.sampled_from(("none", "before", "after")))
    if not user and prior == "none":
        prior = "before"  # B always has some history, or A and B are the same experiment
    return Case(steps, batches, user, prior, draw(st.booleans()), draw(st.integers(0, 3)))


# ---------------------------------------------------------------- source text


def render(steps: tuple[Step, ...]) -> str:
    """The program's Python source: helpers at module level, then class Program."""
    helpers: list[str] = []

    def block(body: tuple[Step, ...], indent: str) -> list[str]:
        lines: list[str] = []
        for step in body:
            lines += stmt(step, indent)
        return lines or [indent + "pass"]

    def stmt(step: Step, indent: str) -> list[str]:
        i = int(step.arg)
        simple = {
            "linear": f"x = self.lin{i}(x)",
            "matmul": f"x = x @ self.w{i}",
            "relu": "x = torch.relu(x)",
            "sin": "x = torch.sin(x)",
            "addc": f"x = x + {step.arg!r}",
            "softmax": "x = torch.softmax(x, dim=-1)",
            "print": 'print("", end="")',
            "graph_break": "torch._dynamo.graph_break()",
        }
        if step.kind in simple:
            return [indent + simple[step.kind]]
        if step.kind == "item":
            # A Python float leaves the graph and comes back through Python arithmetic.
            return [
                indent + "s = x.mean().item()",
                indent + "x = x * (1.0 / (1.0 + abs(s)))",
            ]
        if step.kind == "loop":
            return [indent + "for _ in range(2):"] + block(step.body, indent + "    ")
        if step.kind == "helper":
            name = f"helper_{len(helpers)}"
            helpers.append("")  # reserve the name before the body adds nested helpers
            index = len(helpers) - 1
            body = block(step.body, "    ")
            helpers[index] = "\n".join([f"def {name}(self, x):", *body, "    return x", ""])
            return [indent + f"x = {name}(self, x)"]
        if step.kind == "branch":
            return (
                [indent + "if x.sum() > 0:"] + block(step.body, indent + "    ")
                + [indent + "else:"] + block(step.orelse, indent + "    ")
            )
        raise ValueError(f"unknown step kind {step.kind!r}")

    forward = block(steps, "        ")
    params = [
        f"        self.lin{i} = nn.Linear({FEATURES}, {FEATURES})" for i in range(N_PARAMS)
    ] + [
        f"        self.w{i} = nn.Parameter(torch.randn({FEATURES}, {FEATURES}) * 0.5)"
        for i in range(N_PARAMS)
    ]
    return "\n".join(
        ["import torch", "from torch import nn", "", "", *[h + "\n" for h in helpers],
         "class Program(nn.Module):",
         "    def __init__(self):",
         "        super().__init__()",
         *params, "",
         "    def forward(self, x):",
         *forward,
         "        return x", ""]
    )


# ---------------------------------------------------------------- running a case

_counter = itertools.count()
_tmp: list[Path] = []  # the folder for the program files, made on first use


def _folder() -> Path:
    if not _tmp:
        _tmp.append(Path(tempfile.mkdtemp(prefix="dynscope-order-")))
        # The files stay while the process may still read their source (break sites).
        atexit.register(shutil.rmtree, _tmp[0], ignore_errors=True)
    return _tmp[0]


def load(source: str, tag: str) -> ModuleType:
    """Import ``source`` from a new file under a new module name: fresh code objects."""
    name = f"dynscope_order_{next(_counter)}_{tag}"
    path = _folder() / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # linecache and inspect find the source like a user's module
    spec.loader.exec_module(module)
    return module


def build(source: str, tag: str, weights_seed: int) -> torch.nn.Module:
    """One copy of the program, with the same weights for every copy of this case."""
    module = load(source, tag)
    torch.manual_seed(weights_seed)
    return module.Program()


def inputs(case: Case) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(1000 + case.seed)
    return [torch.randn(b, FEATURES, generator=gen) for b in case.batches]


Counts = tuple[Any, ...]


def counts(rep: Any) -> Counts:
    """What must not depend on history."""
    cats: dict[str, int] = {}
    for b in rep.breaks:
        cats[b.category] = cats.get(b.category, 0) + b.count
    return (
        rep.graph_count,
        rep.break_count,
        len(rep.breaks),
        rep.recompile_count,
        tuple((f.function, f.status) for f in rep.frames),
        tuple(sorted(cats.items())),
    )


def run_case(case: Case) -> tuple[Counts, Counts, str]:
    """(counts of A fresh, counts of B after its history, the source)."""
    source = render(case.steps)
    model_a = build(source, "a", case.seed)
    model_b = build(source, "b", case.seed)
    xs = inputs(case)

    def history_b() -> None:
        if case.prior_report == "before":
            dynscope.report(model_b, calls=xs)
        for user in case.user:
            compiled = torch.compile(model_b, backend=user.backend, dynamic=user.dynamic)
            for i in user.order:
                compiled(xs[i])
        if case.prior_report == "after":
            dynscope.report(model_b, calls=xs)

    try:
        if case.b_first:
            history_b()
        rep_a = dynscope.report(model_a, calls=xs)
        if not case.b_first:
            history_b()
        rep_b = dynscope.report(model_b, calls=xs)
    finally:
        # Let both copies (and their compiled code) go: hundreds of cases run in one process.
        for model in (model_a, model_b):
            sys.modules.pop(type(model).__module__, None)
    return counts(rep_a), counts(rep_b), source


def describe(case: Case) -> str:
    """The history of B in words, for a disagreement's printout."""
    users = "; ".join(
        f"torch.compile(backend={u.backend!r}, dynamic={u.dynamic}) on calls {list(u.order)}"
        for u in case.user
    ) or "no user compile"
    return (
        f"batches={list(case.batches)} seed={case.seed} b_first={case.b_first} "
        f"prior_report={case.prior_report}; {users}"
    )


# ---------------------------------------------------------------- minimising


def _smaller_steps(steps: tuple[Step, ...]) -> Iterator[tuple[Step, ...]]:
    """Each candidate drops one step or replaces a compound step by its body."""
    for i, step in enumerate(steps):
        yield steps[:i] + steps[i + 1:]
        if step.body or step.orelse:
            body = tuple(s for s in step.body if not (step.kind == "loop" and s is step.body[-1]))
            yield steps[:i] + body + steps[i + 1:]
            for smaller in _smaller_steps(step.body):
                if step.kind == "loop" and (not smaller or smaller[-1].kind not in BREAKS):
                    continue  # a loop keeps its break: that is what makes it a loop case
                yield steps[:i] + (replace(step, body=smaller),) + steps[i + 1:]
        if step.kind != "print" and step.kind in BREAKS:
            yield steps[:i] + (Step("print"),) + steps[i + 1:]
        if step.kind in OPS and step.kind != "relu":
            yield steps[:i] + (Step("relu"),) + steps[i + 1:]


def _smaller_cases(case: Case) -> Iterator[Case]:
    for steps in _smaller_steps(case.steps):
        if steps:
            yield replace(case, steps=steps)
    if case.prior_report != "none" and case.user:
        yield replace(case, prior_report="none")
    for i in range(len(case.user)):
        rest = case.user[:i] + case.user[i + 1:]
        if rest or case.prior_report != "none":
            yield replace(case, user=rest)
        user = case.user[i]
        for j in range(len(user.order)):
            if len(user.order) > 1:
                order = user.order[:j] + user.order[j + 1:]
                yield replace(case, user=case.user[:i] + (replace(user, order=order),) + case.user[i + 1:])
        if user.backend != "eager":
            yield replace(case, user=case.user[:i] + (replace(user, backend="eager"),) + case.user[i + 1:])
        if user.dynamic is not None:
            yield replace(case, user=case.user[:i] + (replace(user, dynamic=None),) + case.user[i + 1:])
    if case.b_first:
        yield replace(case, b_first=False)
    if len(case.batches) > 1:
        # Drop the last call; indices past the end are dropped from the user's orders too.
        n = len(case.batches) - 1
        user = tuple(replace(u, order=tuple(i for i in u.order if i < n)) for u in case.user)
        if all(u.order for u in user):
            yield replace(case, batches=case.batches[:n], user=user)


def disagrees(case: Case) -> bool:
    try:
        a, b, _ = run_case(case)
    except Exception:  # noqa: BLE001 - a candidate that crashes is not the same failure
        return False
    return a != b


def minimise(case: Case, budget_s: float = 900.0) -> Case:
    """Greedy: take the first smaller case that still disagrees, until none does."""
    start = time.perf_counter()
    improved = True
    while improved and time.perf_counter() - start < budget_s:
        improved = False
        for smaller in _smaller_cases(case):
            if disagrees(smaller) and disagrees(smaller):  # twice: no flaky shrinks
                case, improved = smaller, True
                break
    return case


# ---------------------------------------------------------------- the campaign


@dataclass
class Tally:
    """What the campaign saw."""

    programs: int = 0
    agreements: int = 0
    disagreements: list[tuple[Case, str, Counts, Counts]] = field(default_factory=list)
    errors: list[tuple[Case, str]] = field(default_factory=list)
    # How many programs (by the fresh report) reached the cases history used to change.
    with_breaks: int = 0
    with_failed_frame: int = 0  # a frame Dynamo gave up on (a break in a loop): marked skip
    with_recompiles: int = 0
    b_first: int = 0
    with_user_compile: int = 0
    with_prior_report: int = 0


def campaign(examples: int, seed_value: int | None, max_steps: int = 5) -> Tally:
    """Run ``examples`` generated cases; never stop early, never shrink."""
    tally = Tally()
    config = settings(
        max_examples=examples,
        deadline=None,
        derandomize=seed_value is None,
        database=None,
        phases=(Phase.generate,),
        suppress_health_check=list(HealthCheck),
    )

    @config
    @given(case_strategy(max_steps=max_steps))
    def one(case: Case) -> None:
        tally.programs += 1
        try:
            a, b, source = run_case(case)
        except Exception as err:  # noqa: BLE001 - counted and shown, the campaign goes on
            tally.errors.append((case, f"{type(err).__name__}: {err}"))
            return
        tally.with_breaks += a[1] > 0
        tally.with_failed_frame += any(status == "failed" for _, status in a[4])
        tally.with_recompiles += a[3] > 0
        tally.b_first += case.b_first
        tally.with_user_compile += bool(case.user)
        tally.with_prior_report += case.prior_report != "none"
        if a == b:
            tally.agreements += 1
        else:
            tally.disagreements.append((case, source, a, b))
        if tally.programs % 25 == 0:
            print(
                f"  {tally.programs} programs, {len(tally.disagreements)} disagreements, "
                f"{len(tally.errors)} errors",
                flush=True,
            )

    if seed_value is not None:
        one = seed(seed_value)(one)
    one()
    return tally


FIELDS = "(graphs, breaks, sites, recompiles, frames, categories)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=300, help="programs to generate (default 300)")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: derandomized)")
    parser.add_argument("--max-steps", type=int, default=5, help="top-level steps per program (default 5)")
    parser.add_argument("--minimise", action="store_true", help="shrink the first disagreement")
    args = parser.parse_args()

    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(1))  # PyTorch's first-compile setup
    start = time.perf_counter()
    tally = campaign(args.examples, args.seed, args.max_steps)
    elapsed = time.perf_counter() - start
    print(f"\n{tally.programs} programs in {elapsed:.0f} s")
    print(f"agreements:    {tally.agreements}")
    print(f"disagreements: {len(tally.disagreements)}")
    print(f"errors:        {len(tally.errors)}")
    print(
        f"programs with breaks {tally.with_breaks}, with a skipped (failed) frame "
        f"{tally.with_failed_frame}, with recompiles {tally.with_recompiles}; histories with a "
        f"user compile {tally.with_user_compile}, with an earlier report {tally.with_prior_report}, "
        f"run before A's report {tally.b_first}"
    )
    for case, message in tally.errors[:5]:
        print(f"\n--- error: {describe(case)}\n{render(case.steps)}{message}")
    for case, source, a, b in tally.disagreements[:5]:
        print(f"\n--- disagreement: {describe(case)}\n{source}")
        print(f"A fresh     {FIELDS}: {a}")
        print(f"B after run {FIELDS}: {b}")
    if args.minimise and tally.disagreements:
        small = minimise(tally.disagreements[0][0])
        a, b, source = run_case(small)
        print(f"\n=== minimised: {describe(small)}\n{source}")
        print(f"A fresh     {FIELDS}: {a}")
        print(f"B after run {FIELDS}: {b}")


if __name__ == "__main__":
    main()
