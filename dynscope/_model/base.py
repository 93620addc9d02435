"""What every model module shares: the holder for live objects beside the model, and the
one-line repr (a model object's repr is one short line; the data is in its fields)."""

from __future__ import annotations

from dataclasses import field
from typing import Any

from dynscope._format import clip

__all__ = ["REPR_MAX", "_Live", "_brief", "_live_field"]


class _Live:
    """Holds a live object beside the model: never serialised, never compared."""

    __slots__ = ("value",)

    def __init__(self, value: object = None) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Live)

    def __hash__(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "<live>" if self.value is not None else "<none>"


def _live_field() -> Any:
    return field(default_factory=_Live, compare=False, repr=False, metadata={"live": True})


#: Longest repr of a model object. A notebook cell, a debugger or a log line shows one
#: short line; the data itself is in the fields, ``summary()``, ``to_html()`` and ``to_json()``.
REPR_MAX = 200


def _brief(kind: str, text: str) -> str:
    """``<Kind text>``: a model object's repr, on one line of at most ``REPR_MAX`` characters
    (``text`` comes partly from user code and PyTorch: newlines folded, length clipped)."""
    return f"<{kind} {clip(' '.join(text.split()), REPR_MAX - len(kind) - 3)}>"
