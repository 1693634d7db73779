"""Subcommands of this package (placeholder until its issue lands)."""

from __future__ import annotations

import argparse
from typing import Any


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add this module's subcommands."""
