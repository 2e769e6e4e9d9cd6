"""``python -m postkit``: the ``postkit`` command, as ``python -m postkit.cli`` runs it."""

import sys

from postkit.cli import main

sys.exit(main())
