"""The report's JSON codec: model -> plain data -> JSON text, and back, checked.

``dynscope.load`` is a one-line delegation to this module; the writing half
(``Report.to_dict``/``to_json``/``save``) is ``dynscope._model.plain``, re-exported here.
Reading checks every value against the model's type hints, so a file that is not a
dynscope report fails with a ``SchemaError`` that says where it differs.
The layout is versioned by ``dynscope._model.report.SCHEMA_VERSION``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import gc
import json
import types
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, Union

from dynscope._errors import SchemaError
from dynscope._format import clip
from dynscope._model.plain import _plain_fields
from dynscope._model.report import SCHEMA_VERSION, Report

__all__ = ["from_plain", "load", "report_from_dict"]

_T = TypeVar("_T")


class _Mismatch(Exception):
    """Data that does not fit the model; ``path`` grows (innermost first) as it unwinds."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message
        self.path: list[str] = []


def _show(data: Any) -> str:
    """A short repr for error messages (a whole graph in a message helps nobody)."""
    return clip(repr(data), 80)


_Decoder = Callable[[Any], Any]


@functools.cache
def _decoder(tp: Any) -> _Decoder:
    """A function that rebuilds a value of type ``tp`` from JSON data, checking as it goes.

    Built once per type and cached: working out a dataclass's type hints per object
    (typing.get_type_hints) made loading a 100 MB report take minutes.
    """
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        return _union_decoder(typing.get_args(tp))
    if origin is tuple:
        return _tuple_decoder(typing.get_args(tp))
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _dataclass_decoder(tp)
    if tp is Any:
        return lambda data: data
    if tp is float:

        def number(data: Any) -> float:
            if type(data) is float or type(data) is int:
                return float(data)
            raise _Mismatch(f"expected a number, got {_show(data)}")

        return number
    if tp is int:

        def integer(data: Any) -> int:
            if type(data) is int:  # bool is not an int here
                return data
            raise _Mismatch(f"expected an integer, got {_show(data)}")

        return integer
    if isinstance(tp, type):

        def plain(data: Any) -> Any:
            if isinstance(data, tp):
                return data
            raise _Mismatch(f"expected {tp.__name__}, got {_show(data)}")

        return plain
    raise TypeError(f"the report model uses a type the JSON codec does not know: {tp!r}")


def _union_decoder(args: tuple[Any, ...]) -> _Decoder:
    optional = type(None) in args
    choices = tuple(_decoder(a) for a in args if a is not type(None))
    names = " or ".join(getattr(a, "__name__", str(a)) for a in args)

    def union(data: Any) -> Any:
        if data is None and optional:
            return None
        for choice in choices:
            try:
                return choice(data)
            except _Mismatch:
                continue
        raise _Mismatch(f"expected {names}, got {_show(data)}")

    return union


def _tuple_decoder(args: tuple[Any, ...]) -> _Decoder:
    if len(args) == 2 and args[1] is Ellipsis:
        item = _decoder(args[0])

        def variadic(data: Any) -> tuple[Any, ...]:
            if type(data) is not list:
                raise _Mismatch(f"expected a list, got {_show(data)}")
            try:
                return tuple([item(v) for v in data])
            except _Mismatch:
                # Error path only: find the item again to say where it is.
                for i, v in enumerate(data):
                    try:
                        item(v)
                    except _Mismatch as err:
                        err.path.append(f"[{i}]")
                        raise
                raise

        return variadic
    items = tuple(_decoder(a) for a in args)

    def fixed(data: Any) -> tuple[Any, ...]:
        if type(data) is not list:
            raise _Mismatch(f"expected a list, got {_show(data)}")
        if len(data) != len(items):
            raise _Mismatch(f"expected {len(items)} items, got {len(data)}")
        try:
            return tuple([dec(v) for dec, v in zip(items, data, strict=True)])
        except _Mismatch:
            for i, (dec, v) in enumerate(zip(items, data, strict=True)):
                try:
                    dec(v)
                except _Mismatch as err:
                    err.path.append(f"[{i}]")
                    raise
            raise

    return fixed


