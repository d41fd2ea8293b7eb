"""The one HTTP client of the query API, for the CLI (advise, budget checks, keys, alert replays),
the dashboard and the benchmarks.

``Call`` names one GET request under ``/api/v1`` as plain data (so a dashboard page can list
its calls and ``bench/`` can time exactly what a page asks); ``ApiClient.fetch`` runs several
at once. ``get``/``post``/``delete`` take full paths (``/api/v1/advice``). Every failure is an
``ApiError`` that keeps the HTTP status (0: no answer at all), so a caller can tell "this
server has no budgets" (404) from an unreachable server, and that pickles (the dashboard
caches answers, failures included).

httpx is imported only when a client is made: importing this module for ``Call``,
``ApiError`` or the defaults stays cheap (``agentlat --help``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlat.errors import AgentlatError

if TYPE_CHECKING:
    import httpx

DEFAULT_API = "http://127.0.0.1:4318"
ENV_API = "AGENTLAT_API"
ENV_KEY = "AGENTLAT_API_KEY"
PREFIX = "/api/v1"
_SHOWN_CHARS = 500


class ApiError(AgentlatError):
    """The query API could not be reached or refused a request.

    ``status`` is the HTTP status (0: no answer at all), ``message`` what the server said (or
    why nothing answered), ``path`` the request's path and ``base_url`` the server asked; the
    text (``str``) puts them together with what to do about it.
    """

    def __init__(self, status: int, message: str, path: str = "", base_url: str = "") -> None:
        self.status, self.message, self.path, self.base_url = status, message, path, base_url
        super().__init__(_text(status, message, path, base_url))

    def __reduce__(self) -> tuple[type, tuple[int, str, str, str]]:  # picklable, so answers can be cached
        return type(self), (self.status, self.message, self.path, self.base_url)


def _text(status: int, message: str, path: str, base_url: str) -> str:
    if status == 0:
        where = f" at {base_url}" if base_url else ""
        why = f" ({message})" if message else ""
        return (
            f"cannot reach agentlat{where}{why}; start it with `agentlat up` or `agentlat serve`, "
            f"or name another server with --api URL (env {ENV_API})"
        )
    return f"{path} answered {status}: {message}" if path else message


@dataclass(frozen=True, slots=True)
class Call:
    """One GET request to the query API: a path under ``/api/v1`` and its query parameters."""

    path: str
    params: tuple[tuple[str, str], ...] = field(default=())

    @classmethod
    def of(cls, path: str, **params: str | int | float | None) -> Call:
        """A call with the given parameters, leaving out empty ones (``None`` or ``""``)."""
        kept = tuple(sorted((k, str(v)) for k, v in params.items() if v not in (None, "")))
        return cls(path, kept)


def api_url(url: str | None = None) -> str:
    """The API base URL: ``url`` when given, else env ``AGENTLAT_API``, else the collector's default address."""
    return (url or os.environ.get(ENV_API, "")).strip().rstrip("/") or DEFAULT_API


class ApiClient:
    """A small synchronous client of the query API; sends the key (``api_key``, else
    ``AGENTLAT_API_KEY``) as a Bearer token when there is one."""

    def __init__(self, base_url: str | None = None, api_key: str | None = None, timeout: float = 30.0) -> None:
        import httpx

        self.base_url = api_url(base_url)
        key = (api_key or os.environ.get(ENV_KEY, "")).strip()
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._client = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout)

    # --- the command line: full paths ----------------------------------------------------
    def get(self, path: str, **params: Any) -> dict[str, Any]:
        """GET ``path`` (``/api/v1/...``); parameters that are ``None`` are left out."""
        return self._request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._request("POST", path, json=body)

    def delete(self, path: str) -> dict[str, Any]:
        return self._request("DELETE", path)

    # --- pages: calls ----------------------------------------------------------------
    def call(self, call: Call) -> dict[str, Any]:
        """The JSON answer to one ``Call``."""
        return self._request("GET", f"{PREFIX}{call.path}", params=call.params)

    def fetch(self, calls: list[Call]) -> list[dict[str, Any] | ApiError]:
        """Run ``calls`` concurrently; each result is the JSON body or the ``ApiError`` it raised."""
        with ThreadPoolExecutor(max_workers=max(1, min(8, len(calls)))) as pool:
            return list(pool.map(self._answer, calls))

    def _answer(self, call: Call) -> dict[str, Any] | ApiError:
        try:
            return self.call(call)
        except ApiError as exc:
            return exc

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        import httpx

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, str(exc) or type(exc).__name__, path, self.base_url) from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response), path, self.base_url)
        try:
            return response.json()
        except ValueError:
            raise ApiError(
                response.status_code, f"not JSON: {response.text[:_SHOWN_CHARS]!r}", path, self.base_url
            ) from None


def _message(response: httpx.Response) -> str:
    """The server's own words: the query API's ``{"error": {"message": ...}}``, else the body's start."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:_SHOWN_CHARS] or response.reason_phrase
