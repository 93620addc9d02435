"""Many ranks: each rank's report saved to one folder, merged, and compared.

``save_rank`` writes ``folder/rank-<r>.json``; ``merge`` reads them back into a
:class:`MultiRankReport` whose ``divergences`` say where the ranks compiled differently:
the things that make one rank wait for another in the next collective, or issue a
different collective and hang. No torch import: merging runs anywhere the reports are.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dynscope._model.plain as _plain
from dynscope._errors import InputError, SchemaError
from dynscope._lexicon.wording import resume_label, without_rank_local
from dynscope._model.cache import HIT, compare_lookups
from dynscope._model.causes import SAID
from dynscope._model.ops import called_in_code, collective_name
from dynscope._model.ranks import MERGED_KIND, Divergence, Fact, MultiRankReport, Value
from dynscope._model.report import SCHEMA_VERSION, Report
from dynscope._model.structure import structure_hash

if TYPE_CHECKING:
    from collections.abc import Callable, Hashable, Iterable, Sequence

    from dynscope._model.graph import Graph, TensorMeta

__all__ = [
    "COMPILE_SKEW_S",
    "collective_sequence",
    "collectives_of",
    "issued_in_order",
    "comparable",
    "divergences",
    "is_merged",
    "is_merged_file",
    "load_merged",
    "merge",
    "merge_reports",
    "merged_from_dict",
    "save_rank",
]

#: Default compile-time skew worth a word: the slowest rank compiled this many seconds
#: longer than the fastest (the others wait that long in the next collective).
COMPILE_SKEW_S = 5.0


# -- saving and reading ------------------------------------------------------------------

def save_rank(rep: Report, folder: str | Path) -> Path:
    """Write one rank's report to ``folder/rank-<rank>.json``; returns the path.

    Call it in every rank with the same (shared) folder; ``merge(folder)`` reads them all.
    The folder is made when missing; the write is atomic (a half-written file is never
    read by a rank that merges early).

    Raises:
        InputError: ``rep`` is not a Report, or the folder cannot be written.
    """
    if not isinstance(rep, Report):
        raise InputError(f"save_rank takes a dynscope Report (cap.report, dynscope.report(...)); got {type(rep).__name__}")
    from dynscope._write import ensure_folder

    return _plain.save(rep, ensure_folder(Path(folder)) / f"rank-{rep.rank}.json")


def load_merged(path: str | Path) -> MultiRankReport:
    """Read a merged report written by :meth:`MultiRankReport.save`.

    Raises:
        SchemaError: the file is not a merged dynscope report, or comes from a newer schema.
    """
    p = Path(path)
    try:
        data = json.loads(p.read_text(encoding="utf-8-sig"))
    except (OSError, ValueError) as err:
        raise SchemaError(f"cannot read {p} as JSON: {err}") from None
    return merged_from_dict(data, str(p))


def is_merged(data: Any) -> bool:
    """True when plain data (a JSON file's content) is a merged report."""
    return isinstance(data, dict) and data.get("kind") == MERGED_KIND


def is_merged_file(path: str | Path) -> bool:
    """True when the JSON file at ``path`` is a merged report (read from its first bytes:
    ``MultiRankReport.save`` writes ``kind`` first)."""
    try:
        with open(path, "rb") as f:
            head = f.read(256).decode("utf-8", "replace")
    except OSError:
        return False
    return re.match(r'\ufeff?\s*\{\s*"kind"\s*:\s*"' + MERGED_KIND + '"', head) is not None


def merged_from_dict(data: Any, where: str = "merged report") -> MultiRankReport:
    """Rebuild a MultiRankReport from :meth:`MultiRankReport.to_dict` output."""
    from dynscope._model.codec import from_plain

    if not is_merged(data):
        raise SchemaError(f"{where}: not a merged dynscope report (no \"kind\": \"{MERGED_KIND}\"); "
                          "a single rank's report is read with dynscope.load")
    version = data.get("schema_version")
    if type(version) is not int or version > SCHEMA_VERSION:
        raise SchemaError(f"{where}: schema version {version!r} is newer than this dynscope reads "
                          f"({SCHEMA_VERSION}); upgrade dynscope")
    try:
        return from_plain(MultiRankReport, data)
    except SchemaError as err:
        raise SchemaError(f"{where}: {err}") from None


def _files(paths: str | Path | Iterable[str | Path]) -> list[Path]:
    if isinstance(paths, (str, Path)):
        p = Path(paths)
        if p.is_dir():
            found = sorted(p.glob("rank-*.json"))
            if not found:
                raise InputError(
                    f"{p} holds no rank-*.json files: each rank writes one with "
                    f"dynscope.save_rank(report, {str(p)!r})"
                )
            return found
        files = [p]
    else:
        files = [Path(x) for x in paths]
    if not files:
        raise InputError("merge needs a folder of rank-*.json files or a list of report files; got an empty list")
    for f in files:
        if f.is_dir():
            raise InputError(f"{f} is a folder; pass the folder alone (merge(folder)) or a list of report files")
        if not f.exists():
            raise InputError(f"no such report file: {f}")
    return files


def merge(paths: str | Path | Iterable[str | Path], *, compile_skew_s: float = COMPILE_SKEW_S) -> MultiRankReport:
    """Merge the reports of a job's ranks and find where they diverge.

    Args:
        paths: a folder of ``rank-<r>.json`` files (written by :func:`save_rank`), or a
            list of report files.
        compile_skew_s: seconds of compile time between the fastest and the slowest rank
            that count as a ``compile_time_skew`` divergence. Defaults to 5.0.

    Returns:
        A :class:`MultiRankReport`; its ``divergences`` are empty when every rank compiled
        the same.

    Raises:
        InputError: no reports, two reports of one rank, or reports of jobs of different
            world sizes (the message names the files).
        SchemaError: a file is not a dynscope report.
    """
    from dynscope._model.codec import load

    files = _files(paths)
    return merge_reports([(load(f), str(f)) for f in files], compile_skew_s=compile_skew_s)


def merge_reports(
    loaded: list[tuple[Report, str]],
    *,
    compile_skew_s: float = COMPILE_SKEW_S,
    duplicate_hint: str = "",
    written: str = "report",
) -> MultiRankReport:
    """Merge reports already read (each with the file it came from): :func:`merge`'s work.

    Args:
        loaded: (report, source) per rank, in any order.
        compile_skew_s: as in :func:`merge`.
        duplicate_hint: what to say when two reports are of one rank. Defaults to the
            advice for saved reports (init_process_group before capture).
        written: what each rank wrote ("report", "trace log"): said of the ranks missing.
            Defaults to "report".

    Raises:
        InputError: no reports, two of one rank, or reports of different world sizes.
    """
    if not loaded:
        raise InputError("merge needs at least one report")
    sizes = {rep.world_size for rep, _ in loaded}
    if len(sizes) > 1:
        listed = ", ".join(f"{Path(src).name} (world size {rep.world_size})" for rep, src in loaded)
        raise InputError(f"reports come from jobs of different sizes: {listed}; merge the reports of one job")
    seen: dict[int, str] = {}
    for rep, src in loaded:
        if rep.rank in seen:
            raise InputError(
                f"rank {rep.rank} appears twice: {seen[rep.rank]} and {src}. "
                + (duplicate_hint or (
                    "Each rank saves its own report; if every file says rank 0, torch.distributed was "
                    "not initialised when the reports were made (init_process_group before dynscope.capture)"
                ))
            )
        seen[rep.rank] = src
    loaded = sorted(loaded, key=lambda item: item[0].rank)
    world = sizes.pop()
    reports = tuple(rep for rep, _ in loaded)
    return MultiRankReport(
        reports=reports,
        divergences=divergences(reports, compile_skew_s=compile_skew_s),
        world_size=world,
        sources=tuple(src for _, src in loaded),
        written=written,
    )


# -- divergences -------------------------------------------------------------------------

def _groups(reports: Sequence[Report], key: Callable[[Report], Hashable]) -> list[list[Report]]:
    """Reports grouped by ``key``; the majority first (the group of the lowest rank on a tie)."""
    by: dict[Hashable, list[Report]] = {}
    for rep in reports:
        by.setdefault(key(rep), []).append(rep)
    return sorted(by.values(), key=lambda g: (-len(g), min(r.rank for r in g)))


def _minority(groups: list[list[Report]]) -> tuple[int, ...]:
    return tuple(sorted(r.rank for g in groups[1:] for r in g))


def _ranks_of(group: Sequence[Report]) -> tuple[int, ...]:
    return tuple(r.rank for r in group)


def _name(graph: Graph) -> str:
    return resume_label(graph.frame) or "a graph"


def _graph_count(reports: Sequence[Report]) -> list[Divergence]:
    groups = _groups(reports, lambda r: r.graph_count)
    if len(groups) < 2:
        return []
    ref = groups[0]
    facts = [Fact("captured", _ranks_of(g), (g[0].graph_count,)) for g in groups[1:]]
    facts.append(Fact("captured_ref", _ranks_of(ref), (ref[0].graph_count,)))
    return [Divergence("graph_count", _minority(groups), facts=tuple(facts))]


def _graph_said(graph: Graph) -> tuple[Value, ...]:
    """A graph as a fact's values: its name, whether DDP split it, how many ops, how many of
    them are shown, those (the first 8), then its inputs ("Mlp.forward [DDP bucket split]:
    linear, relu on f32[8, 512]")."""
    ops = [n.target.split(".")[-1] for n in graph.nodes if n.is_op] or [t.split(".")[-1] for t, _ in graph.op_counts]
    user, _ = graph.user_inputs()
    shown = ops[:8]
    return (_name(graph), graph.split_by == "ddp_bucket", len(ops), len(shown), *shown, *(m.describe() for m in user))


def _graph_structure(reports: Sequence[Report]) -> list[Divergence]:
    # The first graph that differs is what to look at; later ones usually follow from it.
    found = _first_differing(reports, structure_hash)
    if found is None:
        return []
    i, groups = found
    ref = groups[0]
    facts = [Fact("made_graph", _ranks_of(g), (i, *_graph_said(g[0].graphs[i]))) for g in groups[1:]]
    facts.append(Fact("made_graph_ref", _ranks_of(ref), _graph_said(ref[0].graphs[i])))
    if all(_graph_said(g[0].graphs[i]) == _graph_said(ref[0].graphs[i]) for g in groups[1:]):
        # The same ops on the same inputs: say the first node whose result differs (a dtype).
        for g in groups[1:]:
            facts += _first_node_difference(g[0].graphs[i], ref[0].graphs[i], _ranks_of(g), _ranks_of(ref))
    return [Divergence("graph_structure", _minority(groups), facts=tuple(facts))]


def _first_node_difference(mine: Graph, theirs: Graph, my_ranks: tuple[int, ...],
                           their_ranks: tuple[int, ...]) -> list[Fact]:
    """The first node whose result differs ("first difference: linear (node 3) gives f16[8, 32]
    on rank 1, f32[8, 32] on rank 0"), or the first input; none when all agree."""
    for k, (a, b) in enumerate(zip(mine.nodes, theirs.nodes, strict=False)):
        ours, other = ", ".join(m.describe() for m in a.outputs), ", ".join(m.describe() for m in b.outputs)
        if a.target != b.target or ours != other:
            name = a.target.split(".")[-1] if a.is_op else a.name
            return [Fact("node_differs", my_ranks, (name, k, ours, other), their_ranks)]
    for k, (a_in, b_in) in enumerate(zip(mine.inputs, theirs.inputs, strict=False)):
        # A graph known only from the trace has no nodes: its inputs (weights included) tell.
        if a_in.describe() != b_in.describe():
            return [Fact("input_differs", my_ranks, (k, a_in.describe(), b_in.describe()), their_ranks)]
    return []


def _site(rep: Report) -> frozenset[tuple[str, str]]:
    return frozenset((b.location, b.reason) for b in rep.breaks)


def _break_sites(reports: Sequence[Report]) -> list[Divergence]:
    groups = _groups(reports, _site)
    if len(groups) < 2:
        return []
    ref, ref_sites = groups[0], _site(groups[0][0])
    facts = []
    for g in groups[1:]:
        sites = _site(g[0])
        extra = sorted(sites - ref_sites)
        lacking = sorted(ref_sites - sites)
        if extra:
            facts.append(Fact("broke_at", _ranks_of(g), tuple(x for site in extra for x in site), _ranks_of(ref)))
        if lacking:
            facts.append(Fact("broke_at", _ranks_of(ref), tuple(x for site in lacking for x in site), _ranks_of(g)))
    return [Divergence("break_sites", _minority(groups), facts=tuple(facts))]


RecompileKey = tuple[tuple[str, tuple[object, ...]], ...]


def _said_only(rep: Report) -> bool:
    """Whether the report was saved before causes were fields: its recompiles carry only
    the words they were explained in (kind SAID)."""
    return any(not r.fixes and r.causes and all(c.kind == SAID for c in r.causes) for r in rep.recompiles)


def _recompile_key(rep: Report, by_words: bool = False) -> RecompileKey:
    # Changes carry no values, so two ranks that recompiled for the same reason with
    # different sizes agree; a recompile PyTorch gave no cause for is keyed by its failed
    # guards with their values (``causes``). Beside a rank file saved before causes were
    # fields (dynscope's words only), every rank is keyed by PyTorch's failed guards as it
    # logged them, which every kind of file keeps alike: else the older file alone would seem
    # to diverge, and comparing words would need the renderer to say the newer file's causes.
    if by_words:
        return tuple((r.frame, r.raw_reasons) for r in rep.recompiles)
    return tuple((r.frame, r.changes or r.causes) for r in rep.recompiles)


def _recompile_words(rep: Report, known: set[tuple[str, tuple[object, ...]]], by_words: bool) -> tuple[Value, ...]:
    """Each recompile of ``rep`` not in ``known``: its function, compile id and failed guards
    (its causes; PyTorch's own words where it has none, "" where PyTorch gave none)."""
    mine = _recompile_key(rep, by_words)
    return tuple(
        x
        for r, key in zip(rep.recompiles, mine, strict=True)
        if key not in known
        for x in (resume_label(r.frame), r.compile_id, r.causes or "; ".join(r.raw_reasons))
    )


def _recompiles(reports: Sequence[Report]) -> list[Divergence]:
    by_words = any(_said_only(r) for r in reports)  # all words-only: the same as by cause
    groups = _groups(reports, lambda rep: _recompile_key(rep, by_words))
    if len(groups) < 2:
        return []
    ref = groups[0]
    ref_keys = set(_recompile_key(ref[0], by_words))
    facts = []
    for g in groups[1:]:
        keys = set(_recompile_key(g[0], by_words))
        mine = _recompile_words(g[0], ref_keys, by_words)
        if mine:
            facts.append(Fact("recompiled", _ranks_of(g), mine, _ranks_of(ref)))
        theirs = _recompile_words(ref[0], keys, by_words)
        if theirs:
            facts.append(Fact("recompiled", _ranks_of(ref), theirs, _ranks_of(g)))
        if not mine and not theirs:
            facts.append(Fact("reordered", _ranks_of(g), (), _ranks_of(ref)))
    return [Divergence("recompiles", _minority(groups), facts=tuple(facts))]


def _guard_set(rep: Report, cids: set[str]) -> Counter[tuple[str, str, str, str]]:
    # Device indices, object ids, addresses, user-line comments and latencies differ between
    # the ranks of a clean job: compared without them, a CUDA job's ranks agree.
    return Counter(
        (g.compile_id, g.kind, without_rank_local(g.source), without_rank_local(g.detail))
        for g in rep.guards if g.compile_id in cids
    )


def _guards(reports: Sequence[Report]) -> list[Divergence]:
    # Only compiles every rank made: a compile one rank alone made (a recompile) is
    # already a recompiles divergence.
    cids = set.intersection(*({g.compile_id for g in r.guards} for r in reports))
    sets = {r.rank: _guard_set(r, cids) for r in reports}
    groups = _groups(reports, lambda r: frozenset(sets[r.rank].items()))
    if len(groups) < 2:
        return []
    ref = groups[0]
    facts = []
    for g in groups[1:]:
        extra = sorted((sets[g[0].rank] - sets[ref[0].rank]).elements())
        lacking = sorted((sets[ref[0].rank] - sets[g[0].rank]).elements())
        if extra:
            facts.append(Fact("guard", _ranks_of(g), extra[0]))
        if lacking:
            facts.append(Fact("guard", _ranks_of(ref), lacking[0]))
        more = max(len(extra), len(lacking)) - 1
        if more > 0:
            facts.append(Fact("more_guards", (), (more,)))
    return [Divergence("guards", _minority(groups), facts=tuple(facts))]


def collectives_of(graph: Graph) -> tuple[str, ...]:
    """The collectives a graph issues, in graph order ("all_reduce", "all_gather_into_tensor"...)."""
    targets = [n.target for n in graph.nodes if n.is_op] if graph.nodes else called_in_code(graph.code)
    return tuple(c for c in map(collective_name, targets) if c)


def collective_sequence(rep: Report) -> tuple[str, ...]:
    """Every collective inside the report's graphs, in compile order then graph order."""
    return tuple(c for g in rep.graphs for c in collectives_of(g))


def _collectives(reports: Sequence[Report]) -> list[Divergence]:
    groups = _groups(reports, collective_sequence)
    if len(groups) < 2:
        return []

    ref = groups[0]
    facts = [Fact("issue", _ranks_of(g), collective_sequence(g[0])) for g in groups[1:]]
    facts.append(Fact("issue_ref", _ranks_of(ref), collective_sequence(ref[0])))
    return [Divergence("collectives", _minority(groups), facts=tuple(facts))]


def _first_differing(
    reports: Sequence[Report], key: Callable[[Graph], Hashable], positions: Iterable[int] | None = None,
) -> tuple[int, list[list[Report]]] | None:
    """The first graph position (of ``positions``; default: every position all ranks have)
    whose ``key`` differs between ranks, and the ranks grouped by it."""
    for i in range(min(len(r.graphs) for r in reports)) if positions is None else positions:

        def at(rep: Report, i: int = i) -> Hashable:
            return key(rep.graphs[i])

        groups = _groups(reports, at)
        if len(groups) > 1:
            return i, groups
    return None


def _first_graph(reports: Sequence[Report], kind: str, key: Callable[[Graph], Hashable],
                 said: Callable[[Graph], tuple[Value, ...]], what: str) -> list[Divergence]:
    """The first graph, by position, whose ``key`` differs between ranks: facts ``what`` (the
    graph, then ``said``), ``what``_ref for the majority, and why it matters (why_``kind``)."""
    found = _first_differing(reports, key)
    if found is None:
        return []
    i, groups = found
    ref = groups[0]
    facts = [Fact(what, _ranks_of(g), (i, _name(g[0].graphs[i]), *said(g[0].graphs[i]))) for g in groups[1:]]
    facts += [Fact(f"{what}_ref", _ranks_of(ref), said(ref[0].graphs[i])), Fact(f"why_{what}")]
    return [Divergence(kind, _minority(groups), facts=tuple(facts))]


def _meta_key(graph: Graph) -> tuple[tuple[str, tuple[int | str, ...], str, tuple[int | str, ...]], ...]:
    # The device is rank-local (cuda:0, cuda:1): shapes, dtypes and strides are what must agree.
    return tuple(_meta_key_one(m) for m in graph.inputs)


def _tensor_metadata(reports: Sequence[Report]) -> list[Divergence]:
    # Only graphs whose structure agrees on every rank: where the ops or shapes differ,
    # graph_structure already says so; what is left is a stride or layout of its own.
    same = [i for i in range(min(len(r.graphs) for r in reports))
            if len({structure_hash(r.graphs[i]) for r in reports}) == 1]
    found = _first_differing(reports, _meta_key, same)
    if found is None:
        return []
    i, groups = found
    ref = groups[0][0].graphs[i]

    def meta(m: TensorMeta) -> str:
        return m.describe() + (f" strides {list(m.stride)}" if m.stride else "")

    facts = []
    for g in groups[1:]:
        mine = g[0].graphs[i]
        diff = [k for k, (a, b) in enumerate(zip(mine.inputs, ref.inputs, strict=False)) if _meta_key_one(a) != _meta_key_one(b)]
        k = diff[0] if diff else min(len(mine.inputs), len(ref.inputs))
        ours = meta(mine.inputs[k]) if k < len(mine.inputs) else "no such input"
        theirs = meta(ref.inputs[k]) if k < len(ref.inputs) else "no such input"
        facts.append(Fact("input_as", _ranks_of(g), (i, _name(mine), k, ours, theirs), _ranks_of(groups[0])))
    return [Divergence("tensor_metadata", _minority(groups), facts=tuple(facts))]


def _meta_key_one(m: TensorMeta) -> tuple[str, tuple[int | str, ...], str, tuple[int | str, ...]]:
    return (m.kind, m.shape, m.dtype, m.stride)


def _schedule(graph: Graph) -> tuple[str, ...]:
    return graph.lowering.collective_schedule if graph.lowering is not None else ()


def _collective_schedule(reports: Sequence[Report]) -> list[Divergence]:
    def said(g: Graph) -> tuple[Value, ...]:
        return tuple(".".join(c.split(".")[-2:-1]) or c for c in _schedule(g))

    return _first_graph(reports, "collective_schedule", _schedule, said, "runs")


def _runtime_meta(graph: Graph) -> str:
    return graph.lowering.runtime_meta if graph.lowering is not None else ""


def _inductor_tensor_meta(reports: Sequence[Report]) -> list[Divergence]:
    """Inductor's logged runtime estimates and tensor metadata of a graph differ between
    ranks (tlparse's "tensor meta" check): only where every rank logged them."""
    # Only graphs every rank logged it for: a rank that logged none says nothing of its kernels.
    logged = [i for i in range(min(len(r.graphs) for r in reports)) if all(_runtime_meta(r.graphs[i]) for r in reports)]
    found = _first_differing(reports, _runtime_meta, logged)
    if found is None:
        return []
    i, groups = found
    facts = [Fact("kernels_differ", _ranks_of(g), (i, _name(g[0].graphs[i])), _ranks_of(groups[0])) for g in groups[1:]]
    facts.append(Fact("why_inductor_meta"))
    return [Divergence("inductor_tensor_meta", _minority(groups), facts=tuple(facts))]


def _cache_key(graph: Graph) -> tuple[tuple[str, str, str], ...]:
    return graph.lowering.cache if graph.lowering is not None else ()


def _cache(reports: Sequence[Report]) -> list[Divergence]:
    def said(g: Graph) -> tuple[Value, ...]:
        lookups = _cache_key(g)  # how many, then each lookup's cache, AOT graph and result
        return (len(lookups), *(x for lookup in lookups for x in lookup))

    found = _first_graph(reports, "cache", _cache_key, said, "cache") or _cache_counts(reports)
    why = _cache_why(reports) if found else []
    return [replace(d, facts=(*d.facts, *why)) for d in found]


#: The key parts a cross-rank cache fact names (the rest are in ``dynscope cache-diff``); the
#: groups of ranks that missed it explains, and the groups that hit it compares each with.
CHANGES_SAID, CACHE_GROUPS_SAID, CACHE_REFS = 3, 8, 2


def _cache_why(reports: Sequence[Report]) -> list[Fact]:
    """Why ranks missed a cache lookup other ranks hit: for each group of ranks with the same
    lookups and results, its first miss of a graph a rank of another group hit, and the key
    parts that differ (``compare_lookups``, as ``cache_diff`` compares two runs). Args: the
    compile, the cache, why (PARTS_DIFFER, SAME_KEY...), then (family, name, field, before,
    after) for the first CHANGES_SAID parts."""
    # Ranks that looked up the same keys with the same results missed for the same reason.
    def results(rep: Report) -> tuple[tuple[str, str, int, str, str], ...]:
        return tuple((lk.compile_id, lk.cache, lk.ordinal, lk.result, lk.key) for lk in rep.cache_lookups)

    groups = _groups(reports, results)
    # Bounded for a large job whose keys are rank-local (a device index in every key: one
    # group a rank): the first groups that missed, each against the first groups that hit.
    hitting = [g for g in groups if any(lk.result == HIT for lk in g[0].cache_lookups)][:CACHE_REFS]
    missing = [g for g in groups if any(lk.result != HIT for lk in g[0].cache_lookups)][:CACHE_GROUPS_SAID]
    facts = []
    for g in missing:
        for ref in hitting:
            if ref is g:
                continue
            miss = next((m for m in compare_lookups(ref[0].cache_lookups, g[0].cache_lookups).misses
                         if m.before is not None and m.before.result == HIT), None)
            if miss is None:
                continue
            parts = tuple(x for c in miss.changes[:CHANGES_SAID] for x in (c.family, c.name, c.field, c.before, c.after))
            facts.append(Fact("cache_why", _ranks_of(g), (miss.compile_id, miss.cache, miss.why, len(miss.changes),
                                                           *parts), _ranks_of(ref)))
            break  # one explanation a group: the ranks that hit, the first that did
    # Groups explained alike (the same miss, the same parts, against the same ranks) are one fact.
    alike: dict[tuple[object, ...], Fact] = {}
    for f in facts:
        key = (f.args, f.others)
        alike[key] = replace(alike[key], ranks=alike[key].ranks + f.ranks) if key in alike else f
    return list(alike.values())


def _cache_counts(reports: Sequence[Report]) -> list[Divergence]:
    """Where every graph the ranks have in common hit and missed alike, the ranks' cache
    results in all: a rank that compiled more graphs looked them up (and missed) more."""
    def results(rep: Report) -> tuple[tuple[str, str, str], ...]:
        return tuple(r for g in rep.graphs for r in _cache_key(g))

    groups = _groups(reports, results)
    if len(groups) < 2:
        return []

    def said(g: list[Report]) -> Fact:
        found = results(g[0])
        counts = Counter(status for _, _, status in found)
        return Fact("cache_results", _ranks_of(g),
                    (len(found), len(g[0].graphs), *(x for s, n in sorted(counts.items()) for x in (s, n))))

    facts = [said(g) for g in groups[1:]] + [said(groups[0]), Fact("why_cache_results")]
    return [Divergence("cache", _minority(groups), facts=tuple(facts))]


def _execution_order(reports: Sequence[Report]) -> list[Divergence]:
    logged = [r for r in reports if r.execution_order]
    if len(logged) < 2:
        return []
    groups = _groups(logged, lambda r: r.execution_order)
    if len(groups) < 2:
        return []
    ref = groups[0]
    facts = []
    for g in groups[1:]:
        mine, theirs = g[0].execution_order, ref[0].execution_order
        at = next((k for k, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a != b), min(len(mine), len(theirs)))
        ran = mine[at] if at < len(mine) else None  # None: no graph run there
        other = theirs[at] if at < len(theirs) else None
        facts.append(Fact("ran_compile", _ranks_of(g), (at, ran, other), _ranks_of(ref)))
    return [Divergence("execution_order", _minority(groups), facts=tuple(facts))]


def _issued(rep: Report, compile_id: str) -> tuple[str, ...]:
    """The collectives one run of a compile issues, in the order issued: Inductor's schedule
    of its graphs when logged (what the compiled code calls), else the graphs' nodes."""
    out: list[str] = []
    for g in rep.graphs:
        if g.compile_id == compile_id:
            sched = tuple(c for c in map(collective_name, _schedule(g)) if c)
            out += sched or collectives_of(g)
    return tuple(out)


def issued_in_order(rep: Report) -> tuple[tuple[str, int, str], ...]:
    """Every collective the rank issued, in the order its compiled graphs ran (Inductor's
    ``graph_execution`` record): (collective, graph run from 1, compile id) each; () when
    the run order was not logged."""
    memo: dict[str, tuple[str, ...]] = {}
    out: list[tuple[str, int, str]] = []
    for run, cid in enumerate(rep.execution_order, 1):
        if cid not in memo:
            memo[cid] = _issued(rep, cid)
        out += [(c, run, cid) for c in memo[cid]]
    return tuple(out)


def _collective_order(reports: Sequence[Report]) -> list[Divergence]:
    # The collectives each rank issues as its graphs ran, compared position by position: a
    # rank that runs the same graphs in another order issues the same collectives in another
    # order, and each waits in a collective the other has not reached.
    logged = [r for r in reports if r.execution_order]
    if len(logged) < 2:
        return []
    seqs = {r.rank: issued_in_order(r) for r in logged}
    if not any(seqs.values()):
        return []
    groups = _groups(logged, lambda r: tuple(c for c, _, _ in seqs[r.rank]))
    if len(groups) < 2:
        return []
    ref = groups[0]
    theirs = seqs[ref[0].rank]
    facts = [Fact("order_head")]
    for g in groups[1:]:
        mine = seqs[g[0].rank]
        at = next((k for k, (a, b) in enumerate(zip(mine, theirs, strict=False)) if a[0] != b[0]),
                  min(len(mine), len(theirs)))

        def said(seq: tuple[tuple[str, int, str], ...], at: int = at) -> tuple[Value, ...]:
            # (collective, graph run, compile id, how many in all); no collective: "" there
            return (*seq[at], len(seq)) if at < len(seq) else ("", 0, "", len(seq))

        facts.append(Fact("issues_as", _ranks_of(g), (at, *said(mine), *said(theirs)), _ranks_of(ref)))
    facts.append(Fact("why_order"))
    return [Divergence("collective_order", _minority(groups), facts=tuple(facts))]


def _compile_skew(reports: Sequence[Report], skew_s: float) -> list[Divergence]:
    times = {r.rank: r.compile_time.total_s for r in reports}
    fastest = min(times.values())
    slow = sorted(r for r, t in times.items() if t - fastest >= skew_s)
    if not slow:
        return []
    quick = tuple(sorted(r for r in times if r not in slow))
    facts = [Fact("spent", (r,), (times[r],)) for r in slow] + [Fact("spent_ref", quick, (fastest,))]
    return [Divergence("compile_time_skew", tuple(slow), facts=tuple(facts))]


def comparable(rep: Report) -> tuple[object, ...]:
    """Everything :func:`divergences` compares in one compile's report, rank-local values left
    out: two ranks whose ``comparable`` agree show none of the kinds a compile decides
    (``watch_ranks`` sends its digest first and the whole report only when digests differ)."""
    cids = {g.compile_id for g in rep.guards}
    return (
        rep.graph_count,
        tuple((structure_hash(g), _meta_key(g), collectives_of(g), _schedule(g)) for g in rep.graphs),
        tuple(sorted(_site(rep))),
        _recompile_key(rep),
        tuple(sorted(_guard_set(rep, cids).items())),
    )


def divergences(reports: Sequence[Report], *, compile_skew_s: float = COMPILE_SKEW_S) -> tuple[Divergence, ...]:
    """How the ranks' reports differ, in :data:`KINDS` order (empty for fewer than two)."""
    if len(reports) < 2:
        return ()
    found: list[Divergence] = []
    found += _graph_count(reports)
    found += _graph_structure(reports)
    found += _tensor_metadata(reports)
    found += _break_sites(reports)
    found += _recompiles(reports)
    found += _guards(reports)
    found += _collectives(reports)
    found += _collective_schedule(reports)
    found += _inductor_tensor_meta(reports)
    found += _execution_order(reports)
    found += _collective_order(reports)
    found += _cache(reports)
    found += _compile_skew(reports, compile_skew_s)
    return tuple(found)
