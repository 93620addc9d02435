"""The writing half of the JSON codec: model values -> plain data -> JSON text -> a file.

It knows no model type (it walks dataclass fields), so the model's own ``to_dict()``,
``to_json()`` and ``save()`` call it without a cycle; reading back, which checks every value
against the model's type hints, is ``dynscope._model.codec``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["iter_json", "save", "to_json", "to_plain"]


@functools.cache
def _plain_fields(cls: type) -> tuple[str, ...]:
    """Names of the fields JSON carries (live holders left out); cached per class."""
    return tuple(f.name for f in dataclasses.fields(cls) if not f.metadata.get("live"))


@functools.cache
def _saved_as_words(cls: type) -> bool:
    """Whether ``cls`` is saved as one string (its ``_to_words()``; the codec reads it back with
    ``_from_words``): a value files kept as words before it had fields (Site); cached per class."""
    return hasattr(cls, "_to_words")


def to_plain(obj: Any) -> Any:
    """A model value as plain JSON-able data (dataclasses -> dicts without live holders, or
    the words of one saved as words; tuples -> lists)."""
    if obj is None or isinstance(obj, (str, int, float)):
        return obj  # the common case first: most values in a report are scalars
    if isinstance(obj, (tuple, list)):
        return [to_plain(v) for v in obj]
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        if _saved_as_words(type(obj)):
            return obj._to_words()  # type: ignore[attr-defined]  # what _saved_as_words found
        return {name: to_plain(getattr(obj, name)) for name in _plain_fields(type(obj))}
    if isinstance(obj, dict):
        return {str(k): to_plain(v) for k, v in obj.items()}
    return obj


def to_json(rep: Any, *, indent: int | None = 1) -> str:
    """The report as JSON text (``Report.to_json``)."""
    return json.dumps(to_plain(rep), indent=indent, sort_keys=False)


def save(rep: Any, path: str | Path) -> Path:
    """Write the report as JSON to ``path`` atomically; returns the path (``Report.save``).

    Raises:
        InputError: ``path`` is a folder, or its folder cannot be written.
        DynscopeError: writing failed midway (disk full, ...).
    """
    from dynscope._write import write_text

    # Streamed, a field or an item per line, each through json's C encoder (to_json()'s
    # indent would pick its Python one: seconds for a ViT's lowered graphs); loads the same.
    return write_text(Path(path), iter_json(rep))


def iter_json(obj: Any) -> Iterator[str]:
    """A dataclass as JSON text in pieces, one item at a time for its fields that hold many
    dataclasses (a merged report's ranks): never the whole as plain data or as one string,
    and each item through json's C encoder (``indent`` would select its slow Python one)."""
    yield "{"
    cls: Any = type(obj)
    for i, name in enumerate(_plain_fields(cls)):
        value = getattr(obj, name)
        yield ("," if i else "") + "\n" + json.dumps(name) + ": "
        if isinstance(value, (tuple, list)) and value and all(dataclasses.is_dataclass(v) for v in value):
            yield "["
            for j, item in enumerate(value):
                yield ("," if j else "") + "\n" + json.dumps(to_plain(item))
            yield "\n]"
        else:
            yield json.dumps(to_plain(value))
    yield "\n}\n"
