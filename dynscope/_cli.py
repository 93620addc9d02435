"""The ``dynscope`` command line (also ``python -m dynscope``).

Commands:
    dynscope report TARGET   compile and run a program, print the summary
    dynscope advise TARGET   try PyTorch's remedies on it, print what each buys
    dynscope show FILE       print the summary of a saved report
    dynscope diff OLD NEW    what changed between two saved reports (exit 1 when worse)
    dynscope render FILE -o DIR   write the HTML bundle of a saved report
    dynscope merge FOLDER -o DIR  merge each rank's report: one HTML page and merged.json
    dynscope trace PATH [-o DIR]  read a TORCH_TRACE log or a job's folder of rank logs
    dynscope cache-diff A B  why run B compiled what run A cached: the cache key parts that
                             changed (two TORCH_TRACE logs or folders)
    dynscope script FILE GRAPH -o OUT.py   a standalone script that reruns one graph, eager
                             against Inductor (needs only torch)

Exit status: 0 fine, 1 the program broke a gate (--fail-on-break, --max-recompiles,
--max-compile-s, a worse diff), 2 any error: bad usage, a bad or unreadable file, a program
that failed (one line on stderr, ``dynscope: error: ...``, never a traceback; a program
that raised gets a second line saying where in its code, and ``--json`` still saves what
was captured before). What ``show``, ``diff`` and ``report`` print from a report has
terminal control sequences removed.

It is a front end on the public API: it imports ``dynscope`` (its public names) and, for
what it prints and writes besides the model's shortcuts, the render door ``dynscope._render``.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

import dynscope
from dynscope import _render
from dynscope._format import human_bytes, plural
from dynscope._progress import Progress
from dynscope._write import write_text

if TYPE_CHECKING:
    from collections.abc import Sequence

EXAMPLES = {
    "report": "example: dynscope report examples/quickstart.py:build --json run.json --html out/",
    "advise": "example: dynscope advise examples/quickstart.py:build --json advised.json -o out/",
    "export": "example: dynscope export examples/export_cnn.py:build --json export.json   (exit 1 when it does not export)",
    "show": "example: dynscope show run.json   (--json: the whole report as JSON)",
    "diff": "example: dynscope diff before.json after.json   (exit 1 when after is worse)",
    "render": "example: dynscope render run.json -o report/",
    "merge": "example: dynscope merge ranks/ -o merged/ --fail-on-divergence   (exit 1 when ranks differ)",
    "trace": "example: dynscope trace /tmp/trace/ -o trace-report/ --fail-on-divergence   (the folder TORCH_TRACE named)",
    "script": "example: dynscope script run.json 0 -o graph_0.py && python graph_0.py   (needs only torch)",
    "cache-diff": "example: dynscope cache-diff traces/warm/ traces/today/ --fail-on-cache-miss   (exit 1 when B missed)",
    "fix": "example: dynscope fix examples/quickstart.py:build   (--write applies the verified patches, with backups)",
}


class UsageError(Exception):
    """A bad command line or target: printed as one line, exit status 2.

    ``where``, when given, is printed on a second line: the place in the user's code that
    raised (``at models.py:12 in build :: ...``).
    """

    def __init__(self, message: str, where: str = "") -> None:
        super().__init__(message)
        self.where = where


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2 like every other error."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see {self.prog} --help)")
        raise SystemExit(2)


if TYPE_CHECKING:
    # argparse's own type for what add_subparsers returns: each command's parser is a _Parser.
    _Commands = argparse._SubParsersAction[_Parser]


def _fail(message: str) -> None:
    """Print the one error line."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    sys.stderr.write(f"dynscope: error: {_render.plain(lines[0] if lines else 'unknown error')}\n")


def _out(text: str) -> None:
    """Print report text to stdout without terminal control sequences from the data."""
    sys.stdout.write(_render.plain(text))


def _out_summary(rep: dynscope.Report) -> None:
    """Print a report's summary: its strings without terminal control sequences, coloured by
    each line's tone when stdout is a terminal (see dynscope._render.terminal)."""
    sys.stdout.write(_render.printable(rep).summary(color=None))


def _version_text() -> str:
    """``dynscope X`` and ``torch Y`` (or that torch is not installed), one per line.

    torch's version comes from its installed metadata: importing torch takes seconds, and
    ``--version`` must also work where only reports are read (no torch).
    """
    from importlib import metadata  # only when asked: --version is the one command that reads it

    try:
        torch_line = f"torch {metadata.version('torch')}"
    except metadata.PackageNotFoundError:
        torch_line = "torch not installed (needed by `dynscope report`, not by show/diff/render)"
    return f"dynscope {dynscope.__version__}\n{torch_line}\n"


