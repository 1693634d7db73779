"""The worker's faust app uses the inline-drain consumer, and refuses what it cannot serve."""

from __future__ import annotations

from pathlib import Path

import faust
import pytest

from olstream.errors import ConfigError
from streams.app import build_app
from streams.drain import InlineDrainConsumer, InlineDrainTransport, use_inline_drain
from streams.settings import WorkerSettings


def test_the_worker_app_gets_the_inline_drain_transport_and_buffer(tmp_path: Path) -> None:
    settings = WorkerSettings(data_dir=str(tmp_path), app_id="unit-drain")
    sa = build_app(settings, partitions=3)
    assert isinstance(sa.app.transport, InlineDrainTransport)
    assert sa.app.transport.Consumer is InlineDrainConsumer
    assert sa.app.conf.stream_buffer_maxsize == settings.stream_buffer


def test_a_threaded_producer_is_refused(tmp_path: Path) -> None:
    app = faust.App("unit-drain-threaded", datadir=str(tmp_path), producer_threaded=True)
    with pytest.raises(ConfigError, match="unthreaded producer"):
        use_inline_drain(app)
