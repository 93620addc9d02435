"""The command line: report, show, diff, render; errors are one line with exit 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import dynscope
from dynscope._cli import main
from tests.corpus.markers import break_line
from tests.corpus.programs import MLP, PrintModel, _x

ROOT = Path(__file__).resolve().parent.parent


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
