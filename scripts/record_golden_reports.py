"""Record the reports the renderer goldens are made from (tests/golden/reports/*.json).

    .venv/bin/python scripts/record_golden_reports.py

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
from tests.corpus.programs import MLP, PrintModel, _x  # noqa: E402

OUT = ROOT / "tests" / "golden" / "reports"


def main() -> int:
    import torch

    torch.manual_seed(0)
    reports = {
        "print_model": dynscope.report(PrintModel(), calls=[_x(4, 8), _x(6, 8)]),
        "mlp": dynscope.report(MLP(), _x(4, 8)),
    }
    OUT.mkdir(parents=True, exist_ok=True)
    for name, rep in reports.items():
        text = rep.to_json().replace(str(ROOT), "<root>")
        (OUT / f"{name}.json").write_text(text, encoding="utf-8")
        print(f"{name}: {rep.graph_count} graphs, {rep.break_count} breaks -> {OUT / name}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
