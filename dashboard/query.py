"""The dashboard's only way to data: GET requests to the agentlat query API (``/api/v1``).

``Call`` names one request; pages list their calls as plain data (so ``bench/`` can time
exactly what a page asks) and ``Api.fetch`` runs several at once. Errors keep the HTTP
status, so a page can tell "this server has no budgets" (404) from a broken request.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import httpx

from agentlat.errors import AgentlatError

DEFAULT_API = "http://127.0.0.1:4318"
ENV_API = "AGENTLAT_API"
ENV_KEY = "AGENTLAT_API_KEY"


class ApiError(AgentlatError):
    """The query API refused a request; ``status`` is its HTTP status (0: no answer at all)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type, tuple[int, str]]:  # picklable, so answers can be cached
        return type(self), (self.status, str(self))


@dataclass(frozen=True, slots=True)
class Call:
    """One GET request to the query API: a path under ``/api/v1`` and its query parameters."""

    path: str
    params: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, path: str, **params: str | int | None) -> Call:
        """A call with the given parameters, leaving out empty ones (``None`` or ``""``)."""
        kept = tuple(sorted((k, str(v)) for k, v in params.items() if v not in (None, "")))
        return cls(path, kept)


def api_url() -> str:
    """The API base URL: env ``AGENTLAT_API``, else the collector's default address."""
    return os.environ.get(ENV_API, "").strip() or DEFAULT_API


class Api:
    """A small synchronous client of the query API; sends ``AGENTLAT_API_KEY`` as a Bearer token when set."""

    def __init__(self, base_url: str, timeout: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        key = os.environ.get(ENV_KEY, "").strip()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=self.base_url, timeout=timeout, headers=headers)

    def get(self, call: Call) -> dict[str, Any]:
        try:
            response = self._client.get(f"/api/v1{call.path}", params=call.params)
        except httpx.HTTPError:
            raise ApiError(0, f"cannot reach agentlat at {self.base_url}") from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response))
        return response.json()

    def fetch(self, calls: list[Call]) -> list[dict[str, Any] | ApiError]:
        """Run ``calls`` concurrently; each result is the JSON body or the ``ApiError`` it raised."""
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(calls)))) as pool:
            return list(pool.map(self._answer, calls))

    def _answer(self, call: Call) -> dict[str, Any] | ApiError:
        try:
            return self.get(call)
        except ApiError as exc:
            return exc

    def close(self) -> None:
        self._client.close()


def _message(response: httpx.Response) -> str:
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:300] or response.reason_phrase
