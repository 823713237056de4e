"""``python -m devstack run`` (what ``make run`` calls) and ``python -m devstack services``."""

import sys

from devstack.cli import main

sys.exit(main())
