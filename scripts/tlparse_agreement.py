"""Per log: does dynscope read tlparse's own test logs as tlparse does?

    /tmp/notorch/bin/python scripts/tlparse_agreement.py TLPARSE/tests/inputs [--tlparse BIN] [--json]

TLPARSE is a checkout of https://github.com/pytorch/tlparse (its logs are not part of
dynscope). Every log under ``tests/inputs/`` (``*.log``, ``*.txt``) and every folder of rank
logs there, plus ``tests/graph_exec_order_tests/`` beside it, is read by tlparse (``--all-ranks-html``
for a folder) and by ``dynscope.load_trace`` in this interpreter: run it with a Python that has
no torch to check the reading is torch-free (the script says whether torch was imported).

Per log it prints whether the counts agree (compile ids, graph breaks, recompiles, failed
compiles, restarts: tests/tlparse_counts.py), for a folder whether the ranks agree, and each
warning tlparse's multi-rank page gives against the divergence dynscope names for it:

- "Diverging Compilation IDs"              -> graph_count or recompiles
- "Diverging Cache hit/miss patterns"      -> cache
- "Diverging collective operation sequences" -> collectives, collective_schedule or collective_order
- "divergent inductor tensor metadata"     -> inductor_tensor_meta (Inductor's kernel outputs, without
                                              the per-rank runtime estimates tlparse also compares)
                                              or tensor_metadata (the graphs' inputs)
- "Schedule mismatch" (execution order)    -> collective_order
- "Cache hit/miss mismatch" (execution order) -> cache

A log agrees when every count agrees, the ranks agree, every warning tlparse gives has its
dynscope divergence, and dynscope names no divergence tlparse has no warning for (a kind
tlparse does not check, such as guards or break sites, is listed, not held against it).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: tlparse's warning (a regex on its landing page) -> the dynscope kinds that say the same.
WARNINGS = {
    "compile ids": (r"Diverging Compilation IDs", {"graph_count", "recompiles"}),
    "cache": (r"Diverging Cache hit/miss patterns", {"cache"}),
    "collectives": (r"Diverging collective operation sequences", {"collectives", "collective_schedule", "collective_order"}),
    "tensor meta": (r"Ranks exhibit divergent inductor tensor metadata", {"tensor_metadata", "inductor_tensor_meta"}),
    "exec schedule": (r"Schedule mismatch across ranks", {"collective_order"}),
    "exec cache": (r"Cache hit/miss mismatch across ranks", {"cache"}),
}
#: dynscope kinds that some tlparse warning covers (others are not held against agreement).
COVERED = set().union(*(kinds for _, kinds in WARNINGS.values()))


def logs_of(inputs: Path) -> list[Path]:
    found = sorted(p for p in inputs.iterdir() if p.is_file() and p.suffix in {".log", ".txt"})
    found += sorted(p for p in inputs.iterdir() if p.is_dir())
    beside = inputs.parent / "graph_exec_order_tests"
    if beside.is_dir():
        found.append(beside)
    return found


def one_log(log: Path, work: Path) -> dict[str, object]:
    import dynscope
    from tests.tlparse_counts import dynscope_counts, tlparse_counts

    row: dict[str, object] = {"log": log.name, "kind": "log"}
    try:
        theirs = tlparse_counts(log, work / "tl")
    except Exception as err:  # noqa: BLE001 - tlparse itself failed: nothing to compare against
        return {**row, "agree": None, "why": f"tlparse failed: {err}"[:200]}
    try:
        rep = dynscope.load_trace(log)
    except Exception as err:  # noqa: BLE001 - any failure is this log's row, not the script's end
        return {**row, "agree": False, "why": f"dynscope raised {type(err).__name__}: {err}"[:300]}
    ours = dynscope_counts(rep)
    diffs = [f"{k}: tlparse {getattr(theirs, k)!r}, dynscope {getattr(ours, k)!r}"
             for k in theirs.__dataclass_fields__ if getattr(theirs, k) != getattr(ours, k)]
    return {**row, "agree": not diffs, "why": "; ".join(diffs)[:400]}


def one_folder(folder: Path, work: Path) -> dict[str, object]:
    import dynscope
    from tests.tlparse_counts import dynscope_counts, tlparse_rank_counts

    row: dict[str, object] = {"log": folder.name + "/", "kind": "ranks"}
    out = work / "tl"
    try:
        theirs = tlparse_rank_counts(folder, out)
    except Exception as err:  # noqa: BLE001 - any failure is this log's row, not the script's end
        return {**row, "agree": None, "why": f"tlparse failed: {err}"[:200]}
    page = (out / "index.html").read_text(encoding="utf-8", errors="replace")
    warned = [name for name, (pattern, _) in WARNINGS.items() if re.search(pattern, page)]
    try:
        merged = dynscope.load_trace(folder)
    except Exception as err:  # noqa: BLE001 - any failure is this log's row, not the script's end
        return {**row, "agree": False, "why": f"dynscope raised {type(err).__name__}: {err}"[:300]}
    if not isinstance(merged, dynscope.MultiRankReport):
        return {**row, "agree": False, "why": "dynscope read one report, tlparse ranks " + str(list(theirs))}
    kinds = {d.kind for d in merged.divergences}
    why = []
    if tuple(merged.ranks) != tuple(theirs):
        why.append(f"ranks: tlparse {list(theirs)}, dynscope {list(merged.ranks)}")
    else:
        for r in merged.ranks:
            ours = dynscope_counts(merged.report(r))
            if ours != theirs[r]:
                why.append(f"rank {r} counts differ: tlparse {theirs[r]}, dynscope {ours}")
    for name in warned:
        if not kinds & WARNINGS[name][1]:
            why.append(f"tlparse warns '{name}', dynscope says none of {sorted(WARNINGS[name][1])}")
    unwarned = sorted(k for k in kinds & COVERED if not any(k in WARNINGS[n][1] for n in warned))
    if unwarned:
        why.append(f"dynscope names {unwarned}, tlparse warns of none")
    row.update(ranks=list(theirs), tlparse_warns=warned, dynscope_kinds=sorted(kinds),
               agree=not why, why="; ".join(why)[:600])
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", type=Path, help="tlparse's tests/inputs folder")
    ap.add_argument("--tlparse", type=Path, default=None, help="the tlparse binary (default: beside python, else PATH, else .venv/bin)")
    ap.add_argument("--json", action="store_true", help="one JSON object per log instead of the table")
    args = ap.parse_args(argv)
    binary = args.tlparse or (ROOT / ".venv" / "bin" / "tlparse")
    if binary.is_file():
        os.environ["PATH"] = f"{binary.resolve().parent}{os.pathsep}{os.environ.get('PATH', '')}"
    rows = []
    for log in logs_of(args.inputs):
        with tempfile.TemporaryDirectory(prefix="tlparse-agree-") as tmp:
            try:
                row = one_folder(log, Path(tmp)) if log.is_dir() else one_log(log, Path(tmp))
            except Exception:  # noqa: BLE001 - any failure is this log's row
                row = {"log": log.name, "agree": False, "why": traceback.format_exc(limit=3)[-300:]}
        rows.append(row)
        if args.json:
            print(json.dumps(row), flush=True)
    torch_loaded = "torch" in sys.modules
    if not args.json:
        width = max(len(str(r["log"])) for r in rows)
        for r in rows:
            mark = {True: "agree", False: "DIFFER", None: "n/a"}[r["agree"]]  # type: ignore[index]
            extra = f"  tlparse warns {r['tlparse_warns']}, dynscope {r['dynscope_kinds']}" if r.get("kind") == "ranks" else ""
            print(f"{str(r['log']).ljust(width)}  {mark:6}{extra}{('  ' + str(r['why'])) if r['why'] else ''}")
    agreed = sum(1 for r in rows if r["agree"])
    print(f"{agreed} of {len(rows)} agree; torch imported: {torch_loaded}")
    return 0 if agreed == len(rows) else 1


if __name__ == "__main__":
    raise SystemExit(main())