class _Version(argparse.Action):
    """``--version``: print :func:`_version_text` and exit 0 (worked out only when asked)."""

    def __init__(self, option_strings: Sequence[str], dest: str, help: str | None = None) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(self, parser: argparse.ArgumentParser, namespace: Any, values: Any, option: Any = None) -> None:
        sys.stdout.write(_version_text())
        parser.exit(0)


def _count(text: str) -> int:
    """An argparse type: a whole number >= 0."""
    try:
        value = int(text)
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a whole number >= 0; got {text!r}")
    return value


def _seconds(text: str) -> float:
    """An argparse type: seconds, a finite number >= 0."""
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0.0 <= value < float("inf"):  # NaN fails this too
        raise argparse.ArgumentTypeError(f"must be a number of seconds >= 0; got {text!r}")
    return value


def _parser() -> argparse.ArgumentParser:
    """The command line: each command's arguments from its own function below, in the order
    ``--help`` lists them."""
    p = _Parser(
        prog="dynscope",
        description="See what torch.compile did to a program and what it cost.",
        epilog="\n".join(EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action=_Version, help="print the versions of dynscope and torch, then exit")
    # Global options are taken before the command too (dynscope -q trace ...): another dest, as
    # a command's own default would overwrite this one's.
    p.add_argument("-q", "--quiet", dest="quiet_before", action="store_true",
                   help="no progress lines on stderr (as DYNSCOPE_PROGRESS=0); before or after the command")
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for add in (_report_args, _advise_args, _fix_args, _export_args, _show_args, _diff_args, _render_args,
                _merge_args, _trace_args, _script_args, _cache_diff_args):
        add(sub)
    for name, command in sub.choices.items():
        command.add_argument("-q", "--quiet", action="store_true",
                             help="no progress lines on stderr (as DYNSCOPE_PROGRESS=0)")
        if name in _PAGES:
            command.add_argument("--full", action="store_true",
                                 help="draw every node of big graphs in the page's pictures (slow; each "
                                 "Graphviz call still stops at DYNSCOPE_DOT_TIMEOUT seconds)")
    return p


def _report_args(sub: _Commands) -> None:
    """The arguments of ``dynscope report``."""
    r = sub.add_parser(
        "report",
        help="compile and run a program, print what torch.compile did",
        description="Import TARGET (path/to/file.py:function or package.module:function), call "
        "it, and report on the model it returns. The function returns (model, inputs) or "
        "(model, {'calls': [inputs1, inputs2, ...]}).",
        epilog=EXAMPLES["report"],
    )
    r.add_argument("target", help="path/to/file.py:function or package.module:function")
    r.add_argument("--timing", action="store_true", help="also time graphs with Inductor against eager")
    r.add_argument("--mode", action="append", default=None, help="Inductor mode to time (repeatable); default: default")
    r.add_argument("--inner", default="eager", help="backend after recording: eager (default), inductor, ...")
    r.add_argument("--memory", action="store_true",
                   help="measure peak memory and saved tensors, eager against Inductor (on with --timing)")
    r.add_argument("--max-memory-ratio", type=_seconds, metavar="R",
                   help="exit 1 when the compiled call's peak memory exceeds R times eager's (measures memory)")
    r.add_argument("--json", metavar="FILE", help="save the report as JSON")
    r.add_argument("--html", metavar="DIR", help="write the HTML bundle to DIR")
    r.add_argument("--fail-on-break", action="store_true", help="exit 1 when the program has graph breaks")
    r.add_argument(
        "--max-recompiles", type=_count, metavar="N", help="exit 1 when the program recompiles more than N times"
    )
    r.add_argument(
        "--max-compile-s", type=_seconds, metavar="S",
        help="exit 1 when compiling took more than S seconds in all (the summary's compile figure: Dynamo, the "
        "inner backend and its backward compile; not dynscope's own --timing builds)",
    )


def _advise_args(sub: _Commands) -> None:
    """The arguments of ``dynscope advise``."""
    a = sub.add_parser(
        "advise",
        help="try PyTorch's remedies on a program, each in isolation, and print what each buys",
        description="Import TARGET as `dynscope report` does, then run dynscope.advise: for each break "
        "site and recompile with a known remedy, rerun the capture with the remedy applied and "
        "measure graphs, breaks, recompiles and coverage before and after (speedup with --timing).",
        epilog=EXAMPLES["advise"],
    )
    a.add_argument("target", help="path/to/file.py:function or package.module:function")
    a.add_argument("--timing", action="store_true", help="also time each remedy with Inductor against eager")
    a.add_argument("--memory", action="store_true",
                   help="also try the memory remedies (activation_memory_budget, activation checkpointing), "
                   "each measured for peak memory and step time")
    a.add_argument("--patches", action="store_true",
                   help="also try dynscope fix's source patches, each verified on a copy of your file, ranked beside the remedies")
    a.add_argument("--json", metavar="FILE", help="save the report, with its trials, as JSON")
    a.add_argument("-o", "--output", metavar="DIR", help="write the HTML bundle (with the \"What each fix buys\" table) to DIR")


def _fix_args(sub: _Commands) -> None:
    """The arguments of ``dynscope fix``."""
    f = sub.add_parser(
        "fix",
        help="propose source patches that remove graph breaks, each verified on a copy of your file",
        description="Import TARGET as `dynscope report` does, then run dynscope.fix: for each break site "
        "in your own files, rewrite the statement by its cause, apply it to a hidden copy of the file beside "
        "it, rerun under torch.compile, and call it verified only when the break is gone, "
        "no new one appeared and outputs (and gradients) equal the unpatched eager run's. Your files "
        "change only with --write (verified patches only, a backup beside each file; only the patched "
        "lines change; exit 1 when nothing could be written).",
        epilog=EXAMPLES["fix"],
    )
    f.add_argument("target", help="path/to/file.py:function or package.module:function")
    f.add_argument("--write", action="store_true", help="apply the verified patches to your files (FILE.py.dynscope-backup kept)")
    f.add_argument("--json", action="store_true", help="print the result as JSON instead of text")
    f.add_argument("--html", metavar="FILE", help="also write the result as a self-contained HTML page")


def _export_args(sub: _Commands) -> None:
    """The arguments of ``dynscope export``."""
    e = sub.add_parser(
        "export",
        help="run torch.export on a program: what blocks it, where, and the dynamic_shapes that work",
        description="Import TARGET as `dynscope report` does (the function returns (model, inputs), or "
        "(model, inputs, dynamic_shapes)), run torch.export.export and, where it fails, draft_export, "
        "and print each blocker with your file, line and fix. Exit 1 when it does not export.",
        epilog=EXAMPLES["export"],
    )
    e.add_argument("target", help="path/to/file.py:function or package.module:function")
    e.add_argument("--strict", action="store_true", help="strict export (Dynamo traces the Python)")
    e.add_argument("--no-compile", action="store_true", help="do not compare with torch.compile's graph breaks")
    e.add_argument("--json", metavar="FILE", help="save the export report as JSON")
    e.add_argument("--html", metavar="FILE", help="write the export report as one self-contained HTML page")


def _show_args(sub: _Commands) -> None:
    """The arguments of ``dynscope show``."""
    s = sub.add_parser("show", help="print the summary of a saved report or a trace log", epilog=EXAMPLES["show"])
    s.add_argument("file", help="a report saved with Report.save or --json, a merged.json, or a TORCH_TRACE log or folder")
    s.add_argument("--json", action="store_true", help="print the whole report as JSON instead of the summary")


def _diff_args(sub: _Commands) -> None:
    """The arguments of ``dynscope diff``."""
    d = sub.add_parser(
        "diff",
        help="compare two saved reports; exit 1 when the new one is worse",
        description="Graphs, ops, breaks (by site), recompiles, coverage and timing that changed. "
        "Worse means more breaks or recompiles, or lower coverage.",
        epilog=EXAMPLES["diff"],
    )
    d.add_argument("old", help="a saved report or a TORCH_TRACE log")
    d.add_argument("new", help="a saved report or a TORCH_TRACE log")


def _cache_diff_args(sub: _Commands) -> None:
    """The arguments of ``dynscope cache-diff``."""
    c = sub.add_parser(
        "cache-diff",
        help="why run B compiled what run A cached: the cache key parts that changed",
        description="Reads each run's compile-cache lookups from its TORCH_TRACE log (or folder) and, "
        "for each lookup B did not hit, names the part of the key that differs from A's, and what to do.",
        epilog=EXAMPLES["cache-diff"],
    )
    c.add_argument("a", help="the reference run: a TORCH_TRACE log or folder (a warm run, or the one that filled the cache)")
    c.add_argument("b", help="the run to explain: a TORCH_TRACE log or folder")
    c.add_argument("--fail-on-cache-miss", action="store_true", help="exit 1 when B missed or bypassed a cache")
    c.add_argument("--bundle", metavar="FILE", help="a cache-artifact bundle A saved (torch.compiler.save_cache_"
                   "artifacts()): predict B's lookups from it (a key it holds hits) and explain the rest against A")


def _render_args(sub: _Commands) -> None:
    """The arguments of ``dynscope render``."""
    n = sub.add_parser("render", help="write the HTML bundle of a saved report or a trace log", epilog=EXAMPLES["render"])
    n.add_argument("file", help="a saved report, a merged.json, or a TORCH_TRACE log or folder")
    n.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write")


def _merge_args(sub: _Commands) -> None:
    """The arguments of ``dynscope merge``."""
    g = sub.add_parser(
        "merge",
        help="merge the reports of a job's ranks (dynscope.save_rank): where they diverge",
        description="Reads FOLDER/rank-*.json, writes DIR/index.html (divergences first, ranks as "
        "columns) and DIR/merged.json (read it with dynscope show), prints the merged summary.",
        epilog=EXAMPLES["merge"],
    )
    g.add_argument("folder", help="the folder every rank saved its report to with dynscope.save_rank")
    g.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write")
    g.add_argument("--fail-on-divergence", action="store_true", help="exit 1 when the ranks compiled differently")


def _trace_args(sub: _Commands) -> None:
    """The arguments of ``dynscope trace``."""
    t = sub.add_parser(
        "trace",
        help="read a TORCH_TRACE log, or the folder of a job's rank logs: the same report, no rerun",
        description="Reads what PyTorch wrote with TORCH_TRACE=<folder> set (no torch needed): one log "
        "is one report; a folder of rank logs is merged as `dynscope merge` merges saved reports, "
        "divergences first. Prints the summary; with -o writes the HTML bundle (a folder of rank logs: "
        "DIR/index.html and DIR/merged.json).",
        epilog=EXAMPLES["trace"],
    )
    t.add_argument("path", help="a dedicated_log_torch_trace_*.log file, or the folder TORCH_TRACE named")
    t.add_argument("-o", "--output", metavar="DIR", help="write the HTML bundle to DIR (a path ending .html: that one page)")
    t.add_argument("--json", action="store_true", help="print the whole report as JSON instead of the summary")
    t.add_argument("--jobs", type=_count, default=None, help="processes reading rank logs (default: CPU count for large folders)")
    t.add_argument("--run", type=_count, default=None, metavar="N",
                   help="a folder holding several runs of a job (reruns into one TORCH_TRACE folder): show run N, "
                   "earliest 0 (default: the run with the most ranks, the latest of those; the summary lists them)")
    t.add_argument("--fail-on-divergence", action="store_true", help="exit 1 when the ranks compiled differently")
    t.add_argument("--fail-on-break", action="store_true", help="exit 1 when any rank has graph breaks")
    t.add_argument("--max-recompiles", type=_count, default=None, metavar="N", help="exit 1 when any rank recompiled more than N times")
    t.add_argument("--max-compile-s", type=_seconds, default=None, metavar="S", help="exit 1 when any rank's compile took more than S seconds")
    t.add_argument("--fail-on-cache-miss", action="store_true",
                   help="exit 1 unless every compile-cache lookup hit (a warm start; dynscope.assert_warm)")


def _script_args(sub: _Commands) -> None:
    """The arguments of ``dynscope script``."""
    c = sub.add_parser(
        "script",
        help="write a standalone script that rebuilds one graph and times it eager against Inductor",
        description="Write OUT.py: it rebuilds graph GRAPH of the saved report from its code, makes "
        "inputs from the recorded shapes, dtypes and strides (random data, seed 0), checks Inductor's "
        "numerics and times eager against Inductor as dynscope does, printing its figures beside the "
        "report's. It needs only torch (never dynscope): attach it to a bug report or rerun it after "
        "a torch upgrade.",
        epilog=EXAMPLES["script"],
    )
    c.add_argument("file", help="a report saved with Report.save or --json")
    c.add_argument("graph", help="the graph's id, as the report prints it (0, 1, ...)")
    c.add_argument("-o", "--output", required=True, metavar="OUT.py", help="the script to write")
    c.add_argument("--no-timing", action="store_true", help="the script only compiles and checks numerics")
    c.add_argument("--mode", default=None, help="Inductor mode (default: the mode the report timed, else default)")


#: The CLI says nothing of a command that ends sooner than this (its output is then the
#: command's own: a quick error stays one line).
_QUIET_S = 1.0

#: Commands that write an HTML page with pictures (they take --full).
_PAGES = ("report", "advise", "render", "trace")


def load_target(target: str) -> Any:
    """The function named by ``file.py:func`` or ``package.module:func``."""
    if ":" not in target:
        raise UsageError(f"TARGET {target!r} must look like path/to/file.py:function or package.module:function")
    where, _, name = target.rpartition(":")
    if where.endswith(".py") or "/" in where or "\\" in where:
        path = Path(where)
        if not path.is_file():
            raise UsageError(f"no such file: {where}")
        spec = importlib.util.spec_from_file_location(f"dynscope_target_{path.stem}", path)
        if spec is None or spec.loader is None:
            raise UsageError(f"cannot import {where}")
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))
        try:
            spec.loader.exec_module(module)
        except Exception as err:
            raise UsageError(f"importing {where} failed: {type(err).__name__}: {err}", dynscope.raised_at(err)) from err
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise UsageError(f"cannot import module {where!r}: {err}") from err
        except Exception as err:  # the module itself raised while being imported
            raise UsageError(f"importing {where} failed: {type(err).__name__}: {err}", dynscope.raised_at(err)) from err
    func = getattr(module, name, None)
    if func is None or not callable(func):
        raise UsageError(f"{where} has no function {name!r}")
    return func


