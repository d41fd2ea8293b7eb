"""A small client of the query API for the command line (advise, budget checks)."""

from __future__ import annotations

import os
from typing import Any

import httpx

from agentlat.errors import AgentlatError


class ApiError(AgentlatError):
    """The agentlat API could not be reached or refused the request."""


class ApiClient:
    """Sends AGENTLAT_API_KEY (or ``api_key``) as a Bearer token when set."""

    def __init__(self, base_url: str, api_key: str | None = None, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        key = api_key or os.environ.get("AGENTLAT_API_KEY")
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    def get(self, path: str, **params: Any) -> dict[str, Any]:
        return self._request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, json=body)

    def delete(self, path: str) -> dict[str, Any]:
        return self._request("DELETE", path)

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._client.request(method, path, **kwargs)
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
