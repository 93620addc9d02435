"""The compile caches, as plain data: each lookup PyTorch logged (which cache, hit, miss or
bypass, the key and the parts it was hashed from), and two runs' lookups compared.

PyTorch hashes a compile's inputs into a cache key from named parts (``FxGraphHashDetails``:
the graph's code, each input's metadata, each Inductor option, torch's own source, the
machine...) and logs each part's hash beside its printed value. A miss in one run where
another run hit (or filled the cache) is explained by the parts whose hashes differ: that is
``cache_diff``. Parts are kept short (``VALUE_MAX``) so a long job's lookups stay small.

A change is data (``PartChange``: family, name, field, before, after); ``what`` and ``todo``
word it. (They belong with the renderers' words; they live here while ``_render`` is being
reworked, and read fields only, so they move without a change of meaning.)
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, replace

from dynscope._model.base import _brief

__all__ = [
    "CACHES", "FAMILIES", "CacheDiff", "CacheLookup", "CacheMiss", "KeyPart", "PartChange", "compare_lookups",
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


@dataclass(frozen=True)
class PartChange:
    """One part of a key that differs between two runs' lookups of the same graph."""

    family: str  # of FAMILIES
    name: str  # the part's name ("inductor_config[max_autotune]", "example_inputs[1]")
    field: str = ""  # what in it changed: an input's "dtype", a config's option name; "" for the whole
    before: str = ""  # its value in run A ("" when absent there)
    after: str = ""  # its value in run B ("" when absent there)

    @property
    def what(self) -> str:
        """The change, in words."""
        return _what(self)

    @property
    def todo(self) -> str:
        """What to do so that run B hits, in words."""
        return _TODO.get(self.family, _TODO[OTHER])


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
class CacheMiss:
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

    def head(self) -> str:
        """Which compile, which cache, what happened and what it cost, in words (no cause)."""
        where = f"{self.compile_id} {self.after.frame}".strip()
        cost = f" ({self.seconds:.2f} s)" if self.seconds is not None else ""
        said = f": {self.after.bypass_reason}" if self.after.result == BYPASS and self.after.bypass_reason else ""
        return f"{where}: {_CACHE_WORDS.get(self.cache, self.cache)} {self.after.result}{cost}{said}"

    def lines(self) -> list[str]:
        """The miss in words: a head line, then one line per change and what to do."""
        where = f"{self.compile_id} {self.after.frame}".strip()
        cost = f" ({self.seconds:.2f} s)" if self.seconds is not None else ""
        was = "hit" if self.before is not None and self.before.result == HIT else "filled the cache"
        head = f"{where}: {_CACHE_WORDS.get(self.cache, self.cache)} {self.after.result} in B{cost}"
        if self.why in (PARTS_DIFFER, FROM_FX):
            told = " (as the FX graph cache's lookup in this compile logs them: AOTAutograd logged none)" \
                if self.why == FROM_FX else ""
            out = [f"{head}, where A {was}: {len(self.changes)} part(s) of the key changed{told}"]
            shown = self.changes
            if any(c.family == TORCH for c in shown):
                # another torch: the rest (new options, other versions) follows from it
                shown = tuple(c for c in self.changes if c.family == TORCH)
                rest = Counter(c.family for c in self.changes if c.family != TORCH)
                out.append(f"  - {shown[0].what}")
                out.append(f"    what to do: {shown[0].todo}")
                if rest:
                    out.append("    (and, as between releases, " + ", ".join(
                        f"{n} {family.replace('_', ' ')}" for family, n in sorted(rest.items())) + " part(s))")
                return out
            told_todo: set[str] = set()  # what to do, once per family
            for c in shown:
                out.append(f"  - {c.what}")
                if c.todo not in told_todo:
                    told_todo.add(c.todo)
                    out.append(f"    what to do: {c.todo}")
            return out
        out = [f"{head}: {_WHY_WORDS[self.why](self)}"]
        if self.why == BYPASSED:
            out.append(f"    what to do: {_bypass_todo(self.after.bypass_reason)}")
        return out