def _called(target: str) -> Any:
    """What the target's function returns; a UsageError naming where it raised."""
    func = load_target(target)
    try:
        return func()
    except Exception as err:
        raise UsageError(f"{target}() raised {type(err).__name__}: {err}", dynscope.raised_at(err)) from err


def _program(target: str) -> tuple[Any, dict[str, Any]]:
    result = _called(target)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise UsageError(
            f"{target}() must return (model, inputs) or (model, {{'calls': [...]}}); "
            f"got {type(result).__name__}"
        )
    model, inputs = result
    if isinstance(inputs, dict) and set(inputs) == {"calls"}:
        return model, {"calls": inputs["calls"]}
    return model, {"inputs": inputs}


def _cmd_report(args: argparse.Namespace) -> int:
    if args.mode and not args.timing:
        _warn("--mode has no effect without --timing (only timing runs Inductor modes); add --timing")
    _cwd_on_path()
    progress = Progress("report", quiet_s=_QUIET_S)
    progress.phase(f"importing {args.target}")
    model, kwargs = _program(args.target)
    progress.phase("compiling and running the program" + (" (then timing it)" if args.timing else ""))
    try:
        memory = args.memory or args.timing or args.max_memory_ratio is not None
        rep = dynscope.report(
            model, timing=args.timing, modes=tuple(args.mode or ("default",)), inner=args.inner, memory=memory,
            **kwargs,
        )
    except dynscope.CaptureError as err:
        _model_raised(err, args)  # raises
    _out_summary(rep)
    if args.json:
        print(f"saved {rep.save(args.json)}")
    if args.html:
        progress.phase(f"writing the page to {args.html}")
        print(f"wrote {_write_bundle(rep, Path(args.html), full=args.full)}")
    progress.done()
    failed = _gates(rep, args)
    for reason in failed:
        sys.stderr.write(f"dynscope: {_render.plain(reason)}\n")
    return 1 if failed else 0


