"""Text and HTML of a merged (many-rank) report: divergences first, ranks side by side.

Pure: a MultiRankReport in, a string out. No torch, no files.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING

from dynscope._format import plural, rank_ranges, rank_runs
from dynscope._lexicon.wording import resume_label
from dynscope._model.merge import collective_sequence
from dynscope._model.structure import structure_hash
from dynscope._render.blocks import Cell, Column, Listing, Section, Table
from dynscope._render.divergences import detail
from dynscope._render.html_parts import asset, esc
from dynscope._render.section_text import section_lines

if TYPE_CHECKING:
    from dynscope._model import MultiRankReport, Report

#: What each kind of divergence means, in a few words (the page's legend; docs/distributed.md says more).
MEANING = {
    "graph_count": "ranks captured different numbers of graphs",
    "graph_structure": "a graph differs between ranks (ops or shapes)",
    "tensor_metadata": "a graph took inputs of other shapes, dtypes or strides on some ranks",
    "break_sites": "ranks broke the graph at different places",
    "recompiles": "some ranks recompiled where others did not",
    "guards": "the same compile guards on different things",
    "collectives": "collectives inside graphs differ: the job can hang",
    "collective_schedule": "Inductor scheduled a graph's collectives in another order: the job can hang",
    "inductor_tensor_meta": "Inductor compiled a graph's kernels with other shapes, strides or dtypes on some ranks",
    "execution_order": "the compiled graphs ran in another order on some ranks",
    "collective_order": "ranks issue their collectives in a different order (as their graphs ran): the job hangs",
    "cache": "a compile hit Inductor's caches on some ranks and missed on others: those compile longer",
    "compile_time_skew": "some ranks compiled much longer: the others wait",
}


def _ddp_splits(rep: Report) -> int:
    return sum(1 for g in rep.graphs if g.split_by == "ddp_bucket")


def _collective_counts(rep: Report) -> tuple[tuple[str, int], ...]:
    """Each collective inside the rank's graphs and how often, in the order first issued."""
    return tuple(Counter(collective_sequence(rep)).items())


def _collectives(rep: Report) -> str:
    counts = _collective_counts(rep)
    return ", ".join(f"{c} x{n}" for c, n in counts) if counts else "none"


#: Up to this many ranks, one column each; past it, ranks whose columns read the same share one.
PER_RANK_COLUMNS = 8
_LABELS = ("title", "graphs", "of which DDP bucket splits", "graph breaks", "recompiles", "guards",
           "collectives in graphs", "compile time", "torch")


def _same_column(r: Report) -> tuple[object, ...]:
    """What ranks sharing a column must have in common: the values its rows say (title and
    compile time aside: those differ on every rank), the structure of each graph and why it
    was split."""
    return (r.graph_count, _ddp_splits(r), r.break_count, len(r.breaks), r.recompile_count, len(r.guards),
            _collective_counts(r), r.torch_version, tuple(structure_hash(g) for g in r.graphs),
            tuple(g.split_by for g in r.graphs))


def _cells(r: Report) -> list[Cell]:
    """A rank's column, each cell keyed by the value it says (the page marks a row whose
    columns' values differ)."""
    def cell(text: str, value: object) -> Cell:
        return Cell(text, key=repr(value))

    return [
        cell(r.title or "-", (r.title,)),
        cell(str(r.graph_count), r.graph_count),
        cell(str(_ddp_splits(r)), _ddp_splits(r)),
        cell(f"{r.break_count} at {plural(len(r.breaks), 'site')}", (r.break_count, len(r.breaks))),
        cell(str(r.recompile_count), r.recompile_count),
        cell(str(len(r.guards)), len(r.guards)),
        cell(_collectives(r), _collective_counts(r)),
        cell(f"{r.compile_time.total_s:.2f} s", (round(r.compile_time.total_s, 2),)),
        cell(r.torch_version or "-", r.torch_version),
    ]


