"""The ``dynscope`` command line (also ``python -m dynscope``).

Commands:
    dynscope report TARGET   compile and run a program, print the summary
    dynscope show FILE       print the summary of a saved report
    dynscope diff OLD NEW    what changed between two saved reports (exit 1 when worse)
    dynscope render FILE -o DIR   write the HTML bundle of a saved report

Exit status: 0 fine, 1 the program broke a gate (--fail-on-break, a worse diff),
2 any error: bad usage, a bad or unreadable file, a program that failed (one line on
stderr, ``dynscope: error: ...``, never a traceback). What ``show``, ``diff`` and ``report``
print from a report has terminal control sequences removed.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn

from dynscope._errors import DynscopeError
from dynscope._render_text import strip_controls

if TYPE_CHECKING:
    from collections.abc import Sequence

EXAMPLES = {
    "report": "example: dynscope report examples/quickstart.py:build --json run.json --html out/",
    "show": "example: dynscope show run.json",
    "diff": "example: dynscope diff before.json after.json   (exit 1 when after is worse)",
    "render": "example: dynscope render run.json -o report/",
}


class UsageError(Exception):
    """A bad command line or target: printed as one line, exit status 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line and exit status 2 like every other error."""

    def error(self, message: str) -> NoReturn:
        _fail(f"{message} (see {self.prog} --help)")
        raise SystemExit(2)


def _fail(message: str) -> None:
    """Print the one error line."""
    lines = [ln.strip() for ln in str(message).splitlines() if ln.strip()]
    sys.stderr.write(f"dynscope: error: {strip_controls(lines[0] if lines else 'unknown error')}\n")


def _printable(rep: Any) -> Any:
    """The report with terminal control sequences removed from every string in it.

    Stripped before rendering, so a control character cannot bend the layout either
    (a carriage return splits a table cell); ``_out`` strips the printed text again.
    """
    from dynscope._codec import report_from_dict

    def clean(value: Any) -> Any:
        if isinstance(value, str):
            return strip_controls(value)
        if isinstance(value, list):
            return [clean(v) for v in value]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    return report_from_dict(clean(rep.to_dict()))


def _out(text: str) -> None:
    """Print report text to stdout without terminal control sequences."""
    sys.stdout.write(strip_controls(text))


def _parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="dynscope",
        description="See what torch.compile did to a program and what it cost.",
        epilog="\n".join(EXAMPLES.values()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True

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
    r.add_argument("--json", metavar="FILE", help="save the report as JSON")
    r.add_argument("--html", metavar="DIR", help="write the HTML bundle to DIR")
    r.add_argument("--fail-on-break", action="store_true", help="exit 1 when the program has graph breaks")

    s = sub.add_parser("show", help="print the summary of a saved report", epilog=EXAMPLES["show"])
    s.add_argument("file", help="a report saved with Report.save or --json")

    d = sub.add_parser(
        "diff",
        help="compare two saved reports; exit 1 when the new one is worse",
        description="Graphs, ops, breaks (by site), recompiles, coverage and timing that changed. "
        "Worse means more breaks or recompiles, or lower coverage.",
        epilog=EXAMPLES["diff"],
    )
    d.add_argument("old")
    d.add_argument("new")

    n = sub.add_parser("render", help="write the HTML bundle of a saved report", epilog=EXAMPLES["render"])
    n.add_argument("file")
    n.add_argument("-o", "--output", required=True, metavar="DIR", help="folder to write")
    return p


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
            raise UsageError(f"importing {where} failed: {type(err).__name__}: {err}") from err
        finally:
            sys.path.pop(0)
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise UsageError(f"cannot import module {where!r}: {err}") from err
    func = getattr(module, name, None)
    if func is None or not callable(func):
        raise UsageError(f"{where} has no function {name!r}")
    return func


def _program(target: str) -> tuple[Any, dict[str, Any]]:
    func = load_target(target)
    try:
        result = func()
    except Exception as err:
        raise UsageError(f"{target}() raised {type(err).__name__}: {err}") from err
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
    import dynscope

    model, kwargs = _program(args.target)
    rep = dynscope.report(
        model, timing=args.timing, modes=tuple(args.mode or ("default",)), inner=args.inner, **kwargs
    )
    _out(rep.summary())
    if args.json:
        print(f"saved {rep.save(args.json)}")
    if args.html:
        from dynscope._bundle import render_bundle

        print(f"wrote {render_bundle(rep, Path(args.html)) / 'index.html'}")
    if args.fail_on_break:
        from dynscope._budget import Budget

        # Graph breaks only: recompiles and unread trace messages are shown, not gated.
        if Budget(max_graph_breaks=0, max_recompiles=None, allow_unparsed=True).problems(rep):
            print(f"dynscope: {rep.break_count} graph breaks (--fail-on-break)", file=sys.stderr)
            return 1
    return 0


def _cmd_show(args: argparse.Namespace) -> int:
    from dynscope._codec import load

    _out(_printable(load(_existing(args.file))).summary())
    return 0


def _cmd_diff(args: argparse.Namespace) -> int:
    from dynscope._codec import load
    from dynscope._diff import diff_reports, render_diff

    d = diff_reports(_printable(load(_existing(args.old))), _printable(load(_existing(args.new))))
    _out(render_diff(d))
    return 1 if d.worse else 0


def _cmd_render(args: argparse.Namespace) -> int:
    from dynscope._bundle import render_bundle
    from dynscope._codec import load

    out = render_bundle(load(_existing(args.file)), Path(args.output))
    print(f"wrote {out / 'index.html'}")
    return 0


def _existing(path: str) -> Path:
    p = Path(path)
    if p.is_dir():
        raise UsageError(f"{path} is a folder; pass a report file (a rendered folder keeps it as report.json)")
    if not p.exists():
        raise UsageError(f"no such file: {path}")
    return p


COMMANDS = {"report": _cmd_report, "show": _cmd_show, "diff": _cmd_diff, "render": _cmd_render}


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help (0) or a usage error (2, already printed)
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        return COMMANDS[args.command](args)
    except UsageError as err:
        _fail(f"{args.command}: {err}")
    except DynscopeError as err:
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
    return 2


def _quiet_stdout() -> None:
    """After the reader closed the pipe (``dynscope show x | head``), drop further output."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
