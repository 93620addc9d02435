"""The command line: report, show, diff, render; errors are one line with exit 2."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import dynscope
from dynscope._cli import main
from dynscope._model.codec import report_from_dict
from tests.corpus.markers import break_line
from tests.corpus.programs import MLP, PrintModel, _x

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def saved(tmp_path: Path) -> tuple[Path, Path]:
    clean = dynscope.report(MLP(), _x(4, 8)).save(tmp_path / "clean.json")
    broken = dynscope.report(PrintModel(), _x(4, 8)).save(tmp_path / "broken.json")
    return clean, broken


def test_show(saved, capsys) -> None:
    assert main(["show", str(saved[1])]) == 0
    out = capsys.readouterr().out
    assert out == dynscope.load(saved[1]).summary()


def test_diff_gates_on_worse(saved, capsys) -> None:
    clean, broken = saved
    assert main(["diff", str(clean), str(broken)]) == 1
    out = capsys.readouterr().out
    assert "Breaks added:" in out and f'programs.py:{break_line(PrintModel)} [logging/print side effect] print("activations ready")' in out
    assert "WORSE: graph breaks rose from 0 to 1" in out
    assert main(["diff", str(broken), str(clean)]) == 0
    assert "Breaks removed:" in capsys.readouterr().out


def test_the_python_diff_is_the_commands(saved, capsys) -> None:
    clean, broken = saved
    d = dynscope.diff(dynscope.load(clean), dynscope.load(broken))
    assert d.worse and [(w.what, w.old, w.new) for w in d.worse_because] == [("graph_breaks", 0, 1)]
    assert [b.category for b in d.breaks_added] == ["logging/print side effect"] and not d.breaks_removed
    main(["diff", str(clean), str(broken)])
    assert capsys.readouterr().out.rstrip("\n") == str(d).rstrip("\n"), "dynscope diff prints the same text"


@pytest.mark.heavy
def test_report_target_file(tmp_path: Path, capsys) -> None:
    js = tmp_path / "run.json"
    html = tmp_path / "html"
    code = main(["report", f"{ROOT}/examples/quickstart.py:build", "--json", str(js), "--html", str(html),
                 "--fail-on-break"])
    assert code == 1, "--fail-on-break: the quickstart breaks"
    out = capsys.readouterr().out
    assert "dynscope report: TinyTransformer" in out
    assert f"wrote {html / 'index.html'}" in out
    assert dynscope.load(js).break_count == 10
    assert (html / "program.svg").exists() and dynscope.load(html / "report.json").break_count == 10


def test_report_target_module(capsys) -> None:
    assert main(["report", "tests.corpus.cli_targets:clean"]) == 0
    assert "Graph breaks: none" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("nofile.py:build", "no such file: nofile.py"),
        (f"{ROOT}/examples/quickstart.py:nothing", "has no function 'nothing'"),
        ("tests.corpus.cli_targets:wrong_shape", "must return (model, inputs)"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("just_a_name", "must look like path/to/file.py:function"),
    ],
)
def test_bad_target_is_one_line_exit_2(target: str, message: str, capsys) -> None:
    assert main(["report", target]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and "Traceback" not in err


def test_missing_file_exit_2(capsys) -> None:
    assert main(["show", "nope.json"]) == 2
    assert "no such file: nope.json" in capsys.readouterr().err


@pytest.mark.parametrize("command", ["report", "show", "diff", "render"])
def test_help_has_an_example(command: str) -> None:
    res = subprocess.run([sys.executable, "-m", "dynscope", command, "--help"], capture_output=True, text=True)
    assert res.returncode == 0
    assert "example: dynscope " + command in res.stdout


# -- issue 12: console script, --version, gates, show --json, a model that raises ----------

MYPKG_MODELS = '''
import torch


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.fc(x).relu()


def build():
    return Net(), torch.randn(2, 8)
'''


@pytest.mark.heavy
def test_console_script_imports_a_package_from_the_current_folder(tmp_path: Path) -> None:
    """`dynscope report mypkg.models:build` works from the package's folder, like `python -m dynscope`."""
    script = Path(sys.executable).with_name("dynscope")  # the installed console script (editable install)
    assert script.is_file(), f"no console script at {script}: install dynscope with pip install -e ."
    (tmp_path / "mypkg").mkdir()
    (tmp_path / "mypkg" / "__init__.py").write_text("")
    (tmp_path / "mypkg" / "models.py").write_text(MYPKG_MODELS)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONSAFEPATH")}
    res = subprocess.run([str(script), "report", "mypkg.models:build", "--json", "run.json"],
                         cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert res.returncode == 0, res.stderr
    assert "dynscope report: Net" in res.stdout and "Graph breaks: none" in res.stdout
    assert dynscope.load(tmp_path / "run.json").graph_count == 1


def test_version(capsys) -> None:
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out == f"dynscope {dynscope.__version__}\ntorch {importlib.metadata.version('torch')}\n"
    # The installed release, with or without the local build tag ("2.15.0" for "2.15.0+cu132").
    assert torch.__version__.split("+")[0] in out


def test_mode_without_timing_warns(capsys) -> None:
    assert main(["report", "tests.corpus.cli_targets:clean", "--mode", "max-autotune"]) == 0
    err = capsys.readouterr().err
    assert err == (
        "dynscope: warning: --mode has no effect without --timing (only timing runs Inductor modes); "
        "add --timing\n"
    )


RECOMPILING = '''
from tests.corpus.programs import PrintModel, _x


def build():
    return PrintModel(), {"calls": [_x(4, 8), _x(6, 8)]}
'''


def test_gates_for_recompiles_and_compile_time(tmp_path: Path, capsys) -> None:
    target = tmp_path / "recompiling.py"
    target.write_text(RECOMPILING)
    # PrintModel over two batch sizes: 2 recompiles (one per graph), compile time above 0 s.
    assert main(["report", f"{target}:build", "--max-recompiles", "1", "--max-compile-s", "0"]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "dynscope: 2 recompiles, more than --max-recompiles 1:"
    assert len(err) == 4 and all("input x changed size in dim 0: compiled for 4, called with 6" in ln
                                 for ln in err[1:3])
    assert re.fullmatch(r"dynscope: compiling took \d+\.\d\d s, more than --max-compile-s 0", err[3])
    assert main(["report", f"{target}:build", "--max-recompiles", "2", "--max-compile-s", "600"]) == 0
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("option", "message"),
    [
        (["--max-recompiles", "-1"], "argument --max-recompiles: must be a whole number >= 0; got '-1'"),
        (["--max-recompiles", "two"], "argument --max-recompiles: must be a whole number >= 0; got 'two'"),
        (["--max-compile-s", "nan"], "argument --max-compile-s: must be a number of seconds >= 0; got 'nan'"),
    ],
)
def test_bad_gate_value_is_a_usage_error(option: list[str], message: str, capsys) -> None:
    assert main(["report", "tests.corpus.cli_targets:clean", *option]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_show_json(saved, capsys) -> None:
    assert main(["show", str(saved[1]), "--json"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out)
    assert data == json.loads(dynscope.load(saved[1]).to_json())
    assert report_from_dict(data).break_count == 1


RAISING = '''
import torch


def scale_for(n):
    if n > 4:
        raise ValueError(f"batch of {n} is too big")
    return 2.0


class Boom(torch.nn.Module):
    def forward(self, x):
        y = x.sin()
        print("half way")  # a graph break: the graph before it is captured
        return y * scale_for(x.shape[0])


def build():
    return Boom(), {"calls": [torch.ones(2, 3), torch.ones(8, 3)]}


def lookup(table):
    return table["missing"]


def broken_build():
    return lookup({})
'''


def _line(source: str, text: str) -> int:
    """The 1-based number of the line of ``source`` that holds ``text``."""
    return next(i for i, ln in enumerate(source.splitlines(), 1) if text in ln)


def test_model_that_raises_names_the_cause_and_saves_the_partial_report(tmp_path: Path, capsys) -> None:
    target = tmp_path / "raising.py"
    target.write_text(RAISING)
    js = tmp_path / "partial.json"
    assert main(["report", f"{target}:build", "--json", str(js)]) == 2
    captured = capsys.readouterr()
    err = captured.err.splitlines()
    assert err[0] == "dynscope: error: report: the model raised ValueError during call 1: batch of 8 is too big"
    assert err[1] == f'  at {target}:{_line(RAISING, "raise ValueError")} in scale_for :: ' \
        'raise ValueError(f"batch of {n} is too big")'
    assert len(err) == 2 and "Traceback" not in captured.err
    partial = dynscope.load(js)
    assert partial.graph_count >= 1 and partial.break_count >= 1, "what was captured before the failure"
    assert f"saved {js} (partial: " in captured.out
    # The program's own build function raising: its frame too.
    assert main(["report", f"{target}:broken_build"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"dynscope: error: report: {target}:broken_build() raised KeyError: 'missing'",
        f'  at {target}:{_line(RAISING, "table[")} in lookup :: return table["missing"]',
    ]


def test_show_colours_on_a_terminal_and_not_on_a_pipe() -> None:
    """`dynscope show` colours the summary on a terminal (NO_COLOR turns it off); piped, it
    stays plain, and control sequences from the report's data never pass either way."""
    import pty

    stored = str(ROOT / "tests" / "golden" / "reports" / "print_model.json")
    env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "FORCE_COLOR")}

    def on_tty(extra: dict[str, str]) -> bytes:
        master, slave = pty.openpty()
        try:
            proc = subprocess.run(
                [sys.executable, "-m", "dynscope", "show", stored], stdout=slave, stderr=subprocess.PIPE,
                env={**env, **extra}, cwd=ROOT, timeout=60,
            )  # fmt: skip
            assert proc.returncode == 0, proc.stderr
        finally:
            os.close(slave)
        chunks = []
        while True:
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal: all read
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(master)
        return b"".join(chunks)

    coloured = on_tty({})
    assert b"\x1b[1mdynscope report: PrintModel\x1b[0m" in coloured
    assert b"\x1b[" not in on_tty({"NO_COLOR": "1"})
    piped = subprocess.run(
        [sys.executable, "-m", "dynscope", "show", stored], capture_output=True, env=env, cwd=ROOT, timeout=60
    )
    assert piped.returncode == 0 and b"\x1b[" not in piped.stdout


# -- the public names the command line reads through (issue 33) ---------------------------------

TRACES = ROOT / "tests" / "traces" / "torch-2.13" / "logs"


def test_read_takes_what_show_takes(saved, tmp_path: Path) -> None:
    clean, _ = saved
    assert dynscope.read(clean) == dynscope.load(clean)
    assert dynscope.read(str(TRACES / "corpus-item_break.log")) == dynscope.load_trace(TRACES / "corpus-item_break.log")
    job = dynscope.read(TRACES / "ddp-2ranks")
    assert isinstance(job, dynscope.MultiRankReport) and job.ranks == (0, 1)
    job.save(tmp_path / "merged.json")
    assert dynscope.read(tmp_path / "merged.json") == job
    with pytest.raises(FileNotFoundError, match=r"^no such file: .*nothing\.json$"):
        dynscope.read(tmp_path / "nothing.json")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="is a folder with no TORCH_TRACE log"):
        dynscope.read(tmp_path / "empty")


def test_raised_at_names_the_users_line(tmp_path: Path) -> None:
    target = tmp_path / "raising.py"
    target.write_text(RAISING)
    model, calls = _built(target)
    with pytest.raises(dynscope.CaptureError) as info:
        dynscope.report(model, calls=calls)
    cause = info.value.__cause__
    assert cause is not None
    assert dynscope.raised_at(cause) == (
        f'at {target}:{_line(RAISING, "raise ValueError")} in scale_for :: raise ValueError(f"batch of {{n}} is too big")'
    )
    try:
        import json as stdlib_json

        stdlib_json.loads("{")
    except ValueError as err:  # raised inside the standard library, called from here
        assert dynscope.raised_at(err).startswith(f"at {__file__}:")
    assert dynscope.raised_at(ValueError("never raised")) == ""


def _built(target: Path) -> tuple[Any, list[Any]]:
    """The model and calls the RAISING program's build() returns."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("dynscope_test_raising", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    model, inputs = module.build()
    return model, inputs["calls"]
