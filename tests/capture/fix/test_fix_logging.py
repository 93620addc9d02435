"""Logging in forward (issue 45 part 4): a logging.Logger method call or a logging module
function is classed a logging side effect (not "other"), guarded with
``if not torch.compiler.is_compiling():``, and fix says, tried live, whether the installed
PyTorch would reorder the Logger method instead (reorderable_logging_functions)."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import pytest

import dynscope
from dynscope._capture.fix.reorder import logger_call_method, reorders_logger_method
from dynscope._lexicon.break_categories import LOGGING, OTHER, classify

if TYPE_CHECKING:
    from pathlib import Path

# torch 2.13's words for a logging.info(...) break: nothing in them says logging.
PYTHON_TYPE = ("Unsupported python_type() call", "This VariableTracker does not implement python_type()")


@pytest.mark.parametrize("source", ['logging.info("shape %s", h.shape)', 'self.logger.warning("a")',
                                    'logger.warning_once("b")', "LOGGER.info(x)", "self._log.debug(x)",
                                    "train_logger.log(20, 'step')"])
def test_a_logging_call_is_classed_logging_whatever_dynamo_says(source: str) -> None:
    assert classify(*PYTHON_TYPE, source) == LOGGING


@pytest.mark.parametrize("source", ["catalog.info(3)", "x = blog.post(1)", "self.fc(x)"])
def test_other_calls_stay_other(source: str) -> None:
    assert classify(*PYTHON_TYPE, source) == OTHER


def test_the_logger_method_a_statement_calls() -> None:
    assert logger_call_method('logger.warning("x %s", h)') == "warning"
    assert logger_call_method("self.log.info(x)") == "info"
    assert logger_call_method('logging.info("x")') == ""  # a module function: reorderable as it is
    assert logger_call_method("print(x)") == logger_call_method("y = logger.info(x)") == ""


PROGRAM = '''import logging

import torch

logger = logging.getLogger("fixlogmod")
logger.addHandler(logging.NullHandler())
logger.propagate = False


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)

    def forward(self, x):
        h = self.fc(x)
        logger.warning("hidden norm %s", h.norm())
        logging.info("shape %s", h.shape)
        return h.relu()
'''


@pytest.mark.heavy
def test_logger_calls_in_forward_are_guarded_and_the_reorder_option_is_said(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    (tmp_path / "fixlogmod.py").write_text(PROGRAM)
    sys.path.insert(0, str(tmp_path))
    try:
        import fixlogmod  # type: ignore[import-not-found]

        res = dynscope.fix(fixlogmod.Net(), torch.ones(2, 4))
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("fixlogmod", None)
    warning, info = sorted(res.patches, key=lambda p: p.lineno)
    assert [p.category for p in (warning, info)] == [LOGGING, LOGGING]  # logging.info: not "other"
    assert all(p.verified and p.rewrite == "guard side effect" and p.breaks_after == 0 for p in (warning, info))
    assert res.breaks_after == 0
    # Which remedy this PyTorch supports is tried live, and said either way.
    version = torch.__version__.split("+")[0]
    if reorders_logger_method("warning"):
        assert warning.instead.startswith(f"PyTorch {version} reorders logging.Logger.warning (tried)")
    else:
        assert warning.instead.startswith(f"PyTorch {version} does not reorder logging.Logger.warning")
    assert info.instead == ""  # logging.info is a plain function, no Logger method
    assert "instead: PyTorch" in res.summary()
    capsys.readouterr()
