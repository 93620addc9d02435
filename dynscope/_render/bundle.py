"""Write a report bundle to a folder: the one place that lays files out.

It calls the codec and the renderers themselves (never the model's shortcuts such as
``Report.save()`` or ``summary()``, which lead back up here through the render door).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from dynscope._errors import GraphvizNotFoundError
from dynscope._model import plain
from dynscope._progress import Progress
from dynscope._render.html import render_html
from dynscope._render.pictures import Pictures, lay_out
from dynscope._render.svg import have_graphviz
from dynscope._render.text import render_summary
from dynscope._write import ensure_folder, write_text

if TYPE_CHECKING:
    from dynscope._model import MultiRankReport, Report

#: AOT graph kinds that get a picture file (graph_<id>_<kind>.svg). A fixed list: the kind
#: comes from the report's data and must never make a path.
_AOT_KINDS = ("forward", "backward", "inference")

#: Names of the picture files the bundle writes; only these are ever removed as stale.
_PICTURE = re.compile(r"graph_\d+(?:_(?:forward|backward|inference))?\.svg|program\.svg")


def render_bundle(rep: Report, folder: Path, *, full: bool = False, progress: bool | None = None) -> Path:
    """Write the report's files to ``folder`` and return it.

    Always: report.json, summary.txt, index.html. With Graphviz's ``dot`` installed also
    program.svg, graph_<id>.svg and, for graphs Inductor lowered, their AOT graphs
    graph_<id>_forward.svg / graph_<id>_backward.svg (or graph_<id>_inference.svg), inlined
    in index.html as well, except graph pictures over ``INLINE_SVG_MAX`` characters: the
    page shows those from their file on demand (its CSP lets <img> load the folder's own
    files); without Graphviz the page says how to install it. Each file is
    replaced atomically; pictures this bundle wrote before that are not part of this report
    (graph_<id>.svg of a graph it no longer has) are removed, and no other file in the
    folder is touched. A ``dot`` that is installed but does not work counts as a missing one: the
    page says what failed in place of the pictures, and no picture file is written.

    Raises:
        InputError: ``folder`` is a file, or a folder that cannot be written.
    """
    folder = ensure_folder(Path(folder))
    written: set[str] = set()
    plain.save(rep, folder / "report.json")
    write_text(folder / "summary.txt", render_summary(rep, color=False))
    pictures = _pictures(rep, full=full, progress=progress) if have_graphviz() else None
    if isinstance(pictures, Pictures):
        program_svg, graph_svgs, aot_svgs = pictures.as_tuple()
        written.add(write_text(folder / "program.svg", program_svg).name)
        for gid, svg in graph_svgs.items():
            written.add(write_text(folder / f"graph_{gid}.svg", svg).name)
        for (gid, kind), svg in aot_svgs.items():
            if kind in _AOT_KINDS:
                written.add(write_text(folder / f"graph_{gid}_{kind}.svg", svg).name)
        page = render_html(rep, program_svg=program_svg, graph_svgs=graph_svgs, aot_svgs=aot_svgs,
                           picture_files=True, picture_notes=pictures.notes)
    else:
        page = render_html(rep, pictures_note=pictures or "")
    write_text(folder / "index.html", page)
    for old in folder.iterdir():
        if _PICTURE.fullmatch(old.name) and old.name not in written and old.is_file():
            old.unlink()
    return folder


def render_merged_bundle(merged: MultiRankReport, folder: Path) -> Path:
    """Write a merged job's merged.json (rank by rank) and index.html to ``folder``; return it.

    Raises:
        InputError: ``folder`` is a file, or a folder that cannot be written.
    """
    from dynscope._render.ranks import render_merged_html

    folder = ensure_folder(Path(folder))
    write_text(folder / "merged.json", plain.iter_json(merged))
    write_text(folder / "index.html", render_merged_html(merged))
    return folder


def html_page(rep: Report, *, pictures: bool | None = None, full: bool = False, progress: bool | None = None) -> str:
    """The report's HTML page, with its pictures laid out here (``Report.to_html``).

    Args:
        rep: the report.
        pictures: include SVG pictures; None (default) includes them when Graphviz is
            installed and says how to get it otherwise. The page is one self-contained
            file: graph pictures over ``INLINE_SVG_MAX`` characters are left out, with a
            note that ``rep.render(folder)`` writes them (and shows them on demand).
        full: draw every node of big graphs (see render_bundle).
        progress: False says nothing on stderr while pictures are laid out.

    Raises:
        GraphvizNotFoundError: ``pictures=True`` and Graphviz's ``dot`` is not installed or
            does not work (with None the page says so instead).
    """
    if pictures is False or (pictures is None and not have_graphviz()):
        return render_html(rep)
    if pictures:  # asked for: a dot that does not work raises
        laid = lay_out(rep, full=full, progress=_progress(progress))
        return render_html(rep, program_svg=laid.program, graph_svgs=laid.graphs, aot_svgs=laid.aot,
                           picture_notes=laid.notes)
    found = _pictures(rep, full=full, progress=progress)
    if isinstance(found, str):
        return render_html(rep, pictures_note=found)
    return render_html(rep, program_svg=found.program, graph_svgs=found.graphs, aot_svgs=found.aot,
                       picture_notes=found.notes)


def _progress(show: bool | None) -> Progress:
    """Pictures' progress: silent for the first second (a small page says nothing)."""
    return Progress("render", show=show, quiet_s=1.0)


def _pictures(rep: Report, *, full: bool = False, progress: bool | None = None) -> Pictures | str:
    """The report's pictures laid out (``dynscope._render.pictures.lay_out``), or, when the
    installed ``dot`` does not work, what went wrong (for the page to say in place of the
    pictures)."""
    try:
        return lay_out(rep, full=full, progress=_progress(progress))
    except GraphvizNotFoundError as err:
        return str(err)
