"""What raised, in one line: the one error format every trial and timing failure is shown in."""

from __future__ import annotations

from dynscope._errors import CaptureError
from dynscope._format import clip

#: Longest error text kept (Inductor errors can run to pages).
MAX_CHARS = 300


def what_raised(err: BaseException) -> str:
    """"Type: message" of what raised, its first two lines, clipped to ``MAX_CHARS``.

    For a CaptureError, of the model's own exception (its cause): the CaptureError only says
    that the model raised.
    """
    cause = err.__cause__ if isinstance(err, CaptureError) and err.__cause__ is not None else err
    lines = [line.strip() for line in str(cause).strip().splitlines() if line.strip()]
    return clip(f"{type(cause).__name__}: " + " ".join(lines[:2]), MAX_CHARS)
