"""Write a report bundle to a folder: the one place that lays files out."""

from __future__ import annotations

import re
from pathlib import Path

from dynscope.model import Report
from dynscope.write import ensure_folder, write_text

#: Names of the picture files the bundle writes; only these are ever removed as stale.
_PICTURE = re.compile(r"graph_\d+\.svg|program\.svg")


def render_bundle(rep: Report, folder: Path) -> Path:
    """Write the report's files to ``folder`` and return it.

    Always: report.json, summary.txt, index.html. With Graphviz's ``dot`` installed also
    program.svg and graph_<id>.svg (inlined in index.html as well); without it the page
    says how to install Graphviz. Each file is replaced atomically; pictures this bundle
    wrote before that are not part of this report (graph_<id>.svg of a graph it no longer
    has) are removed, and no other file in the folder is touched.

    Raises:
        InputError: ``folder`` is a file, or a folder that cannot be written.
    """
    from dynscope.render_html import render_html
    from dynscope.svg import dot_to_svg, have_graphviz

    folder = ensure_folder(Path(folder))
    written: set[str] = set()
    rep.save(folder / "report.json")
    write_text(folder / "summary.txt", rep.summary())
    pictures = have_graphviz()
    graph_svgs: dict[int, str] = {}
    program_svg = None
    if pictures:
        program_svg = dot_to_svg(rep.program_dot())
        written.add(write_text(folder / "program.svg", program_svg).name)
        for g in rep.graphs:
            graph_svgs[g.id] = dot_to_svg(g.to_dot())
            written.add(write_text(folder / f"graph_{g.id}.svg", graph_svgs[g.id]).name)
    write_text(
        folder / "index.html",
        render_html(rep, pictures=pictures, graph_svgs=graph_svgs, program_svg=program_svg),
    )
    for old in folder.iterdir():
        if _PICTURE.fullmatch(old.name) and old.name not in written and old.is_file():
            old.unlink()
    return folder