@dataclass(frozen=True)
class CacheDiff:
    """Two runs' cache lookups compared (``dynscope.cache_diff``)."""

    a: str  # what run A is (a path or "report A")
    b: str
    lookups_a: tuple[CacheLookup, ...]
    lookups_b: tuple[CacheLookup, ...]
    misses: tuple[CacheMiss, ...]  # B's lookups that did not hit, each explained

    def __repr__(self) -> str:
        return _brief("CacheDiff", f"{len(self.misses)} misses in B of {len(self.lookups_b)} lookups")

    def counts(self, run: str) -> Counter[str]:
        """Results of run "a" or "b", as "fx_graph hit" -> count."""
        lookups = self.lookups_a if run == "a" else self.lookups_b
        return Counter(f"{lk.cache} {lk.result}" for lk in lookups)

    @property
    def seconds_saved_b(self) -> float:
        """The compile seconds B's hits saved: each FX graph cache hit's time_saved (an
        AOTAutograd hit's figure covers the same compile, so it is not added again)."""
        return sum(lk.seconds or 0.0 for lk in self.lookups_b if lk.result == HIT and lk.cache == FX_GRAPH)

    @property
    def causes(self) -> tuple[PartChange, ...]:
        """Every distinct change named, in order of first appearance."""
        seen: dict[tuple[str, str, str, str], PartChange] = {}
        for miss in self.misses:
            for c in miss.changes:
                seen.setdefault((c.name, c.field, c.before, c.after), c)
        return tuple(seen.values())

    def summary(self) -> str:
        """The comparison as text: each run's results, then each miss in B and why."""
        def results(run: str) -> str:
            c = self.counts(run)
            return ", ".join(f"{n} {k}" for k, n in sorted(c.items())) or "no cache lookups logged"
        out = [f"A: {self.a}", f"   {results('a')}", f"B: {self.b}", f"   {results('b')}"]
        if self.seconds_saved_b:
            out.append(f"B's hits saved {self.seconds_saved_b:.2f} s of compiling")
        if not self.misses:
            out.append("B missed nothing A had: no cause to name." if self.lookups_b else
                       "B logged no cache lookups (Inductor off, caches disabled, or lowering not in the log).")
        for miss in self.misses:
            out += miss.lines()
        return "\n".join(out)

    def __str__(self) -> str:
        return self.summary()


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


# -- words (read fields only) -----------------------------------------------------------------

_CACHE_WORDS = {FX_GRAPH: "Inductor's FX graph cache", AOT_AUTOGRAD: "AOTAutograd's cache"}


def _short(value: str) -> str:
    return value.replace("torch.", "") if value else "(absent)"


def _what(c: PartChange) -> str:
    arrow = f"{_short(c.before)} -> {_short(c.after)}"
    if c.family == INPUT:
        index = c.name[c.name.find("[") + 1:-1] if c.name.endswith("]") else ""
        which = f"input {index}" if index.isdigit() else c.name
        if c.field and not c.field.isdigit():
            return f"{which}'s {c.field} changed: {arrow}"
        return f"{which}'s metadata changed"
    if c.family == INDUCTOR_CONFIG:
        return f"Inductor config `{c.field}` changed: {arrow}"
    if c.family == AUTOGRAD_CONFIG:
        return f"AOTAutograd config (torch._functorch.config) `{c.field}` changed: {arrow}"
    if c.family == COMPILE_OPTION:
        return f"Inductor was called with `{c.field or c.name}` {arrow}"
    if c.family == GRAPH:
        if c.before or c.after:
            return f"the graph's code changed: `{c.before or '(nothing)'}` -> `{c.after or '(nothing)'}`"
        return "the graph's code changed (past the part of it dynscope keeps)"
    if c.family == TORCH:
        if c.before or c.after:
            return f"torch changed: {c.before or '(unknown)'} -> {c.after or '(unknown)'}"
        return "torch's own source differs (another release or build of torch)"
    if c.family == SYSTEM:
        return f"the machine differs ({c.name}: C++ compiler, device or driver versions)"
    if c.family == THREADS:
        return f"the CPU thread count the C++ code specialises on changed: {arrow}"
    if c.family == STATE:
        return f"the global setting `{c.name}` changed: {arrow}"
    if c.family == CACHE_TAG:
        return f"the cache key tag changed: {arrow}"
    if c.family == CUSTOM_PASS:
        return f"the custom pass `{c.name}` changed"
    return f"`{c.name}` changed: {arrow}"


