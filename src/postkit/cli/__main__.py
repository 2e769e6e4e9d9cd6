"""``python -m postkit.cli``: the ``postkit`` command."""

import sys

from postkit.cli import main

sys.exit(main())
