"""``python -m devstack run`` (what ``make run`` calls) and ``python -m devstack services``."""

import sys

from devstack.run import main

sys.exit(main())
