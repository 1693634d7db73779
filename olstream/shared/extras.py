"""The optional extras of the wheel, and the one-line error when a command needs a missing one.

`pip install olstream` brings what the services and the operations commands use. The local tools
(`olstream demo`'s picture, `olstream graph`) need more: `pip install 'olstream[local]'`
(pyproject.toml's `[project.optional-dependencies]`).
"""

from __future__ import annotations

import importlib
from types import ModuleType

from olstream.shared.errors import MissingExtraError

EXTRA_OF: dict[str, str] = {
    "graphviz": "local",  # olstream graph, and olstream demo's picture
    "authlib": "schema-registry",  # --schema-registry: confluent-kafka's SchemaRegistryClient
}
"""A module (its top-level name) that only an extra installs -> the extra."""


def install_hint(package: str) -> str:
    """What a missing package of an extra needs: "needs the Python package ... pip install ..."."""
    extra = EXTRA_OF[package]
    return (
        f"needs the Python package {package} of the extra `{extra}`, not installed: "
        f"pip install 'olstream[{extra}]'"
    )


def missing_extra_message(module: str, purpose: str) -> str:
    return f"{purpose} {install_hint(module.partition('.')[0])}"


def require(module: str, purpose: str) -> ModuleType:
    """Import a module of an extra; a MissingExtraError (one line, exit 2) names the extra to install."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module.partition(".")[0]:
            raise  # something else is missing (a submodule of an installed package): a defect
        raise MissingExtraError(missing_extra_message(module, purpose)) from e


def extra_of_missing(error: ModuleNotFoundError) -> str | None:
    """The extra that installs the package `error` names, else None (no extra's package).

    A missing package is named by its top-level name; a submodule missing from an installed package
    is a defect, never an extra left out.
    """
    return EXTRA_OF.get(error.name or "")
