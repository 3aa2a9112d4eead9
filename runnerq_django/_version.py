"""The package's only version number: a leaf, so a module anywhere in the package (tracing names
it to OpenTelemetry) reads it without importing the package root, and pyproject.toml reads it.

Internal: not part of the public API (``runnerq_django.__version__`` is)."""

__version__ = "0.1.0"