def _dataclass_decoder(cls: type) -> _Decoder:
    hints = typing.get_type_hints(cls)
    # A field that older files saved under another name says so in its metadata ("was"):
    # Recompile.raw_reasons was "reasons" before schema 7.
    was = {f.name: f.metadata.get("was", f.name) for f in dataclasses.fields(cls)}
    fields = tuple((name, was[name], _decoder(hints[name])) for name in _plain_fields(cls))
    # A class whose older files saved words where it now keeps fields (Cause, RecompileFix) reads them.
    from_words = getattr(cls, "_from_words", None)
    # A class whose older files laid its fields out otherwise (Recompile) puts them in this layout.
    upgraded = getattr(cls, "_upgraded", None)

    def dataclass(data: Any) -> Any:
        if type(data) is str and from_words is not None:
            return from_words(data)
        if type(data) is not dict:
            raise _Mismatch(f"expected an object, got {_show(data)}")
        if upgraded is not None:
            data = upgraded(data)
        kwargs = {}
        name = ""
        try:
            for name, old, dec in fields:
                if name in data:  # missing optional fields take their defaults
                    kwargs[name] = dec(data[name])
                elif old in data:
                    kwargs[name] = dec(data[old])
        except _Mismatch as err:
            err.path.append(f".{name}")
            raise
        try:
            return cls(**kwargs)
        except TypeError as err:  # a required field is missing
            raise _Mismatch(str(err)) from err

    return dataclass


def from_plain(cls: type[_T], data: Any) -> _T:
    """Rebuild one model value of type ``cls`` (``Graph``, ``GraphBreak``...) from ``to_plain`` output.

    Raises:
        SchemaError: the data does not fit ``cls`` (the message says where).
    """
    try:
        value: _T = _decoder(typing.cast("Any", cls))(data)
    except _Mismatch as err:
        raise SchemaError(f"{cls.__name__}{''.join(reversed(err.path))}: {err.message}") from None
    return value


def report_from_dict(data: Any) -> Report:
    """Rebuild a Report from :meth:`Report.to_dict` output.

    Raises:
        SchemaError: the data is not a dynscope report (the message says where it differs),
            or comes from a newer schema.
    """
    if not isinstance(data, dict) or "schema_version" not in data:
        raise SchemaError("not a dynscope report: no 'schema_version' field at the top level")
    version = data["schema_version"]
    if type(version) is not int or version > SCHEMA_VERSION:
        raise SchemaError(
            f"this report uses schema version {version!r}, newer than this dynscope reads "
            f"({SCHEMA_VERSION}); upgrade dynscope (pip install -U dynscope) to read it"
        )
    try:
        report: Report = _decoder(Report)(data)
    except _Mismatch as err:
        raise SchemaError(f"report{''.join(reversed(err.path))}: {err.message}") from None
    return report


def load(path: str | Path) -> Report:
    """Read a report written by :meth:`Report.save`.

    Args:
        path: the JSON file.

    Returns:
        The report, without live GraphModules (``graph.module`` is None).

    Raises:
        SchemaError: the path is a folder, or the file is unreadable, not UTF-8, not JSON
            (or nested too deeply to read), not a dynscope report, or from a newer schema.
        FileNotFoundError: there is no such file.
    """
    p = Path(path)
    if p.is_dir():
        raise SchemaError(f"{p} is a folder, not a report file; pass a JSON file written by Report.save "
                          f"(a rendered folder keeps it as {p / 'report.json'})")
    try:
        raw = p.read_bytes()
    except FileNotFoundError as err:
        raise FileNotFoundError(err.errno, f"no such report file: {p}", str(p)) from None
    except OSError as err:
        raise SchemaError(f"cannot read {p}: {err.strerror or err}") from err
    try:
        text = raw.decode("utf-8-sig")  # a BOM from a Windows editor is harmless
    except UnicodeDecodeError as err:
        raise SchemaError(
            f"{p} is not UTF-8 text (bad byte at offset {err.start}); expected a JSON file written by Report.save"
        ) from None
    del raw
    with _gc_paused():
        try:
            data = json.loads(text)
        except RecursionError:
            raise SchemaError(f"{p} nests JSON too deeply to be a dynscope report") from None
        except ValueError as err:  # JSONDecodeError, or an integer too long to convert
            raise SchemaError(f"{p} is not JSON ({err}); expected a file written by Report.save") from None
        del text
        try:
            return report_from_dict(data)
        except SchemaError as err:
            raise SchemaError(f"{p}: {err}") from None


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Pause the cyclic garbage collector while a big report is built.

    Reading makes millions of objects and no cycles; the collector's passes over them made
    loading 2-3 times slower. It runs again (if it was on) as soon as the block ends.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
