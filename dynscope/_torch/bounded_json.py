"""JSON read with its nesting bounded: a damaged or hostile log must not make the reader
recurse to the bottom of the stack.

A leaf: the record registry (:mod:`.records`) and the cache-key reader (:mod:`.cache_keys`,
which the registry imports) both read payloads with it.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

__all__ = ["MAX_JSON_DEPTH", "json_too_deep", "load_json"]

#: JSON nested deeper than this is not read. Python's parser recurses once a level (JSON
#: nested 100,000 deep raises RecursionError), and so does anything that later prints or
#: walks the value; PyTorch's records nest under ten.
MAX_JSON_DEPTH = 100

_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_DEPTH_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """True when the JSON in ``text`` nests deeper than ``limit``; linear, without parsing
    (strings are skipped, so brackets inside them do not count)."""
    if text.count("[") + text.count("{") <= limit:
        return False
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(itertools.accumulate(map(_DEPTH_STEP.__getitem__, brackets)), default=0) > limit


def load_json(text: str) -> Any:
    """``json.loads`` with its depth bounded (MAX_JSON_DEPTH).

    Raises:
        ValueError: not JSON, or JSON nested deeper than MAX_JSON_DEPTH.
    """
    if json_too_deep(text):
        raise ValueError(f"JSON nested over {MAX_JSON_DEPTH} deep")
    try:
        return json.loads(text)
    except RecursionError:  # a belt to the depth check's braces
        raise ValueError(f"JSON nested over {MAX_JSON_DEPTH} deep") from None