def _cmd_advise(args: argparse.Namespace) -> int:
    _cwd_on_path()
    progress = Progress("advise", quiet_s=_QUIET_S)
    progress.phase(f"importing {args.target}")
    model, kwargs = _program(args.target)
    progress.phase("capturing the program, then trying each remedy")
    try:
        advice = dynscope.advise(model, timing=args.timing, memory=args.memory, patches=args.patches, **kwargs)
    except dynscope.CaptureError as err:
        _model_raised(err, args)  # raises
    rep = advice.report
    _out(advice.summary() + "\n")  # the same layout as print(advice)
    if args.json:
        print(f"saved {rep.save(args.json)}")
    if args.output:
        progress.phase(f"writing the page to {args.output}")
        print(f"wrote {_write_bundle(rep, Path(args.output), full=args.full)}")
    progress.done()
    return 0


def _cmd_fix(args: argparse.Namespace) -> int:
    _cwd_on_path()
    progress = Progress("fix", quiet_s=_QUIET_S)
    # With --json, what the program itself prints goes to stderr, its build and import too:
    # stdout stays one JSON document.
    quiet = contextlib.redirect_stdout(sys.stderr) if args.json else contextlib.nullcontext()
    try:
        with quiet:
            progress.phase(f"importing {args.target}")
            model, kwargs = _program(args.target)
            progress.phase("capturing the program, then rewriting and verifying each break site")
            result = dynscope.fix(model, write=args.write, **kwargs)
    except dynscope.CaptureError as err:
        raise UsageError(f"{args.target}: the program raised before any patch: {_raised_line(err)}",
                         dynscope.raised_at(err)) from err
    progress.done()
    if args.json:
        print(json.dumps(result.to_dict(), indent=1))
    else:
        _out(result.summary())
    if args.html:
        path = Path(args.html)
        write_text(path, result.to_html())
        print(f"wrote {path}", file=sys.stderr if args.json else sys.stdout)
    # --write asked for a change that did not happen (a read-only file, patches that did not
    # verify together, a file changed meanwhile): say so in the exit status too.
    return 1 if args.write and result.note else 0


