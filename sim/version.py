"""The package's version: a bottom-layer module, so that any layer may name it."""

from __future__ import annotations

__version__ = "0.1.0"
