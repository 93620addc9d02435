"""The compile caches' trace records read without torch: each ``fx_graph_cache_*`` and
``aotautograd_cache_*`` artifact -> a ``CacheLookup``.

Their payload is the ``cache_info`` dict PyTorch logs as JSON (torch 2.13
``_inductor/compile_fx.py`` and ``_functorch/_aot_autograd/autograd_cache.py``)::

    {"cache_state": "hit", "key": "f...", "components": ["[hash] gm: <code>",
     "[hash] example_inputs[0]: TensorMetadata(...)", "[hash] inductor_config[max_autotune]: False", ...],
     "time_saved_ns": 123, "cache_status_detailed": "hit", "cache_bypass_reason": "...", ...}

``components`` are ``FxGraphCachePickler.debug_lines``: one line per attribute of the hash
details (a list or dict attribute: one line per item), each led by that item's own hash.
An FX graph record runs to 70 KB (the Inductor config alone is some 600 lines); on arrival
it is cut to what dynscope reads (``compact``): the fields below and each part as
[name, hash, value cut short], so a long job's cache records stay small. AOTAutograd logs
its parts only while its logger is at DEBUG (``components`` is ``[]`` otherwise).
"""

from __future__ import annotations

import functools
import json
import re
from typing import TYPE_CHECKING, Any

from dynscope._model.cache import GRAPH_VALUE_MAX, INPUT_VALUE_MAX, VALUE_MAX, CacheLookup, KeyPart
from dynscope._torch.bounded_json import load_json

if TYPE_CHECKING:
    from dynscope._torch.trace import TraceEvent

#: The fields of ``cache_info`` dynscope reads (the rest, such as a bypass's traceback, is dropped).
_FIELDS = ("cache_state", "key", "cache_bypass_reason", "cache_status_detailed", "cache_status_guard_expr",
           "time_saved_ns", "time_saved_ms", "time_taken_ns")
#: A hash-detail line: ``[hash] name: value`` (name ``attr`` or ``attr[item]``; value may span lines).
_LINE = re.compile(r"\[(?P<digest>[^\]]*)\] (?P<name>[A-Za-z_]\w*(?:\[[^\]]*\])?):(?: (?P<value>.*))?\Z", re.S)
#: The characters of a part's hash kept (base32: 50 bits, enough to tell two values apart).
DIGEST_CHARS = 10
#: The part whose value is the graph's code: kept longer, so the changed line can be named.
_GRAPH_PART, _INPUT_PART = "gm", "example_inputs["


def compact(payload: str) -> str:
    """A cache record's payload cut to what dynscope reads, as JSON: the fields of ``_FIELDS``
    and ``parts``, each [name, hash, value] with the value cut short. A payload that is not a
    JSON object is returned as "" (the record then reads as a lookup without a key)."""
    try:
        data = load_json(payload)
    except ValueError:
        return ""
    if not isinstance(data, dict):
        return ""
    out: dict[str, Any] = {k: data[k] for k in _FIELDS if k in data}
    lines = data.get("components")
    parts = [p for line in lines if (p := _part(line)) is not None] if isinstance(lines, list) else []
    # An item's attribute is left out when it is the previous part's ("[max_autotune]" after
    # "inductor_config[debug]"): some 600 config items otherwise repeat it.
    attr = ""
    for part in parts:
        base, bracket, item = part[0].partition("[")
        if bracket and base == attr:
            part[0] = bracket + item
        attr = base if bracket else ""
    out["parts"] = parts
    return json.dumps(out, separators=(",", ":"))


def without_key_parts(payload: str) -> str:
    """A ``chromium_event`` payload without the cache key's parts: the end of an
    ``inductor_compile`` step carries the FX graph key's ``components`` too (70 KB, torch 2.13
    ``CompileEventLogger.try_add_pt2_compile``), and only the step's name, phase and time are
    read from it. Other payloads are returned as they are."""
    if '"components"' not in payload:
        return payload
    try:
        data = load_json(payload)
    except ValueError:
        return payload
    args = data.get("args") if isinstance(data, dict) else None
    if not isinstance(args, dict) or "components" not in args:
        return payload
    return json.dumps({**data, "args": {k: v for k, v in args.items() if k != "components"}})


def _part(line: object) -> list[str] | None:
    """[name, hash, value] of one hash-detail line; None when it is not one."""
    if not isinstance(line, str):
        return None
    m = _LINE.match(line)
    if m is None:
        return None
    name, value = m["name"], m["value"] or ""
    if "\ufffd" in value:  # raw bytes decoded (torch_version's source hash): the hash says it all
        value = ""
    cap = GRAPH_VALUE_MAX if name == _GRAPH_PART else INPUT_VALUE_MAX if name.startswith(_INPUT_PART) else VALUE_MAX
    return [name, m["digest"][:DIGEST_CHARS], value if len(value) <= cap else value[:cap] + "..."]


def read_lookup(ev: TraceEvent, cache: str, result: str) -> CacheLookup:
    """The lookup one cache record says (its payload as ``compact`` left it, or as PyTorch
    logged it); a lookup without key or parts when the payload was dropped or unreadable."""
    text = ev.payload
    data: Any = {}
    if text:
        try:
            data = json.loads(text)
        except ValueError:
            data = {}
        if isinstance(data, dict) and "parts" not in data:  # a payload not yet compacted
            data = json.loads(compact(text) or "{}")
    if not isinstance(data, dict):
        data = {}
    parts: list[KeyPart] = []
    attr = ""
    for p in data.get("parts") or ():
        if not (isinstance(p, list) and len(p) == 3):
            continue
        name = str(p[0])
        if name.startswith("["):  # an item of the previous part's attribute (compact)
            name = attr + name
        attr = name.partition("[")[0]
        parts.append(_key_part(name, str(p[1]), str(p[2])))
    return CacheLookup(
        compile_id=ev.compile_id, cache=cache, result=result, key=_text(data.get("key")), parts=tuple(parts),
        bypass_reason=_text(data.get("cache_bypass_reason")), seconds=_saved(data) if result == "hit" else None,
        detail=_text(data.get("cache_status_detailed")),
    )


@functools.lru_cache(maxsize=1 << 16)
def _key_part(name: str, digest: str, value: str) -> KeyPart:
    """One KeyPart per distinct part: some 600 Inductor options are the same in every lookup of
    a run, so a long job's lookups share them instead of holding a copy each."""
    return KeyPart(name=name, digest=digest, value=value)


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


def _saved(data: dict[str, Any]) -> float | None:
    """The seconds a hit saved: the FX graph cache's ``time_saved_ns``, AOTAutograd's ``time_saved_ms``."""
    ns, ms = data.get("time_saved_ns"), data.get("time_saved_ms")
    if isinstance(ns, (int, float)) and not isinstance(ns, bool):
        return ns / 1e9
    if isinstance(ms, (int, float)) and not isinstance(ms, bool):
        return ms / 1e3
    return None
