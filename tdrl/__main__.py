"""``python -m tdrl``: the same command line as the ``tdrl`` console script."""

import sys

from tdrl.train.cli import main

sys.exit(main())
