"""A compile's id, ``"F/C"``: frame F's C-th compile (0 the first, a recompile above it), as
the model keeps it (PyTorch's ``[F/C]`` without its brackets). The one place that knows the
layout: code that needs the frame or the number asks here instead of splitting the text."""

from __future__ import annotations

__all__ = ["compile_id", "compile_number", "frame_of", "is_recompile"]


def frame_of(cid: str) -> str:
    """The frame's part of a compile id: ``"3"`` of ``"3/1"`` (the whole id when it has no ``/``)."""
    return cid.partition("/")[0]


def compile_number(cid: str) -> int | None:
    """Which compile of its frame: ``1`` of ``"3/1"``; None when the id says none."""
    _, sep, number = cid.rpartition("/")
    return int(number) if sep and number.isdigit() else None


def is_recompile(cid: str) -> bool:
    """True for a later compile of its frame (``"F/C"`` with C > 0)."""
    number = compile_number(cid)
    return number is not None and number > 0


def compile_id(frame: str | int, number: int) -> str:
    """The id of compile ``number`` of ``frame``: ``compile_id(3, 1) == "3/1"``."""
    return f"{frame}/{number}"
