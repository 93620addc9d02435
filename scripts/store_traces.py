"""Store recorded trace records as test data: only the events dynscope reads.

    python scripts/record_payloads.py /tmp/payloads-2.14.jsonl   # under torch 2.14's venv
    python scripts/store_traces.py /tmp/payloads-2.14.jsonl       # -> tests/traces/torch-2.14/

One file per program, ``tests/traces/torch-<major.minor>/<program>.jsonl``, each line
``{"metadata": ..., "payload": ...}`` as PyTorch logged it. Parser and assembly tests read
these without compiling anything (tests/read/test_recorded_traces.py).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path

from dynscope._torch.trace import event_from

ROOT = Path(__file__).resolve().parent.parent


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(__doc__)
        return 2
    by_program: dict[str, list[str]] = defaultdict(list)
    version = ""
    for line in Path(argv[1]).read_text(encoding="utf-8").splitlines():
        record = json.loads(line)
        version = version or ".".join(str(record["torch"]).split("+")[0].split(".")[:2])
        if event_from(record["metadata"], record["payload"]) is None:
            continue
        kept = {"metadata": record["metadata"], "payload": record["payload"]}
        by_program[record["program"]].append(json.dumps(kept, sort_keys=True))
    folder = ROOT / "tests" / "traces" / f"torch-{version}"
    folder.mkdir(parents=True, exist_ok=True)
    for program, lines in sorted(by_program.items()):
        (folder / f"{program}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"{len(by_program)} programs -> {folder}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
