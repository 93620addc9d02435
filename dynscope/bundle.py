"""Write a report bundle to a folder: the one place that lays files out."""

from __future__ import annotations

from pathlib import Path

from dynscope.model import Report
from dynscope.write import write_text


def render_bundle(rep: Report, folder: Path) -> Path:
    """Write the report's files to ``folder`` and return it.

    Always: report.json, summary.txt, index.html. With Graphviz's ``dot`` installed also
    program.svg and graph_<id>.svg (inlined in index.html as well); without it the page
    says how to install Graphviz.
    """
    from dynscope.render_html import render_html
    from dynscope.svg import dot_to_svg, have_graphviz

    folder = Path(folder)
    write_text(folder / "report.json", rep.to_json())
    write_text(folder / "summary.txt", rep.summary())
    pictures = have_graphviz()
    graph_svgs: dict[int, str] = {}
    program_svg = None
    if pictures:
        program_svg = dot_to_svg(rep.program_dot())
        write_text(folder / "program.svg", program_svg)
        for g in rep.graphs:
            graph_svgs[g.id] = dot_to_svg(g.to_dot())
            write_text(folder / f"graph_{g.id}.svg", graph_svgs[g.id])
    write_text(
        folder / "index.html",
        render_html(rep, pictures=pictures, graph_svgs=graph_svgs, program_svg=program_svg),
    )
    return folder
