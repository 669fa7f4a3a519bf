"""A supervisor for prewarmed code-execution runners on HashiCorp Nomad."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("nomad-runner-supervisor")
except PackageNotFoundError:  # pragma: no cover - running from a source tree that is not installed
    __version__ = "0+unknown"

__all__ = ["__version__"]