def _gates(rep: Any, args: argparse.Namespace) -> list[str]:
    """What each gate the command line asked for found over its limit (empty: all pass)."""
    failed = []
    # Each gate checks its own count only; unread trace messages are shown, not gated.
    if args.fail_on_break and dynscope.Budget(max_graph_breaks=0, max_recompiles=None, allow_unparsed=True).overruns(rep):
        failed.append(f"{rep.break_count} graph breaks (--fail-on-break)")
    if args.max_recompiles is not None:
        over = dynscope.Budget(max_graph_breaks=None, max_recompiles=args.max_recompiles, allow_unparsed=True).overruns(rep)
        if over:
            _, detail = _render.overrun_lines(over[0], rep)  # one line per recompile, the failed guard in words
            failed.append(
                "\n".join([f"{plural(rep.recompile_count, 'recompile')}, more than --max-recompiles "
                           f"{args.max_recompiles}:", *detail])
            )
    if args.max_compile_s is not None and rep.compile_time.total_s > args.max_compile_s:
        failed.append(
            # The user's compile (the summary's header figure); dynscope's own timing builds are not in it.
            f"compiling took {rep.compile_time.total_s:.2f} s, more than --max-compile-s {args.max_compile_s:g}"
        )
    ratio = getattr(args, "max_memory_ratio", None)
    if ratio is not None:
        over = dynscope.Budget(max_graph_breaks=None, max_recompiles=None, allow_unparsed=True,
                               max_memory_ratio=ratio).overruns(rep)
        if over:
            failed.append(f"{_render.budget_problems(over, rep)[0]} (--max-memory-ratio)")
    return failed


