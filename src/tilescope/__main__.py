"""``python -m tilescope``: the ``tilescope`` command, for environments without its script on PATH."""

import sys

from tilescope.cli import main

sys.exit(main())
