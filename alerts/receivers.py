"""Receivers and their secrets: webhook URLs and headers name environment variables (``${VAR}``),
read only where notifications are sent, so a rules file can be checked and replayed without them."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping

from agentlat.alerts.rules import AlertConfig, AlertRulesError, Receiver
from agentlat.alerts.rules_file import ENV_REF

IMPLICIT_RECEIVER = "slack"  # the receiver AGENTLAT_SLACK_WEBHOOK stands for when a file declares none
SLACK_WEBHOOK_ENV = "AGENTLAT_SLACK_WEBHOOK"


def effective_receivers(config: AlertConfig, environ: Mapping[str, str]) -> tuple[Receiver, ...]:
    """The file's receivers, or, when it declares none, Slack at AGENTLAT_SLACK_WEBHOOK if that is set."""
    if config.receivers:
        return config.receivers
    if environ.get(SLACK_WEBHOOK_ENV):
        return (Receiver(IMPLICIT_RECEIVER, "slack", f"${{{SLACK_WEBHOOK_ENV}}}"),)
    return ()


def receiver_names(config: AlertConfig) -> tuple[str, ...]:
    """Where notifications would go, secrets aside (a replay names the implicit Slack receiver)."""
    return tuple(r.name for r in config.receivers) or (IMPLICIT_RECEIVER,)


def missing_variables(config: AlertConfig, environ: Mapping[str, str]) -> list[str]:
    """Environment variables the receivers name that are not set."""
    templates = [t for r in config.receivers for t in (r.url, *r.headers.values())]
    return sorted({name for t in templates for name in ENV_REF.findall(t) if not environ.get(name)})


def substitute(template: str, environ: Mapping[str, str], where: str) -> str:
    """``template`` with each ``${VAR}`` replaced from ``environ``; an unset variable is an error."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        if not environ.get(name):
            raise AlertRulesError(f"{where}: the environment variable {name} is not set (it holds a secret)")
        return environ[name]

    return ENV_REF.sub(value, template)


def resolved_url(config: AlertConfig, receiver: Receiver, environ: Mapping[str, str] = os.environ) -> str:
    """The receiver's URL with its variables substituted; checked to be http(s)."""
    where = f"{config.path}: receivers.{receiver.name}.url"
    url = substitute(receiver.url, environ, where)
    if not url.startswith(("http://", "https://")):
        raise AlertRulesError(f"{where}: expected an http:// or https:// URL once substituted")
    return url
