"""``python -m dynscope.watch script.py [args...]``: run a script with ``watch_ranks()`` on.

The same as ``python script.py [args...]``, with every Dynamo compile of the process
compared across the ranks of the job (``dynscope.watch_ranks``): under torchrun,
``torchrun --nproc-per-node=8 -m dynscope.watch train.py --lr 3e-4``. Options through the
environment: ``DYNSCOPE_WATCH_WAIT_S`` (seconds, default 60), ``DYNSCOPE_WATCH_ON``
(``raise`` or ``warn``), ``DYNSCOPE_WATCH_FOLDER`` (where reports are saved on a divergence).
"""

from __future__ import annotations

import os
import runpy
import sys


def main(argv: list[str] | None = None) -> None:
    """Run ``argv[0]`` as ``__main__`` with the rest as its arguments, under the watch."""
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help"):
        print(__doc__.strip().splitlines()[0])
        print("usage: python -m dynscope.watch SCRIPT.py [ARGS...]")
        raise SystemExit(0 if args else 2)
    script = args[0]
    if not os.path.isfile(script):
        print(f"dynscope.watch: {script} is not a file; give the script to run (python -m dynscope.watch train.py ...)",
              file=sys.stderr)
        raise SystemExit(2)
    os.environ["DYNSCOPE_WATCH_RANKS"] = "1"  # also for the processes the script starts
    from dynscope._capture.watch import watch_from_env

    watch_from_env()
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
