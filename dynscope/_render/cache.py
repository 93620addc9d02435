"""The compile caches in words: a changed key part, a miss, two runs compared.

The model holds the fields (``dynscope._model.cache``: ``PartChange``'s family, name, field,
before and after; ``CacheMiss``'s why); these functions are the only place they become
sentences. ``PartChange.what``/``todo``, ``CacheMiss.head()``/``lines()`` and
``CacheDiff.summary()`` reach them through the render door.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from dynscope._model.cache import (
    AOT_AUTOGRAD,
    AUTOGRAD_CONFIG,
    BYPASS,
    BYPASSED,
    CACHE_TAG,
    COMPILE_OPTION,
    CUSTOM_PASS,
    FROM_FX,
    FX_GRAPH,
    GRAPH,
    GUARD_MISS,
    HIT,
    INDUCTOR_CONFIG,
    INPUT,
    NO_PARTS,
    NOT_IN_A,
    OTHER,
    PARTS_DIFFER,
    SAME_KEY,
    STATE,
    SYSTEM,
    THREADS,
    TORCH,
)

if TYPE_CHECKING:
    from dynscope._model.cache import CacheDiff, CacheMiss, PartChange

__all__ = ["CACHE_WORDS", "bypass_todo", "change_todo", "change_what", "diff_summary", "miss_head", "miss_lines"]

CACHE_WORDS = {FX_GRAPH: "Inductor's FX graph cache", AOT_AUTOGRAD: "AOTAutograd's cache"}


def _short(value: str) -> str:
    return value.replace("torch.", "") if value else "(absent)"


def change_what(c: PartChange) -> str:
    """The change, in words (``PartChange.what``)."""
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


def bypass_todo(reason: str) -> str:
    """What to do about a bypass, by the words of PyTorch's reason."""
    for words, todo in _BYPASS_TODO:
        if words in reason:
            return todo
    return "nothing will hit while the reason holds: remove it, or accept the compile"


def change_todo(c: PartChange) -> str:
    """What to do so that run B hits, in words (``PartChange.todo``)."""
    return _TODO.get(c.family, _TODO[OTHER])


def _cost(miss: CacheMiss) -> str:
    return f" ({miss.seconds:.2f} s)" if miss.seconds is not None else ""


def miss_head(miss: CacheMiss) -> str:
    """Which compile, which cache, what happened and what it cost, in words (no cause)."""
    where = f"{miss.compile_id} {miss.after.frame}".strip()
    after = miss.after
    said = f": {after.bypass_reason}" if after.result == BYPASS and after.bypass_reason else ""
    return f"{where}: {CACHE_WORDS.get(miss.cache, miss.cache)} {after.result}{_cost(miss)}{said}"


def miss_lines(miss: CacheMiss) -> list[str]:
    """The miss in words: a head line, then one line per change and what to do."""
    where = f"{miss.compile_id} {miss.after.frame}".strip()
    was = "hit" if miss.before is not None and miss.before.result == HIT else "filled the cache"
    head = f"{where}: {CACHE_WORDS.get(miss.cache, miss.cache)} {miss.after.result} in B{_cost(miss)}"
    if miss.why not in (PARTS_DIFFER, FROM_FX):
        out = [f"{head}: {_WHY_WORDS[miss.why](miss)}"]
        if miss.why == BYPASSED:
            out.append(f"    what to do: {bypass_todo(miss.after.bypass_reason)}")
        return out
    told = " (as the FX graph cache's lookup in this compile logs them: AOTAutograd logged none)" \
        if miss.why == FROM_FX else ""
    out = [f"{head}, where A {was}: {len(miss.changes)} part(s) of the key changed{told}"]
    torch_change = next((c for c in miss.changes if c.family == TORCH), None)
    if torch_change is not None:
        # another torch: the rest (new options, other versions) follows from it
        rest = Counter(c.family for c in miss.changes if c.family != TORCH)
        out += [f"  - {change_what(torch_change)}", f"    what to do: {change_todo(torch_change)}"]
        if rest:
            out.append("    (and, as between releases, " + ", ".join(
                f"{n} {family.replace('_', ' ')}" for family, n in sorted(rest.items())) + " part(s))")
        return out
    told_todo: set[str] = set()  # what to do, once per family
    for c in miss.changes:
        out.append(f"  - {change_what(c)}")
        todo = change_todo(c)
        if todo not in told_todo:
            told_todo.add(todo)
            out.append(f"    what to do: {todo}")
    return out


def diff_summary(diff: CacheDiff) -> str:
    """The comparison as text: each run's results, then each miss in B and why."""
    def results(run: str) -> str:
        c = diff.counts(run)
        return ", ".join(f"{n} {cache} {result}" for (cache, result), n in sorted(c.items())) or "no cache lookups logged"
    out = [f"A: {diff.a}", f"   {results('a')}", f"B: {diff.b}", f"   {results('b')}"]
    if diff.seconds_saved_b:
        out.append(f"B's hits saved {diff.seconds_saved_b:.2f} s of compiling")
    if not diff.misses:
        out.append("B missed nothing A had: no cause to name." if diff.lookups_b else
                   "B logged no cache lookups (Inductor off, caches disabled, or lowering not in the log).")
    for miss in diff.misses:
        out += miss_lines(miss)
    return "\n".join(out)