def rank_columns(m: MultiRankReport) -> list[tuple[str, list[Report]]]:
    """(column heading, the ranks it stands for), in order.

    One column a rank for a small job. For a large one, ranks whose rows and graphs hold the
    same values (:func:`_same_column`; title and compile time aside) share a column, headed
    by their ranks as runs; the columns holding ranks a divergence names come first, so a
    256-rank page opens on the ranks that differ.
    """
    if len(m.reports) <= PER_RANK_COLUMNS:
        return [(f"rank {r.rank}", [r]) for r in m.reports]
    flagged = {r for d in m.divergences for r in d.ranks}
    groups: dict[tuple[object, ...], list[Report]] = {}
    for r in m.reports:
        groups.setdefault(_same_column(r), []).append(r)
    ordered = sorted(groups.values(), key=lambda g: (not any(r.rank in flagged for r in g), -len(g), g[0].rank))
    return [(f"rank {g[0].rank}" if len(g) == 1 else f"ranks {rank_ranges(r.rank for r in g)}", g) for g in ordered]


def rank_rows(m: MultiRankReport, columns: list[tuple[str, list[Report]]] | None = None) -> list[tuple[str, list[Cell]]]:
    """(row label, one cell per column of :func:`rank_columns`) for the side-by-side table."""
    columns = columns if columns is not None else rank_columns(m)
    per_column: list[list[Cell]] = []
    for _, reps in columns:
        cells = _cells(reps[0])
        if len(reps) > 1:
            cells[0] = Cell(plural(len(reps), "rank"), key=repr(tuple(r.title for r in reps)))
            times = [r.compile_time.total_s for r in reps]
            if max(times) - min(times) >= 0.005:
                cells[7] = Cell(f"{min(times):.2f}-{max(times):.2f} s", key=repr((round(min(times), 2), round(max(times), 2))))
        per_column.append(cells)
    return [(label, [col[i] for col in per_column]) for i, label in enumerate(_LABELS)]


def _graph_cell(rep: Report, i: int) -> Cell:
    """A rank's i-th graph: its words, and its structure hash as the hint (the page marks a
    row whose hashes differ); "-" and no hint when it has none."""
    if i >= len(rep.graphs):
        return Cell("-")
    g = rep.graphs[i]
    split = " [DDP bucket split]" if g.split_by == "ddp_bucket" else ""
    h = structure_hash(g)
    return Cell(f"{resume_label(g.frame) or '?'} {g.compile_id}: {plural(g.op_count, 'op')} #{h[:8]}{split}", hint=h,
                key=h)


def agreement(m: MultiRankReport) -> str:
    """What a merged report with no divergence says: that the ranks agree, only when at least
    two were compared."""
    if len(m.reports) < 2:
        return ("One rank read: nothing to compare" + (f" (world size {m.world_size}: the others wrote no log)"
                                                       if m.world_size > len(m.reports) else "") + ".")
    return "No divergences: every rank captured the same graphs, breaks, recompiles, guards and collectives."


_DIVERGENCE_COLUMNS = (Column("kind"), Column("ranks"), Column("what differs"), Column("meaning", only="html"))


def missing_words(m: MultiRankReport) -> tuple[str, ...]:
    """The ranks that wrote nothing read here, said once; () when every rank is read."""
    gaps, count = m.missing
    if not count:
        return ()
    who = f"rank {gaps[0][0]:,}" if count == 1 else "ranks " + rank_runs(gaps, count)
    return (f"{who} of world size {m.world_size:,} wrote no {m.written} (crashed, hung, or saved elsewhere): "
            f"divergences are among the {plural(len(m.reports), 'rank')} read",)


def merged_document(m: MultiRankReport) -> tuple[Section, ...]:
    """Every part of a merged report, in order, built once: the head (ranks, world size, the
    run shown, notes), the divergences (or that the ranks agree), the ranks side by side, their
    graphs in compile order, the files read. The text and the page walk it."""
    head = Section(f"{plural(len(m.reports), 'rank')} of world size {m.world_size}",
                   lead=f"({rank_ranges(m.ranks)})" + (f"; {m.shown}" if m.shown else ""),
                   notes=(*m.notes, *missing_words(m)), key="head")
    rows = tuple((d.kind, rank_ranges(d.ranks), detail(d), MEANING.get(d.kind, "")) for d in m.divergences)
    divergences = Section(
        f"{plural(len(m.divergences), 'divergence')}" if m.divergences else "Divergences",
        (Table(_DIVERGENCE_COLUMNS, rows, said="{0} (ranks {1}): {2}", said_in="text"),) if rows else (),
        key="divergences", tone="bad" if rows else "good" if len(m.reports) > 1 else "", empty=agreement(m))
    columns = rank_columns(m)
    flagged = {r for d in m.divergences for r in d.ranks}
    headings = tuple(Column(h + (" *" if any(r.rank in flagged for r in reps) else "")) for h, reps in columns)
    ranks = Section("Ranks", (Table((Column(""), *headings),
                                    tuple((label, *cells) for label, cells in rank_rows(m, columns))),), key="ranks")
    doc = [head, divergences, ranks]
    most = max((len(r.graphs) for r in m.reports), default=0)
    if most:
        graph_rows = tuple((i, *(_graph_cell(reps[0], i) for _, reps in columns)) for i in range(most))
        doc.append(Section("Graphs, in compile order", (Table((Column("#"), *(Column(h, "code") for h, _ in columns)),
                                                              graph_rows),), key="graphs"))
    if m.sources:
        doc.append(Section("Files", (Listing("", m.sources, len(m.sources), style="bullets"),), key="files"))
    return tuple(doc)