_TODO = {
    GRAPH: "expected when the program changed: the new graph is compiled once and cached; if the program "
           "did not change, a traced value (a constant, a Python number, a module attribute) did",
    INPUT: "call with the inputs the warm run used (same dtype, layout and strides), or warm the cache with these",
    INDUCTOR_CONFIG: "use the warm run's Inductor config (torch._inductor.config), or warm the cache with the new one",
    AUTOGRAD_CONFIG: "use the warm run's torch._functorch.config, or warm the cache with the new one",
    COMPILE_OPTION: "compile the same way as the warm run (training vs inference, torch.no_grad, cudagraphs, mode)",
    TORCH: "warm the cache with the same torch build that reads it (a cache does not carry across releases)",
    SYSTEM: "warm the cache on the same machine image (C++ compiler, GPU, CUDA/Triton versions) that reads it",
    THREADS: "run with the warm run's thread count (OMP_NUM_THREADS, torch.set_num_threads), or set "
             "torch._inductor.config.cpp.threads",
    STATE: "set the global state the warm run had (default dtype, deterministic algorithms, matmul precision, "
           "grad mode, autocast)",
    CACHE_TAG: "set the same torch.compiler.config.cache_key_tag in both runs",
    CUSTOM_PASS: "give the custom pass the same uuid() in both runs (or keep it unchanged)",
    OTHER: "make this part the same in both runs, or warm the cache with the new value",
}

_WHY_WORDS = {
    SAME_KEY: lambda m: "the same key as A's, so the entry was not in B's cache: another TORCHINDUCTOR_CACHE_DIR, "
                        "a cleared or evicted cache, or A's compile was never saved",
    GUARD_MISS: lambda m: "the entry was found but its shape guards failed (dynamic shapes)",
    NOT_IN_A: lambda m: "A made no lookup for this graph (a graph only B compiled)",
    NO_PARTS: lambda m: "the key changed, and PyTorch logged no key parts to compare (AOTAutograd logs them only "
                        "with its logger at DEBUG: TORCH_LOGS=+torch._functorch._aot_autograd.autograd_cache)",
    BYPASSED: lambda m: f"the cache was bypassed: {m.after.bypass_reason or 'no reason logged'}",
}


#: Words of PyTorch's bypass reasons (torch 2.13 check_cacheable, CacheabilityValidator) -> what to do.
_BYPASS_TODO = (
    ("freezing", "the caches do not hold frozen graphs: leave torch._inductor.config.freezing off where a warm "
                 "start matters"),
    ("not enabled", "turn the FX graph cache on (torch._inductor.config.fx_graph_cache, "
                    "TORCHINDUCTOR_FX_GRAPH_CACHE=1)"),
    ("Unsupported", "the graph calls something the cache cannot key (a custom op or function without a stable "
                    "hash): register it as a custom op, or accept the compile"),
    ("pickle", "something in the graph or the config cannot be pickled into a key: find it in the reason"),
)


def _bypass_todo(reason: str) -> str:
    for words, todo in _BYPASS_TODO:
        if words in reason:
            return todo
    return "nothing will hit while the reason holds: remove it, or accept the compile"
