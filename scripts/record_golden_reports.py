"""Record the reports the renderer goldens are made from (tests/golden/reports/*.json).

    .venv/bin/python scripts/record_golden_reports.py [NAME ...]   (default: all but OLD_SCHEMA)

Renderer goldens (summary text, DOT) are generated from these stored reports, so a torch
upgrade or an edit to the corpus cannot churn them; live tests check meaning (counts,
sites) on real compiles. The repository's path is stored as "<root>" so the files do not
depend on where the repository was cloned. Re-record after a change to the report model.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import dynscope  # noqa: E402
from tests.corpus.programs import MLP, PrintModel, _x, item_fn  # noqa: E402

#: Kept at the schema they were recorded with (1): they also prove older reports load.
OLD_SCHEMA = ("print_model", "mlp")

OUT = ROOT / "tests" / "golden" / "reports"


_PRINTER: list[PrintModel] = []


def item_then_print(x: object) -> object:
    """The corpus's .item() break, then its print break (for the "advised" report)."""
    return _PRINTER[0](item_fn(x))


def _many_graphs() -> dynscope.Report:
    """Eight layers with an explicit break after each of the first seven, called at three
    batch sizes: 16 graphs, 14 break events, 8 recompiles (a program picture as long as a
    real model's)."""
    import torch
    from torch import nn

    class EightBlocks(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.l = nn.ModuleList(nn.Linear(8, 8) for _ in range(8))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = torch.relu(self.l[0](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[1](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[2](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[3](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[4](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[5](x)); torch._dynamo.graph_break()  # noqa: E702
            x = torch.relu(self.l[6](x)); torch._dynamo.graph_break()  # noqa: E702
            return torch.relu(self.l[7](x))

    return dynscope.report(EightBlocks(), calls=[_x(2, 8), _x(3, 8), _x(4, 8)])


def main() -> int:
    import torch

    torch.manual_seed(0)
    _PRINTER.append(PrintModel())
    model = PrintModel()

    def train_step(x: torch.Tensor) -> None:
        model(x).sum().backward()

    quick = dynscope.TimingOptions(end_to_end=False, repeats=5, min_time_s=0.01, min_sample_ms=1.0)
    makers = {
        "print_model": lambda: dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)]),
        "mlp": lambda: dynscope.report(MLP(), _x(4, 8)),
        # Two graphs (a print breaks them), each timed through Inductor in a training step:
        # forward and backward lowerings with kernel times.
        "lowered_train": lambda: dynscope.report(
            train_step, _x(64, 8), timing=True, timing_options=quick
        ),
        # Advised: the corpus's .item() break and print break in one program, each remedy
        # tried (Report.trials): the "What each fix buys" section.
        "advised": lambda: dynscope.advise(item_then_print, _x(4, 8)).report,
        "many_graphs": _many_graphs,
    }
    chosen = sys.argv[1:] or [n for n in makers if n not in OLD_SCHEMA]
    unknown = [n for n in chosen if n not in makers]
    if unknown:
        print(f"unknown report(s) {unknown}; choose from {list(makers)}", file=sys.stderr)
        return 2
    OUT.mkdir(parents=True, exist_ok=True)
    for name in chosen:
        rep = makers[name]()
        text = rep.to_json().replace(str(ROOT), "<root>")
        (OUT / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"{name}: {rep.graph_count} graphs, {rep.break_count} breaks -> {OUT / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