def render_merged_text(m: MultiRankReport) -> str:
    """The terminal summary of a merged report: the head line and its notes, the divergences
    (or that the ranks agree), the ranks side by side, their graphs, the files."""
    head, divergences, *parts = merged_document(m)
    lines = [f"dynscope: {head.title} {head.lead}", *(f"note: {n}" for n in head.notes)]
    if divergences.blocks:
        lines.append(f"{divergences.title}:")
        lines += section_lines(divergences, said_indent="  ")  # said at two spaces, as the notes are
    else:
        lines.append(divergences.empty)
    for section in parts:  # the ranks' table right under the divergences, as its own heading
        lines += ["", *([] if section.key == "ranks" else [f"{section.title}:"]), *section_lines(section)]
    return "\n".join(ln.rstrip() for ln in lines) + "\n"


#: The merged page's style (assets/ranks.css), opening on a new line after <style>.
_CSS = "\n" + asset("ranks.css")


def _rows_html(table: Table, code: bool) -> list[str]:
    """A side-by-side table: a row whose columns differ is marked (its cells, not its label)."""
    out = ["<table><tr>" + "".join(f"<th>{esc(c.header)}</th>" for c in table.columns) + "</tr>"]
    for label, *cells in table.rows:
        keys = {(c.key or c.hint or c.text) if isinstance(c, Cell) else c for c in cells}
        cls = " class='differs'" if len(keys) > 1 else ""
        shown = [f"<code>{esc(str(c))}</code>" if code else esc(str(c)) for c in cells]
        out.append(f"<tr><th>{esc(str(label))}</th>" + "".join(f"<td{cls}>{c}</td>" for c in shown) + "</tr>")
    out.append("</table>")
    return out


def render_merged_html(m: MultiRankReport) -> str:
    """One self-contained page: divergences first, then ranks as columns, then graph by graph."""
    head, divergences, *parts = merged_document(m)
    out = [
        "<!DOCTYPE html><html><head><meta charset='utf-8'>",
        f"<title>dynscope: {len(m.reports)} ranks</title><style>{_CSS}</style></head><body>",
        f"<h1>{esc(head.title)}</h1>",
    ]
    if m.shown:
        out.append(f"<p class='note'><b>{esc(m.shown[:1].upper() + m.shown[1:])}</b></p>")
    out += [f"<p class='note'>{esc(n)}</p>" for n in head.notes]
    out.append(f"<h2 id='{divergences.key}'>{esc(divergences.title)}</h2>")  # the section's own title, as the text says it
    for table in (b for b in divergences.blocks if isinstance(b, Table)):
        out += [f"<div class='div' data-kind='{esc(kind)}'><b>{esc(kind)}</b> (ranks {esc(ranks)}): {esc(said)}"
                f"<br><small>{esc(meaning)}</small></div>" for kind, ranks, said, meaning in table.rows]
    if not divergences.blocks:
        out.append(f"<p class='{'ok' if divergences.tone == 'good' else 'note'}'>{esc(divergences.empty)}</p>")
    for section in parts:
        out.append(f"<h2>{esc(section.title)}</h2>")
        for block in section.blocks:
            if isinstance(block, Table):
                out += _rows_html(block, code=section.key == "graphs")
            elif isinstance(block, Listing):
                out.append("<ul>" + "".join(f"<li><code>{esc(s)}</code></li>" for s in block.items) + "</ul>")
    out.append("</body></html>")
    return "\n".join(out) + "\n"
