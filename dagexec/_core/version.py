"""The package version, in the lowest layer so that every layer may name it."""

__version__ = "0.1.0"