def _model_raised(err: Any, args: argparse.Namespace) -> NoReturn:
    """The program raised: save what was captured (``--json``), then say what and where."""
    if args.json:
        rep = err.report
        print(
            f"saved {rep.save(args.json)} (partial: {plural(rep.graph_count, 'graph')}, "
            f"{plural(rep.break_count, 'graph break')} captured before the model raised)"
        )
    cause = err.__cause__ if err.__cause__ is not None else err
    raise UsageError(_raised_line(err), dynscope.raised_at(cause)) from err


def _raised_line(err: Any) -> str:
    """One line on a CaptureError, made from its fields (who failed, which call) and the first
    line of the exception it carries (PyTorch's or the model's words, never dynscope's own
    message read back; _fail prints one line, and Dynamo's messages run to many)."""
    cause = err.__cause__ if err.__cause__ is not None else err
    first = next((ln.strip() for ln in str(cause).splitlines() if ln.strip()), "(no message)")
    who = {"compiler": "torch.compile failed with", "dynscope": "dynscope failed (a dynscope bug; please report it) with"}
    return f"{who.get(err.party, 'the model raised')} {type(cause).__name__} during call {err.call_index}: {first}"


def _warn(message: str) -> None:
    """One warning line on stderr; the command goes on."""
    sys.stderr.write(f"dynscope: warning: {message}\n")


def _cwd_on_path() -> None:
    """Put the current folder first on ``sys.path``, as ``python -m dynscope`` does.

    The ``dynscope`` console script starts with its own folder there instead, so
    ``dynscope report mypkg.models:build`` could not import the user's package.
    """
    cwd = os.getcwd()
    if not sys.path or sys.path[0] not in ("", cwd):
        sys.path.insert(0, cwd)


def _read(path: str, *, merged_ok: bool = True) -> Any:
    """What a path holds (:func:`dynscope.read`): a saved report, a merged report, or a
    TORCH_TRACE log or folder."""
    got = dynscope.read(path)
    if not merged_ok and not isinstance(got, dynscope.Report):
        raise UsageError(f"{path} holds many ranks; pass one rank's report or log (diff compares two reports)")
    return got


