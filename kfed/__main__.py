"""``python -m kfed …``: the ``kfed`` command, for a process started without the installed script."""

import sys

from .cli import main

sys.exit(main())
