"""What raised, in one line: the one error format every trial and timing failure is shown in;
and where in the user's code it was raised (``dynscope.raised_at``)."""

from __future__ import annotations

import traceback

from dynscope._errors import CaptureError
from dynscope._format import clip
from dynscope._lexicon.wording import base_function
from dynscope._torch.registry import is_user_file

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


def _user_frame(err: BaseException) -> traceback.FrameSummary | None:
    """The innermost frame of ``err``'s traceback in the user's code (see raised_at), or None."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if is_user_file(f.filename)]
    return frames[-1] if frames else None


def raised_function(err: BaseException) -> str:
    """The user's function ``err`` was raised in (its base name, after a graph break's resume
    function), or "" when no frame of the user's is in its traceback."""
    f = _user_frame(err)
    return base_function(f.name) if f is not None else ""


def raised_at(err: BaseException) -> str:
    """Where in your code ``err`` was raised: ``at file:line in function :: code`` for the
    innermost frame of its traceback outside torch, dynscope and the Python standard
    library (third-party packages count as yours), or "" when no frame is.

    For a :class:`dynscope.CaptureError`, pass its cause (``err.__cause__``): the model's
    own exception. Torch-free: which files are torch's is found without importing it.

    Example:
        >>> try:
        ...     dynscope.report(model, x)
        ... except dynscope.CaptureError as err:
        ...     print(dynscope.raised_at(err.__cause__))
        at models.py:12 in forward :: return x.item() > 0
    """
    f = _user_frame(err)
    if f is None:
        return ""
    code = f" :: {f.line.strip()}" if f.line else ""
    # After a graph break the rest of a function runs in Dynamo's resume function
    # ("torch_dynamo_resume_in_forward_at_25"): the user's function is its base.
    return f"at {f.filename}:{f.lineno} in {base_function(f.name)}{code}"
