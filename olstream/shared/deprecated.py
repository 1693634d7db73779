"""Old names that still work for one release: each use is one WARNING naming the new name.

A setting renamed in this release keeps its old environment variable, flag and file key
(`olstream.shared.config.Old`); the resolver and the parser call `note` when one is used. Settings
are resolved before logging is set up (which needs the resolved log format), so the warnings wait
until `olstream.shared.logs.setup_logging` calls `flush`; a command that ends before it does (say
`--print-config`) flushes them on its way out (`olstream.cli.main`). Each old name is warned about
once per process, whatever number of times the settings are resolved. A warning names the old and
the new name, never the value (it may be a secret).
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)

_pending: list[str] = []
_seen: set[str] = set()
_flushed = False


def note(old: str, message: str) -> None:
    """One warning about the old name `old`: logged now when logging is set up, else at `flush`."""
    if old in _seen:
        return
    _seen.add(old)
    if _flushed:
        log.warning("%s", message)
    else:
        _pending.append(message)


def flush() -> None:
    """Log the warnings noted so far; later ones are logged as they are noted."""
    global _flushed
    _flushed = True
    while _pending:
        log.warning("%s", _pending.pop(0))


def reset() -> None:
    """Forget what was noted and warned (for tests: each runs as a new process would)."""
    global _flushed
    _pending.clear()
    _seen.clear()
    _flushed = False


def used(what: str, old: str, new: str, both: bool = False) -> None:
    """`what` (a flag, an environment variable, a file's key) was given by its old name `old`: one
    warning, that says to use `new` instead, or that `new`, set too, wins."""
    if both:
        note(old, f"{what} {old} is deprecated and ignored: {new} is set too and wins (remove {old})")
    else:
        note(old, f"{what} {old} is deprecated: use {new} (the old name works for this release only)")


def first_given(what: str, new: str, value: Any, old: str, old_value: Any) -> tuple[Any, str] | None:
    """(value, name) of the new name when given, else of the old one (warned about), else None; an
    empty value counts as not given."""
    given = value not in (None, "")
    if old and old_value not in (None, ""):
        used(what, old, new, both=given)
        if not given:
            return old_value, old
    return (value, new) if given else None
