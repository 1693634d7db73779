from __future__ import annotations

import sys

from olstream.cli.main import main

sys.exit(main())
