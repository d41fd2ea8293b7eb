"""The root of every error agentlat raises on purpose."""

from __future__ import annotations


class AgentlatError(Exception):
    """Base class of agentlat's own errors; catch this to catch them all."""


class ConfigError(AgentlatError):
    """A setting has a value agentlat cannot use; the message names it and what is expected."""
