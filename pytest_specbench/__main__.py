"""``python -m pytest_specbench merge|compare|verify-curve|gpu-check``: see :mod:`pytest_specbench.cli`."""

import sys

from .cli import main

sys.exit(main())
