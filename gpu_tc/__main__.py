"""``python -m gpu_tc``: the same as the ``gpu-tc`` command."""

from __future__ import annotations

import sys

from .cli import main

sys.exit(main())
