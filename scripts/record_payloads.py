"""Record raw structured-trace records that torch.compile emits for a few small programs.

Standalone (torch only, no dynscope import) so it runs under any torch release's venv:

    python scripts/record_payloads.py /tmp/payloads-2.14.jsonl

Each line of the output is a JSON object
``{"program": name, "torch": version, "metadata": ..., "payload": ...}`` for one record of
the ``torch.__trace`` logger (``torch._logging._internal.trace_log``), in emission order.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sys
import traceback
from typing import TYPE_CHECKING, Any

import torch
import torch._dynamo
from torch._logging._internal import trace_log

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


class _Collect(logging.Handler):
    """Keep every trace record it is handed."""

    def __init__(self) -> None:
        super().__init__(level=logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


# --- programs ---------------------------------------------------------------------------


def prog_loop_break() -> None:
    """(a) A break inside a for loop: Dynamo cannot resume, the frame is skipped."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        for _ in range(2):
            print("x")
        return y.cos()

    torch.compile(f, backend="eager")(torch.randn(4))


def _gen(x: torch.Tensor) -> Iterator[torch.Tensor]:
    for i in range(3):
        yield x * i


def prog_generator_sum() -> None:
    """(b1) sum() over a generator of tensors."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return sum(_gen(x)) + 1  # type: ignore[return-value]

    torch.compile(f, backend="eager")(torch.randn(4))


def _gen_print(x: torch.Tensor) -> Iterator[torch.Tensor]:
    for i in range(3):
        print("gen", i)
        yield x * i


def prog_generator_print() -> None:
    """(b2) A generator that breaks inside itself (print), consumed by list()."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        out = list(_gen_print(y))
        return out[0] + out[2]

    torch.compile(f, backend="eager")(torch.randn(4))


def prog_generator_loop_break() -> None:
    """(b3) A for loop over a generator whose body breaks (print)."""

    def f(x: torch.Tensor) -> torch.Tensor:
        acc = x.sin()
        for t in _gen(x):
            print("t")
            acc = acc + t
        return acc

    torch.compile(f, backend="eager")(torch.randn(4))


def prog_item() -> None:
    """(c) .item() used in Python arithmetic."""

    def f(x: torch.Tensor) -> torch.Tensor:
        s = x.sum().item()
        k = s * 2 + 1
        return x * k

    torch.compile(f, backend="eager")(torch.randn(4))


def prog_kwargs_recompile() -> None:
    """(d) A recompile when called through **kwargs with a new shape."""

    def f(**kw: torch.Tensor) -> torch.Tensor:
        return kw["x"].sin() + 1

    g = torch.compile(f, backend="eager", dynamic=False)
    g(**{"x": torch.randn(2, 4)})
    g(**{"x": torch.randn(2, 6)})


def prog_recompile_limit() -> None:
    """(e) recompile_limit=2 and 5 different sizes."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.sin() * 2

    g = torch.compile(f, backend="eager", dynamic=False)
    with torch._dynamo.config.patch(recompile_limit=2):
        for n in range(3, 8):
            g(torch.randn(n))


def prog_backward() -> None:
    """(f) loss.backward() inside the compiled function."""
    w = torch.randn(4, requires_grad=True)

    def f(x: torch.Tensor) -> torch.Tensor:
        loss = (x * w).sum()
        loss.backward()
        return loss.detach()

    torch.compile(f, backend="eager")(torch.randn(4))


def prog_print_break() -> None:
    """(g) A plain print between two ops."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        print("between")
        return y.cos()

    torch.compile(f, backend="eager")(torch.randn(4))


def _helper_loop(x: torch.Tensor) -> torch.Tensor:
    for _ in range(2):
        print("h")
    return x + 1


def prog_inlined_loop_break() -> None:
    """(h, extra) A loop break inside an inlined helper: logged once per frame."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return _helper_loop(x.sin()).cos()

    torch.compile(f, backend="eager")(torch.randn(4))


@contextlib.contextmanager
def _user_cm() -> Iterator[None]:
    yield


def prog_user_context_manager() -> None:
    """(i, extra) A break under a user-defined context manager."""

    def f(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        with _user_cm():
            print("cm")
            y = y + 1
        return y.cos()

    torch.compile(f, backend="eager")(torch.randn(4))


def _helper_print(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    print("hp")
    return y + 1


def prog_nested_print() -> None:
    """(j, extra) A print inside an inlined helper: the parent and the helper both break."""

    def f(x: torch.Tensor) -> torch.Tensor:
        return _helper_print(x.sin()).cos()

    torch.compile(f, backend="eager")(torch.randn(4))


PROGRAMS: dict[str, Callable[[], None]] = {
    "a_loop_break": prog_loop_break,
    "b1_generator_sum": prog_generator_sum,
    "b2_generator_print": prog_generator_print,
    "b3_generator_loop_break": prog_generator_loop_break,
    "c_item": prog_item,
    "d_kwargs_recompile": prog_kwargs_recompile,
    "e_recompile_limit": prog_recompile_limit,
    "f_backward": prog_backward,
    "g_print_break": prog_print_break,
    "h_inlined_loop_break": prog_inlined_loop_break,
    "i_user_context_manager": prog_user_context_manager,
    "j_nested_print": prog_nested_print,
}


def json_safe(obj: Any) -> Any:
    """Round-trip through JSON so that odd values become strings."""
    return json.loads(json.dumps(obj, default=str))


@contextlib.contextmanager
def collecting() -> Iterator[_Collect]:
    """Collect every ``torch.__trace`` record in the block; put the logger back afterwards.

    Also used by scripts/record_corpus.py.
    """
    saved = (trace_log.level, trace_log.propagate)
    handler = _Collect()
    trace_log.setLevel(logging.DEBUG)
    trace_log.propagate = False
    trace_log.addHandler(handler)
    try:
        yield handler
    finally:
        trace_log.removeHandler(handler)
        trace_log.setLevel(saved[0])
        trace_log.propagate = saved[1]
        torch._dynamo.reset()


def main(argv: list[str]) -> int:
    """Run every program with a collecting handler and write the records as JSON lines."""
    if len(argv) != 2:
        print("usage: record_payloads.py OUTPUT.jsonl", file=sys.stderr)
        return 2
    out_path = argv[1]
    with collecting() as handler, open(out_path, "w") as out:
        for name, prog in PROGRAMS.items():
            torch._dynamo.reset()
            handler.records.clear()
            error = None
            try:
                prog()
            except Exception:  # noqa: BLE001 - record and keep going: other programs still matter
                error = traceback.format_exc()
            for rec in handler.records:
                line = {
                    "program": name,
                    "torch": torch.__version__,
                    "metadata": json_safe(getattr(rec, "metadata", None)),
                    "payload": getattr(rec, "payload", None),
                }
                out.write(json.dumps(line, default=str) + "\n")
            if error is not None:
                out.write(json.dumps({"program": name, "error": error}) + "\n")
            print(f"{name}: {len(handler.records)} records" + (" (ERROR)" if error else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
