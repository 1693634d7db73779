from __future__ import annotations

import sys

from olstream.cli import main

sys.exit(main())
