"""``python -m app.cli ...``: the same as the ``recall`` console script."""

import sys

from app.cli import main

sys.exit(main())
