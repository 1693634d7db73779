"""The installed package's version: what `olstream --version`, `--print-config` and the
`olstream_build_info` metric of every service show."""

from __future__ import annotations

import importlib.metadata

import olstream

DISTRIBUTION = "olstream"


def package_version() -> str:
    """The version of the installed distribution (its metadata), else the package's `__version__`
    (a source tree on `sys.path` without an install), else "unknown"."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return str(getattr(olstream, "__version__", "unknown"))
