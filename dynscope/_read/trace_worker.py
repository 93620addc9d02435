"""Read TORCH_TRACE logs in child processes for ``load_trace`` (a large job's folder).

Each worker is ``python -m dynscope._read.trace_worker OUT FILE...``: a fresh interpreter
(never a fork of the caller, which may hold threads or torch state, and never one that runs
the caller's ``__main__`` again, as multiprocessing's spawn does for a script without an
``if __name__ == "__main__":`` guard). It reads its files one by one and appends each rank's
report to OUT as a pickle, so a worker holds one report at a time and the parent takes them
in one by one too.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dynscope._errors import DynscopeError

if TYPE_CHECKING:
    from collections.abc import Callable

    from dynscope._model import Report


def _shares(files: list[str], workers: int) -> list[list[str]]:
    """The files split into ``workers`` lists of about equal bytes (largest first, each to
    the lightest list)."""
    loads = [0] * workers
    parts: list[list[str]] = [[] for _ in range(workers)]
    for f in sorted(files, key=lambda f: -os.path.getsize(f)):
        i = loads.index(min(loads))
        parts[i].append(f)
        loads[i] += os.path.getsize(f)
    return [p for p in parts if p]


def read_in_workers(files: list[str], workers: int, take: Callable[[Report], Report]) -> dict[str, Report | str]:
    """path -> its rank's report (or why it could not be read: the worker's message), read
    by ``workers`` child processes; each report passes through ``take`` as it is read back.
    Files of a worker that died are left out (the caller reads them itself)."""
    env = dict(os.environ)
    # The child imports the same dynscope as this process, wherever it is installed
    # (this file is dynscope/_read/trace_worker.py: the folder above dynscope/).
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    got: dict[str, Report | str] = {}
    with tempfile.TemporaryDirectory(prefix="dynscope-trace-") as tmp:
        procs = []
        for i, part in enumerate(_shares(files, workers)):
            out = Path(tmp) / f"worker-{i}.pickle"
            cmd = [sys.executable, "-m", "dynscope._read.trace_worker", str(out), *part]
            # Output dropped: results come back in OUT; a worker that fails leaves its files to the caller.
            procs.append((subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out))
        for proc, out in procs:
            proc.wait()
            if not out.exists():
                continue
            with out.open("rb") as f:
                while True:
                    try:
                        item = pickle.load(f)
                    except EOFError:
                        break
                    except pickle.UnpicklingError:  # cut short by a worker that died mid-write
                        break
                    got[item[1]] = item[2] if item[0] == "error" else take(item[2])
    return got


def main(argv: list[str]) -> int:
    """Read each file of ``argv[1:]`` and append ("ok", path, report) or ("error", path,
    message) to the file ``argv[0]``."""
    from dynscope._read.trace_report import rank_report, unreadable_why

    out, files = argv[0], argv[1:]
    with open(out, "wb") as f:
        for path in files:
            item: tuple[Any, ...]
            try:
                item = ("ok", path, rank_report(path))
            except (DynscopeError, OSError) as err:
                item = ("error", path, unreadable_why(Path(path), err))
            pickle.dump(item, f, protocol=pickle.HIGHEST_PROTOCOL)
            f.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
