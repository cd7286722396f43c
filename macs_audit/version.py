"""The package's version, in a module of its own: the report's `tool.version` and `--version` read it here, without
importing the package's root (which serves the Python API)."""

__version__ = "0.1.0"
