"""Logging set-up shared by every command: text or JSON lines, secrets redacted.

Every formatted line (and whatever a command passes through `redact`) loses two kinds of secret:

- the values registered with `register_secret` (API keys, passwords) and `register_url_credentials`
  (the user info of a URL: all of it, raw and percent-decoded, and its password on its own);
- the user info of any URL in the text, registered or not: `https://TOKEN@host` and
  `http://user:password@host` become `https://***@host` and `http://***@host` (a token is often
  passed as the user name, so the whole user-info part counts as a credential).
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from urllib.parse import unquote

from olstream.shared import deprecated
from olstream.shared.connection_logs import ConnectionLogFold

_SECRETS: set[str] = set()
REDACTED = "***"

# After a URL's `://`, its user info: anything up to the last `@` before the authority ends (`/`,
# `?`, `#`) or the text around the URL does (whitespace, quotes, angle brackets, backslash).
_URL_USERINFO = re.compile(r"://[^\s/?#\"'<>\\`]*@")


def register_secret(value: str | None) -> None:
    """Never let this value reach a log line (API keys, passwords)."""
    if value:
        _SECRETS.add(value)


def _authority(url: str) -> tuple[str, str, str]:
    """(what precedes the authority, the authority, what follows it); no scheme: from the start."""
    scheme, sep, rest = url.partition("://")
    head = scheme + sep if sep else ""
    if not sep:
        rest = url
    ends = [i for i in (rest.find(c) for c in "/?#") if i >= 0]
    end = min(ends, default=len(rest))
    return head, rest[:end], rest[end:]


def hide_userinfo(url: str) -> str:
    """One URL with its user info as ***: `http://user:pw@[::1]:80/p` -> `http://***@[::1]:80/p`.

    Without `://` the authority is taken from the start (`user:pw@host:5000` -> `***@host:5000`).
    The host is whatever follows the last `@` of the authority, as `urllib.parse` reads it.
    """
    head, authority, tail = _authority(url)
    if "@" not in authority:
        return url
    return f"{head}{REDACTED}@{authority.rpartition('@')[2]}{tail}"


def register_url_credentials(url: str | None, *, lone_user: bool = True) -> None:
    """Register a URL's user info with the redactor: all of it and its password, raw and decoded.

    `lone_user=False`: a user name without a password is not registered. For a PostgreSQL URL it
    names a role (the password comes from elsewhere), and a role such as `olstream` would otherwise
    vanish from every line; it is still hidden wherever the URL itself appears. For an HTTP URL a
    lone user name is usually a token (`https://TOKEN@host`), so it is registered.
    """
    if not url:
        return
    _head, authority, _tail = _authority(url)
    if "@" not in authority:
        return
    userinfo = authority.rpartition("@")[0]
    _user, _colon, password = userinfo.partition(":")
    if not password and not lone_user:
        return
    for value in (userinfo, password):
        register_secret(value)
        register_secret(unquote(value))


def redact(text: str) -> str:
    """The text without registered secrets (longest first) and without the user info of any URL."""
    for secret in sorted(_SECRETS, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return _URL_USERINFO.sub(f"://{REDACTED}@", text) if "://" in text else text


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": redact(record.getMessage()),  # before JSON escapes a secret's quotes
        }
        if record.exc_info:
            doc["exception"] = redact(self.formatException(record.exc_info))
        return redact(json.dumps(doc, ensure_ascii=False))


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger once, in a command's main(). A broker's lost connection is one
    WARNING and its end one INFO, not a line per retry of each client (`connection_logs`)."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(ConnectionLogFold(handler.handle))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "faust", "mode", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    deprecated.flush()  # the old names the settings were resolved from, now in this format
