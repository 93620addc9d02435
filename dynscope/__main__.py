"""``python -m dynscope`` is the ``dynscope`` command."""

import sys

from dynscope._cli import main

sys.exit(main())
