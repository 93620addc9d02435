"""The compile caches, as plain data: each lookup PyTorch logged (which cache, hit, miss or
bypass, the key and the parts it was hashed from), and two runs' lookups compared.

PyTorch hashes a compile's inputs into a cache key from named parts (``FxGraphHashDetails``:
the graph's code, each input's metadata, each Inductor option, torch's own source, the
machine...) and logs each part's hash beside its printed value. A miss in one run where
another run hit (or filled the cache) is explained by the parts whose hashes differ: that is
``cache_diff``. Parts are kept short (``VALUE_MAX``) so a long job's lookups stay small.

A change is data (``PartChange``: family, name, field, before, after); its words (``what``,
``todo``), a miss's (``head()``, ``lines()``) and a comparison's (``summary()``) are made in one
place, ``dynscope._render.cache``, reached through the output shortcuts.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from dynscope._model.base import _brief
from dynscope._model.display import CacheDiffShortcuts, CacheMissShortcuts, PartChangeShortcuts

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = [
    "CACHES", "FAMILIES", "CacheDiff", "CacheLookup", "CacheMiss", "KeyPart", "PartChange", "compare_lookups",
    "per_compile_seconds",
]

#: The caches, as the model names them (PyTorch's ``fx_graph_cache_*`` / ``aotautograd_cache_*``).
FX_GRAPH, AOT_AUTOGRAD = "fx_graph", "aot_autograd"
CACHES = (AOT_AUTOGRAD, FX_GRAPH)
#: A lookup's result.
HIT, MISS, BYPASS = "hit", "miss", "bypass"
#: The most of a part's printed value kept (the graph's code: GRAPH_VALUE_MAX); its hash is
#: always kept whole, so a change past the kept text is still seen.
VALUE_MAX = 200
GRAPH_VALUE_MAX, INPUT_VALUE_MAX = 4000, 800

# -- the families of key parts (PyTorch's attribute names, torch 2.13 FxGraphHashDetails and
# AOTAutogradCacheDetails) ----------------------------------------------------------------
GRAPH = "graph"  # gm: the graph's code
INPUT = "input"  # example_inputs[i]: an input's dtype, shape, stride, device...
INDUCTOR_CONFIG = "inductor_config"  # inductor_config[name] (and inductor_config_comms)
AUTOGRAD_CONFIG = "autograd_config"  # autograd_config[name]: torch._functorch.config
COMPILE_OPTION = "compile_option"  # fx_kwargs[name]: how Inductor was called (inference, cudagraphs...)
TORCH = "torch"  # torch_version: a hash of torch's own source
SYSTEM = "system"  # system_info: C++ compiler, device, CUDA/Triton versions
THREADS = "threads"  # cpp_runtime_thread_count: torch.get_num_threads() the C++ code specialised on
STATE = "state"  # a global setting: default dtype, deterministic algorithms, matmul precision, grad mode, autocast
CACHE_TAG = "cache_tag"  # cache_key_tag: torch.compiler.config.cache_key_tag
CUSTOM_PASS = "custom_pass"  # a custom pass's uuid
OTHER = "other"
#: Every family a PartChange can have.
FAMILIES = (GRAPH, INPUT, INDUCTOR_CONFIG, AUTOGRAD_CONFIG, COMPILE_OPTION, TORCH, SYSTEM, THREADS, STATE,
            CACHE_TAG, CUSTOM_PASS, OTHER)

#: A part's name (the attribute before any ``[...]``) -> its family.
_FAMILY_OF: dict[str, str] = {
    "gm": GRAPH, "example_inputs": INPUT, "inductor_config": INDUCTOR_CONFIG,
    "inductor_config_comms": INDUCTOR_CONFIG, "autograd_config": AUTOGRAD_CONFIG, "fx_kwargs": COMPILE_OPTION,
    "aot_config": COMPILE_OPTION, "torch_version": TORCH, "system_info": SYSTEM,
    "cpp_runtime_thread_count": THREADS, "default_dtype": STATE, "deterministic_algorithms_settings": STATE,
    "deterministic_algorithms": STATE, "cuda_matmul_settings": STATE, "grad_enabled": STATE,
    "autocast_state": STATE, "default_cuda_device_index": STATE, "provenance_tracking_level": STATE,
    "cache_key_tag": CACHE_TAG, "user_defined_triton_source": GRAPH, "triton_kernel_source_codes": GRAPH,
}


@dataclass(frozen=True)
class KeyPart:
    """One part a cache key was hashed from, as PyTorch logged it (``[hash] name: value``)."""

    name: str  # PyTorch's attribute: "gm", "example_inputs[1]", "inductor_config[max_autotune]"
    digest: str  # the part's own hash as logged (compared, never shown)
    value: str  # its printed value, cut to VALUE_MAX (the graph's code: GRAPH_VALUE_MAX); "" for raw bytes

    @property
    def family(self) -> str:
        """Which family of FAMILIES the part is of."""
        base = self.name.split("[", 1)[0]
        if base.endswith("custom_pass") or base.endswith("custom_passes") or base.endswith("_fn"):
            return CUSTOM_PASS
        return _FAMILY_OF.get(base, OTHER)

    @property
    def field(self) -> str:
        """What is inside the brackets of its name ("max_autotune", "1"); "" without."""
        m = re.search(r"\[(.*)\]$", self.name)
        return m.group(1) if m else ""


@dataclass(frozen=True)
class CacheLookup:
    """One lookup in one compile cache, as PyTorch logged it (a ``*_cache_hit/miss/bypass`` record)."""

    compile_id: str  # "frame/compile" of the Dynamo compile the lookup was in; "" when not logged
    cache: str  # FX_GRAPH or AOT_AUTOGRAD
    result: str  # HIT, MISS or BYPASS
    key: str = ""  # the key looked up; "" for a bypass (no key could be made) or when not logged
    parts: tuple[KeyPart, ...] = ()  # what the key was hashed from; () when PyTorch logged none
    bypass_reason: str = ""  # why the cache was not used (a bypass)
    # A hit: the seconds of compiling it saved (PyTorch's time_saved, the first compile's
    # time); a miss: the seconds the compile after it took (its compile metrics); None: unknown.
    seconds: float | None = None
    detail: str = ""  # PyTorch's cache_status_detailed ("full_miss", "guard_miss", "hit"...)
    frame: str = ""  # the compiled function's name, when known
    release: str = ""  # the torch release that logged it ("2.13.0+cpu"), when known
    ordinal: int = 0  # which lookup of this cache in this compile (a training graph: forward 0, backward 1)

    def __repr__(self) -> str:
        return _brief("CacheLookup", f"{self.compile_id} {self.cache} {self.result}, {len(self.parts)} parts")

    def part(self, name: str) -> KeyPart | None:
        """The part of this name; None when the lookup has none."""
        return next((p for p in self.parts if p.name == name), None)


def per_compile_seconds(lookups: Iterable[CacheLookup], result: str) -> float:
    """The seconds of the ``result`` lookups (HIT: compiling saved; MISS: compiling after the
    miss), each compile counted once by its largest figure: an AOTAutograd lookup's seconds
    hold the Inductor compile inside it (the same compile's FX graph lookups)."""
    most: dict[str, float] = {}
    for lk in lookups:
        if lk.result == result and lk.seconds is not None:
            most[lk.compile_id] = max(most.get(lk.compile_id, 0.0), lk.seconds)
    return sum(most.values())


@dataclass(frozen=True)
class PartChange(PartChangeShortcuts):
    """One part of a key that differs between two runs' lookups of the same graph."""

    family: str  # of FAMILIES
    name: str  # the part's name ("inductor_config[max_autotune]", "example_inputs[1]")
    field: str = ""  # what in it changed: an input's "dtype", a config's option name; "" for the whole
    before: str = ""  # its value in run A ("" when absent there)
    after: str = ""  # its value in run B ("" when absent there)



#: Why run B missed a lookup, beyond its changed parts.
PARTS_DIFFER = "parts differ"  # changes lists them
SAME_KEY = "same key"  # B looked up the key A made: the entry was not in B's cache
GUARD_MISS = "guard miss"  # the entry was there, its shape guards failed
NOT_IN_A = "not in A"  # A made no lookup for this graph
NO_PARTS = "no parts logged"  # the keys differ and PyTorch logged no parts for one of them
# AOTAutograd logged no parts (its default): the changes are those of the FX graph cache's
# lookup in the same compile, whose key is hashed from the same families of parts
FROM_FX = "parts from the FX graph cache"
BYPASSED = "bypassed"  # B did not use the cache at all (bypass_reason)


@dataclass(frozen=True)
class CacheMiss(CacheMissShortcuts):
    """A graph B compiled again where A hit or filled the cache: why, and what it cost."""

    compile_id: str
    cache: str
    before: CacheLookup | None  # A's lookup of the same graph (None: A made none)
    after: CacheLookup  # B's
    why: str  # PARTS_DIFFER, SAME_KEY, GUARD_MISS, NOT_IN_A, NO_PARTS, BYPASSED
    changes: tuple[PartChange, ...] = ()  # the parts that differ, in PyTorch's order

    @property
    def seconds(self) -> float | None:
        """What the miss cost: B's compile after it (else what A's hit saved); None when unknown."""
        if self.after.seconds is not None:
            return self.after.seconds
        return self.before.seconds if self.before is not None and self.before.result == HIT else None


@dataclass(frozen=True)
class CacheDiff(CacheDiffShortcuts):
    """Two runs' cache lookups compared (``dynscope.cache_diff``)."""

    a: str  # what run A is (a path or "report A")
    b: str
    lookups_a: tuple[CacheLookup, ...]
    lookups_b: tuple[CacheLookup, ...]
    misses: tuple[CacheMiss, ...]  # B's lookups that did not hit, each explained

    def __repr__(self) -> str:
        return _brief("CacheDiff", f"{len(self.misses)} misses in B of {len(self.lookups_b)} lookups")

    def counts(self, run: str) -> Counter[tuple[str, str]]:
        """Results of run "a" or "b", as (cache, result) -> count: ("fx_graph", "hit") -> 2."""
        lookups = self.lookups_a if run == "a" else self.lookups_b
        return Counter((lk.cache, lk.result) for lk in lookups)

    @property
    def seconds_saved_b(self) -> float:
        """The compile seconds B's hits saved (:func:`per_compile_seconds`)."""
        return per_compile_seconds(self.lookups_b, HIT)

    @property
    def causes(self) -> tuple[PartChange, ...]:
        """Every distinct change named, in order of first appearance."""
        seen: dict[tuple[str, str, str, str], PartChange] = {}
        for miss in self.misses:
            for c in miss.changes:
                seen.setdefault((c.name, c.field, c.before, c.after), c)
        return tuple(seen.values())


def compare_lookups(a: tuple[CacheLookup, ...], b: tuple[CacheLookup, ...], *, label_a: str = "A",
                    label_b: str = "B") -> CacheDiff:
    """Run B's lookups that did not hit, each matched with A's lookup of the same graph (same
    compile id, cache and ordinal; else the same function's first) and explained by the key
    parts that differ.

    Args:
        a: the reference run's lookups (a warm run that hit, or the run that filled the cache).
        b: the run to explain.
        label_a: what A is, for the summary. Defaults to "A".
        label_b: what B is. Defaults to "B".
    """
    by_graph = {(lk.compile_id, lk.cache, lk.ordinal): lk for lk in a}
    # A graph B compiled under another compile id (a break or a recompile earlier in B numbers
    # its frames differently) is matched by its function's name: A's first lookup of it.
    by_frame: dict[tuple[str, str, int], CacheLookup] = {}
    for lk in a:
        if lk.frame:
            by_frame.setdefault((lk.frame, lk.cache, lk.ordinal), lk)
    misses = [
        _explain(by_graph.get((lk.compile_id, lk.cache, lk.ordinal)) or by_frame.get((lk.frame, lk.cache, lk.ordinal)),
                 lk)
        for lk in b if lk.result != HIT
    ]
    fx_changes: dict[str, tuple[PartChange, ...]] = {}
    for m in misses:  # the compile's first FX lookup (a training graph's forward: AOTAutograd's own graph)
        if m.cache == FX_GRAPH and m.why == PARTS_DIFFER:
            fx_changes.setdefault(m.compile_id, m.changes)
    misses = [
        replace(m, why=FROM_FX, changes=fx_changes[m.compile_id])
        if m.cache == AOT_AUTOGRAD and m.why == NO_PARTS and m.compile_id in fx_changes else m
        for m in misses
    ]
    return CacheDiff(a=label_a, b=label_b, lookups_a=tuple(a), lookups_b=tuple(b), misses=tuple(misses))


def _explain(before: CacheLookup | None, after: CacheLookup) -> CacheMiss:
    if after.result == BYPASS:
        return CacheMiss(after.compile_id, after.cache, before, after, BYPASSED)
    if before is None:
        return CacheMiss(after.compile_id, after.cache, None, after, NOT_IN_A)
    if before.key and before.key == after.key:
        why = GUARD_MISS if after.detail == "guard_miss" else SAME_KEY
        return CacheMiss(after.compile_id, after.cache, before, after, why)
    if not before.parts or not after.parts:
        return CacheMiss(after.compile_id, after.cache, before, after, NO_PARTS)
    changes = part_changes(before.parts, after.parts)
    if before.release and after.release and before.release != after.release:
        # torch_version's value is a raw hash: the releases that logged the lookups say it
        changes = tuple(replace(c, before=before.release, after=after.release) if c.family == TORCH else c
                        for c in changes)
    return CacheMiss(after.compile_id, after.cache, before, after, PARTS_DIFFER if changes else NO_PARTS, changes)


def part_changes(before: tuple[KeyPart, ...], after: tuple[KeyPart, ...]) -> tuple[PartChange, ...]:
    """The parts whose hashes differ (or that only one side has), in B's order, then A's."""
    old = {p.name: p for p in before}
    new = {p.name: p for p in after}
    out: list[PartChange] = []
    for part in after:
        was = old.get(part.name)
        if was is None or was.digest != part.digest:
            out += _changes(was, part)
    for part in before:
        if part.name not in new:
            out += _changes(part, None)
    return tuple(out)


def _changes(was: KeyPart | None, now: KeyPart | None) -> list[PartChange]:
    """The changes of one part: an input's, one per field that differs (dtype, stride...)."""
    some = now if now is not None else was
    assert some is not None
    before, after = (was.value if was else ""), (now.value if now else "")
    family, field = some.family, some.field
    if family == INPUT and was is not None and now is not None:
        inner = _fields_changed(before, after)
        if inner:
            return [PartChange(family=family, name=some.name, field=k, before=v, after=w) for k, v, w in inner]
    elif family == GRAPH and was is not None and now is not None:
        before, after = _first_line_changed(before, after)
    return [PartChange(family=family, name=some.name, field=field, before=before, after=after)]


def _split_top(text: str) -> list[str]:
    """``text`` split at the commas outside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(text[start:i].strip())
            start = i + 1
    out.append(text[start:].strip())
    return [s for s in out if s]


def _fields(value: str) -> dict[str, str]:
    """``TensorMetadata(dtype=torch.float32, shape=...)`` -> {"dtype": "torch.float32", ...}."""
    m = re.match(r"^\w+\((.*)\)?$", value, re.S)
    if m is None:
        return {}
    out = {}
    for item in _split_top(m.group(1)):
        name, eq, val = item.partition("=")
        if eq:
            out[name.strip()] = val.strip()
    return out


def _fields_changed(before: str, after: str) -> list[tuple[str, str, str]]:
    """The named fields of two printed records that differ (an input's dtype, stride...)."""
    old, new = _fields(before), _fields(after)
    return [(k, old.get(k, ""), new.get(k, "")) for k in new if old.get(k) != new.get(k)] + \
        [(k, old[k], "") for k in old if k not in new]


def _first_line_changed(before: str, after: str) -> tuple[str, str]:
    """The first line of the graph's code that differs on each side ("" when past what was kept)."""
    # "mul = torch.ops.aten.mul.Tensor(arg0_1, 2);  arg0_1 = None": the statement, without the
    # buffer frees FX prints after it
    old = [line.split(";  ")[0].strip() for line in before.splitlines() if line.strip()]
    new = [line.split(";  ")[0].strip() for line in after.splitlines() if line.strip()]
    for x, y in zip(old, new, strict=False):  # the shorter side ends the walk
        if x != y:
            return x, y
    if len(old) != len(new):
        longer = old if len(old) > len(new) else new
        line = longer[min(len(old), len(new))]
        return (line, "") if longer is old else ("", line)
    return "", ""
