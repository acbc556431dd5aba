"""``python -m ayo``: the command line (``ayo/cli/main.py``)."""

import sys

from ayo.cli.main import main

sys.exit(main())
