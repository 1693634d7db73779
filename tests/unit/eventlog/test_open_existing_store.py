"""A command that reads an existing event log turns a URL or log it cannot open into one redacted
ConfigError line (`errors redrive --log`, `explain --log`), never a traceback with the password."""

from __future__ import annotations

from pathlib import Path

import pytest

from olstream.eventlog.stores import open_existing_store
from olstream.shared.errors import ConfigError
from olstream.shared.logs import redact


@pytest.mark.parametrize(
    "url",
    [
        "mysql://reader:s3cret@db.example/events",
        "sqlite:///{tmp}/no-such-log.db",
    ],
)
def test_a_log_that_cannot_be_opened_is_a_config_error_without_its_secret(url: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot open the event log") as caught:
        open_existing_store(url.format(tmp=tmp_path))
    assert "s3cret" not in redact(str(caught.value))
