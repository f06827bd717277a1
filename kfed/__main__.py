"""``python -m kfed …``: the ``kfed`` command, for a process started without the installed script."""

import sys

from kfed.cli import main

sys.exit(main())
