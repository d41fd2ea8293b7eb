"""The version of agentlat (one place; ``agentlat.__version__`` re-exports it)."""

__version__ = "0.1.0"