def _cmd_show(args: argparse.Namespace) -> int:
    rep = _read(args.file)
    if args.json:
        # json escapes control characters and non-ASCII text, so nothing reaches the terminal raw.
        sys.stdout.write(rep.to_json() + "\n")
        return 0
    if not isinstance(rep, dynscope.Report):  # a merged many-rank report
        _out(rep.summary())
        return 0
    _out_summary(rep)
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    old, new = (_render.printable(_read(path, merged_ok=False)) for path in (args.old, args.new))
    d = dynscope.diff(old, new)
    _out(_render.diff_text(d))
    return 1 if d.worse else 0


def _cmd_cache_diff(args: argparse.Namespace) -> int:
    d = dynscope.cache_diff(args.a, args.b, bundle=args.bundle)
    _out(d.summary() + "\n")
    return 1 if args.fail_on_cache_miss and d.misses else 0


def _cmd_render(args: argparse.Namespace) -> int:
    out = _write_bundle(_read(args.file), Path(args.output), full=args.full)
    print(f"wrote {out}")
    return 0


def _one_page(path: Path) -> bool:
    """Whether ``-o PATH`` asks for one page (``page.html``), not a bundle's folder."""
    return path.suffix.lower() in (".html", ".htm") and not path.is_dir()


def _write_bundle(rep: Any, folder: Path, *, full: bool = False) -> Path:
    """The HTML bundle of a report (index.html, SVGs, report.json) or of a merged one
    (index.html, merged.json); returns its index.html. ``-o page.html`` writes that one
    self-contained page instead (pictures inline; no report.json or merged.json)."""
    if _one_page(folder):
        if folder.parent and not folder.parent.is_dir():
            raise UsageError(f"cannot write {folder}: its folder {folder.parent} does not exist")
        page = rep.to_html(full=full) if isinstance(rep, dynscope.Report) else rep.to_html()
        return write_text(folder, page)
    if isinstance(rep, dynscope.Report):
        return rep.render(folder, full=full) / "index.html"
    return rep.render(folder) / "index.html"


def _warn_unused(args: argparse.Namespace, single: bool) -> None:
    """Say which of ``trace``'s options do nothing for what was read (never silently ignored)."""
    unused = []
    if single and args.run is not None:
        unused.append(f"--run {args.run} (it picks a run of a folder holding several; {args.path} is one log)")
    if single and args.jobs is not None:
        unused.append(f"--jobs {args.jobs} (processes reading a folder's rank logs; {args.path} is one log)")
    if single and args.fail_on_divergence:
        unused.append("--fail-on-divergence (ranks diverge only in a folder of rank logs; this is one log)")
    if args.full and not args.output:
        unused.append("--full (it draws the pictures of the page -o writes; no -o given)")
    for what in unused:
        sys.stderr.write(f"dynscope: warning: trace: ignored {_render.plain(what)}\n")


def _cmd_trace(args: argparse.Namespace) -> int:
    p = Path(args.path)
    if not p.exists():
        raise UsageError(f"no such trace log or folder: {args.path}; pass the folder TORCH_TRACE named")
    progress = Progress("trace", quiet_s=_QUIET_S)
    size = sum(f.stat().st_size for f in (p.rglob("*") if p.is_dir() else [p]) if f.is_file())
    _warn_unused(args, single=p.is_file())
    progress.phase(f"reading {args.path} ({human_bytes(size)})")
    rep = dynscope.load_trace(p, jobs=args.jobs, run=None if p.is_file() else args.run)
    if args.json and isinstance(rep, dynscope.Report):
        sys.stdout.write(rep.to_json() + "\n")
    elif args.json:
        for piece in rep.iter_json():  # a big job's JSON, rank by rank
            sys.stdout.write(piece)
    elif isinstance(rep, dynscope.Report):
        _out_summary(rep)
    else:
        _out(rep.summary())
    if args.output:
        progress.phase(f"writing the page to {args.output}")
        print(f"wrote {_write_bundle(rep, Path(args.output), full=args.full)}")
    progress.done()
    ranks = [rep] if isinstance(rep, dynscope.Report) else list(rep.reports)
    failed = [f"rank {r.rank}: {problem}" if len(ranks) > 1 else problem for r in ranks for problem in _gates(r, args)]
    if args.fail_on_divergence and not isinstance(rep, dynscope.Report) and rep.diverged:
        failed.append(f"the ranks compiled differently ({len(rep.divergences)} divergences; --fail-on-divergence)")
    if args.fail_on_cache_miss:
        try:
            dynscope.assert_warm(p)
        except dynscope.CacheMissError as err:
            failed.append(f"{err} (--fail-on-cache-miss)")
    for problem in failed:
        sys.stderr.write(f"dynscope: {_render.plain(problem)}\n")
    return 1 if failed else 0


