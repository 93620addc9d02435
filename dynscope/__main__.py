"""``python -m dynscope`` is the ``dynscope`` command."""

import sys

from dynscope.cli import main

sys.exit(main())
