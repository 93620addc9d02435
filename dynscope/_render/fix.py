"""``dynscope.fix``'s result as text and as a page: each patch as a diff with its evidence."""

from __future__ import annotations

from typing import TYPE_CHECKING

from dynscope._format import plural
from dynscope._render.html import CSP, CSS
from dynscope._render.html_parts import esc, html_table

if TYPE_CHECKING:
    from dynscope._model.fix import FixResult, Patch

__all__ = ["evidence", "fix_html", "fix_text"]


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


def _head(result: FixResult) -> str:
    return f"dynscope fix: {result.title or 'program'}\n{_totals(result)}"


def _ordered(result: FixResult) -> list[Patch]:
    """The patches as both views list them: verified first, then by file and line."""
    return sorted(result.patches, key=lambda p: (not p.verified, p.filename, p.lineno))


def _state(p: Patch) -> str:
    return "verified" if p.verified else f"proposed, not verified: {p.why_not}"


def fix_text(result: FixResult) -> str:
    """The patches (verified first), each with its diff and evidence, then the sites left alone."""
    lines = [_head(result)]
    if result.blocked:
        lines += ["", f"Blocked: {result.blocked}"]
    for p in _ordered(result):
        lines += ["", f"{p.site}  {p.category}  [{p.rewrite}]  {_state(p)}", f"    {evidence(p)}"]
        if p.assumes:
            lines.append(f"    assumes: {p.assumes}")
        if p.instead:
            lines.append(f"    instead: {p.instead}")
        lines += ["    " + ln for ln in p.diff.rstrip("\n").splitlines()]
    if result.unpatched:
        lines += ["", "Left alone:"]
        lines += [f"  {u.site}  {u.category}  ({u.owner}): {u.why}" for u in result.unpatched]
    if result.written:
        lines += ["", "Written: " + ", ".join(result.written) + " (backups: " + ", ".join(result.backups) + ")"]
    if result.note:
        lines += ["", result.note]
    return "\n".join(lines) + "\n"


def fix_html(result: FixResult) -> str:
    """One self-contained page: the patches with diffs and evidence, then the sites left alone."""
    title = f"dynscope fix: {result.title or 'program'}"
    parts = [f"<header><h1>{esc(title)}</h1><div class='totals'>{esc(_totals(result))}</div></header><main>"]
    if result.blocked:
        parts.append(f"<section><h2>Blocked</h2><p>{esc(result.blocked)}</p></section>")
    for p in _ordered(result):
        parts.append(
            f"<section class='patch'><h2><code>{esc(p.site)}</code> {esc(p.category)} [{esc(p.rewrite)}]</h2>"
            f"<p><b>{esc(_state(p))}</b></p><p>{esc(evidence(p))}</p>"
            + (f"<p>assumes: {esc(p.assumes)}</p>" if p.assumes else "")
            + (f"<p>instead: {esc(p.instead)}</p>" if p.instead else "")
            + f"<pre class='diff'>{esc(p.diff)}</pre></section>"
        )
    if result.unpatched:
        rows = [[f"<code>{esc(u.site)}</code>", esc(u.category), esc(u.owner), esc(u.why)] for u in result.unpatched]
        parts.append(f"<section><h2>Left alone</h2>{html_table(['site', 'category', 'whose code', 'why'], rows)}</section>")
    parts.append("</main>")
    return (f"<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
            f"<meta http-equiv='Content-Security-Policy' content=\"{CSP}\"><title>{esc(title)}</title>"
            f"<style>{CSS}</style></head><body>{''.join(parts)}</body></html>\n")
