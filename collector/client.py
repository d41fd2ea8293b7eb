"""A small client of the query API for the command line (advise, budget checks)."""

from __future__ import annotations

from typing import Any

import httpx

from agentlat.errors import AgentlatError


class ApiError(AgentlatError):
    """The agentlat API could not be reached or refused the request."""


class ApiClient:
    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        clean = {k: v for k, v in params.items() if v is not None}
        try:
            response = self._client.get(path, params=clean)
        except httpx.HTTPError as exc:
            raise ApiError(
                f"cannot reach agentlat at {self.base_url} ({exc}); start it with `agentlat serve` or pass --api URL"
            ) from None
        if response.status_code >= 400:
            try:
                message = response.json()["error"]["message"]
            except (ValueError, KeyError, TypeError):
                message = response.text[:500]
            raise ApiError(f"{path} answered {response.status_code}: {message}")
        return response.json()
