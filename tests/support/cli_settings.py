"""The settings value `olstream worker` and `olstream source` resolve from parsed flags, and a parser
holding only `olstream source`: for unit tests of the flags."""

from __future__ import annotations

import argparse
import os

from olstream.cli import source
from olstream.connectors.source.settings import SourceSettings, resolve_source_settings
from olstream.streams.settings import WorkerSettings, resolve_worker_settings


def build_settings(args: argparse.Namespace) -> WorkerSettings:
    """The worker's one settings value: flags, then OLSTREAM_* variables, then the file, then defaults."""
    return resolve_worker_settings(vars(args), os.environ)[0]


def settings_from_args(args: argparse.Namespace) -> SourceSettings:
    """The source's one settings value: flags, then OLSTREAM_* variables, then the file, then defaults."""
    return resolve_source_settings(vars(args), os.environ)[0]


def build_parser_for_tests() -> argparse.ArgumentParser:
    """A parser holding only `olstream source`."""
    parser = argparse.ArgumentParser(prog="olstream")
    source.register(parser.add_subparsers(dest="command"))
    return parser