def _cmd_merge(args: argparse.Namespace) -> int:
    folder = Path(args.folder)
    if not folder.is_dir():
        raise UsageError(f"{args.folder} is not a folder; pass the folder the ranks saved rank-*.json to")
    merged = dynscope.merge(folder)
    _out(merged.summary())
    if _one_page(Path(args.output)):
        print(f"wrote {_write_bundle(merged, Path(args.output))} (one page; -o DIR also writes merged.json)")
    else:
        out = merged.render(Path(args.output))
        print(f"wrote {out / 'index.html'} and {out / 'merged.json'}")
    return 1 if args.fail_on_divergence and merged.diverged else 0


def _cmd_script(args: argparse.Namespace) -> int:
    rep = dynscope.load(_existing(args.file))
    ids = ", ".join(str(g.id) for g in rep.graphs) or "none (the report captured no graph)"
    try:
        graph = rep.graph(int(args.graph))
    except (ValueError, KeyError):
        raise UsageError(f"no graph {args.graph!r} in {args.file}; its graph ids are {ids}") from None
    graph.to_script(Path(args.output), timing=not args.no_timing, mode=args.mode, report=rep)
    print(f"wrote {args.output} (graph {graph.id}, {graph.frame}): run it with python {args.output}")
    return 0


def _existing(path: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{path} is a folder; pass a report file (a rendered folder keeps it as report.json)")
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    return p


def _cmd_export(args: argparse.Namespace) -> int:
    _cwd_on_path()
    result = _called(args.target)
    if not (isinstance(result, tuple) and len(result) in (2, 3)):
        raise UsageError(
            f"{args.target}() must return (model, inputs) or (model, inputs, dynamic_shapes); got {type(result).__name__}"
        )
    model, inputs, shapes = (*result, None) if len(result) == 2 else result
    rep = dynscope.export_report(model, inputs, dynamic_shapes=shapes, strict=args.strict,
                                 compare_compile=not args.no_compile)
    _out(rep.summary() + "\n")
    if args.json:
        print(f"saved {rep.save(args.json)}")
    if args.html:
        print(f"wrote {write_text(Path(args.html), rep.to_html())}")
    return 0 if rep.exported else 1


COMMANDS = {
    "report": _cmd_report, "advise": _cmd_advise, "show": _cmd_show, "diff": _cmd_diff, "render": _cmd_render,
    "merge": _cmd_merge, "trace": _cmd_trace, "script": _cmd_script, "export": _cmd_export, "fix": _cmd_fix,
    "cache-diff": _cmd_cache_diff,
}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2, already printed)
        return exit_.code if isinstance(exit_.code, int) else 2
    args.quiet = args.quiet or getattr(args, "quiet_before", False)
    quiet = os.environ.get("DYNSCOPE_PROGRESS")
    if args.quiet:  # every phase and bar below reads it, for this command only
        os.environ["DYNSCOPE_PROGRESS"] = "0"
    try:
        return COMMANDS[args.command](args)
    except UsageError as err:
        _fail(f"{args.command}: {err}")
        if err.where:
            sys.stderr.write(f"  {_render.plain(err.where)}\n")
    except dynscope.DynscopeError as err:
        _fail(f"{args.command}: {type(err).__name__}: {err}")
    except OSError as err:  # a file that vanished, a full disk, a closed pipe...
        if isinstance(err, BrokenPipeError):
            _quiet_stdout()
        else:
            _fail(f"{args.command}: {err}")
    except KeyboardInterrupt:
        _fail(f"{args.command}: interrupted")
    except Exception as err:  # noqa: BLE001 - the CLI never shows a traceback
        _fail(f"{args.command}: unexpected {type(err).__name__}: {err} (a dynscope bug; please report it)")
    finally:
        if args.quiet:
            _restore_env("DYNSCOPE_PROGRESS", quiet)
    return 2


def _restore_env(name: str, value: str | None) -> None:
    if value is None:
        os.environ.pop(name, None)
    else:
        os.environ[name] = value


def _quiet_stdout() -> None:
    """After the reader closed the pipe (``dynscope show x | head``), drop further output."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
