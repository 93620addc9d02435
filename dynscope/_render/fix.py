"""``dynscope.fix``'s result as text and as a page: each patch as a diff with its evidence,
built once as sections (:func:`fix_document`) that both views walk."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import plural
from dynscope._render.blocks import Column, Field, Group, Section, Table
from dynscope._render.html import CSP, CSS
from dynscope._render.html_parts import esc
from dynscope._render.section_html import section_html
from dynscope._render.section_text import group_lines, section_lines

if TYPE_CHECKING:
    from dynscope._model.fix import FixResult, Patch, Unpatched

__all__ = ["evidence", "fix_document", "fix_html", "fix_text"]


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.0%}"


def _yes(x: bool | None) -> str:
    return "not run" if x is None else "yes" if x else "no"


def evidence(p: Patch) -> str:
    """One line of what the rerun showed ("not run" when the patched program never ran)."""
    if not p.ran:
        return (f"not run: breaks at the site {p.breaks_before}, program {p.program_breaks_before} breaks, "
                f"{p.graphs_before} graphs, coverage {_pct(p.coverage_before)} before the patch")
    grads = "" if p.gradients_matched is None else f", gradients equal: {_yes(p.gradients_matched)}"
    return (f"breaks at the site {p.breaks_before} -> {p.breaks_after}; program {p.program_breaks_before} -> "
            f"{p.program_breaks_after} breaks, {p.graphs_before} -> {p.graphs_after} graphs, coverage "
            f"{_pct(p.coverage_before)} -> {_pct(p.coverage_after)}; outputs equal to eager: "
            f"{_yes(p.outputs_matched)}{grads}")


def _totals(result: FixResult) -> str:
    """The totals line both views show under the title: sites, events, patches."""
    verified = result.verified
    sites = len({p.site for p in result.patches} | {u.site for u in result.unpatched})
    after = "" if result.breaks_after is None else f"; with every verified patch: {plural(result.breaks_after, 'break event')}"
    return (f"{plural(sites, 'break site')}, "
            f"{plural(result.breaks_before, 'break event')}; {len(verified)} verified "
            f"{'patch' if len(verified) == 1 else 'patches'}, "
            f"{len(result.patches) - len(verified)} proposed only{after}")


def _ordered(result: FixResult) -> list[Patch]:
    """The patches as both views list them: verified first, then by file and line."""
    return sorted(result.patches, key=lambda p: (not p.verified, p.filename, p.lineno))


def _state(p: Patch) -> str:
    return "verified" if p.verified else f"proposed, not verified: {p.why_not}"


def _patch(i: int, p: Patch) -> Group:
    """One patch: what and where in the title; its state, evidence, assumption, what to do
    instead and its diff as fields."""
    fields = [Field("", _state(p)), Field("", evidence(p), "flat")]
    if p.assumes:
        fields.append(Field("assumes", p.assumes, "flat"))
    if p.instead:
        fields.append(Field("instead", p.instead, "flat"))
    fields.append(Field("", p.diff.rstrip("\n"), "pre"))
    return Group(anchor=f"patch-{i}", title=f"{p.site}  {p.category}  [{p.rewrite}]", fields=tuple(fields))


def _left_why(u: Unpatched) -> str:
    """Why a site has no patch; for one the verified patches removed too, that first."""
    if not u.gone_with:
        return u.why
    return (f"gone with the verified patches at {', '.join(u.gone_with)}: the break only followed from theirs, "
            f"nothing to patch here (alone: {u.why})")


_LEFT = (Column("site", "code"), Column("category"), Column("whose code"), Column("why"))


def fix_document(result: FixResult) -> tuple[Section, ...]:
    """Every part of the result, in order, built once: the head (title and totals), what
    blocked the rest, the patches (verified first), the sites left alone, the files written,
    the note. The text and the page walk it."""
    doc = [Section(f"dynscope fix: {result.title or 'program'}", lead=_totals(result), key="head", lead_kind="flat")]
    if result.blocked:
        doc.append(Section("Blocked", lead=result.blocked, key="blocked", tone="bad"))
    if result.patches:
        doc.append(Section("Patches", blocks=tuple(_patch(i, p) for i, p in enumerate(_ordered(result))),
                           key="patches"))
    if result.unpatched:
        rows = tuple((u.site, u.category, u.owner, _left_why(u)) for u in result.unpatched)
        doc.append(Section("Left alone", blocks=(Table(_LEFT, rows, said="{0}  {1}  ({2}): {3}", said_in="text"),),
                           key="left"))
    if result.written:
        doc.append(Section("Written", lead=", ".join(result.written) + " (backups: " + ", ".join(result.backups) + ")",
                           key="written", lead_kind="flat"))
    if result.note:
        doc.append(Section("Note", lead=result.note, key="note"))
    return tuple(doc)


def fix_text(result: FixResult) -> str:
    """The document as text: the head's two lines, then each part after a blank line (a
    part of one sentence on its title's line)."""
    head, *parts = fix_document(result)
    lines = [head.title, head.lead]
    for section in parts:
        lines.append("")
        if not section.blocks:
            lines.append(f"{section.title}: {section.lead}")
            continue
        lines.append(f"{section.title}:")
        if section.key == "patches":  # a diff each: a blank line between them
            for k, group in enumerate(g for g in section.blocks if isinstance(g, Group)):
                lines += [""] * (k > 0) + group_lines(group)
        else:
            lines += section_lines(section)
    return "\n".join(lines) + "\n"


def fix_html(result: FixResult) -> str:
    """The document as one self-contained page."""
    head, *parts = fix_document(result)
    body = (f"<header><h1>{esc(head.title)}</h1><div class='totals'>{esc(head.lead)}</div></header><main>"
            + "".join(section_html(s) for s in parts) + "</main>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{esc(head.title)}</title>"
            f"<style>{CSS}</style></head><body>{body}</body></html>\n")
