"""The one HTTP client of the query API, for the CLI (advise, budget checks, keys, alert replays),
the dashboard and the benchmarks.

``Call`` names one GET request under ``/api/v1`` as plain data (so a dashboard page can list
its calls and ``bench/`` can time exactly what a page asks); ``ApiClient.fetch`` runs several
at once. ``get``/``post``/``delete`` take full paths (``/api/v1/advice``). Every answer comes
back as the model of its route (``agentlat.api.models.ANSWERS``), so readers use attributes,
never keys. Every failure is an ``ApiError`` that keeps the HTTP status (0: no answer at all),
so a caller can tell "this server has no budgets" (404) from an unreachable server; an answer
that does not fit its model is one too, naming the field (the server runs another version). Keys
a newer server added are left out, not an error (``models.READING``).
Answers and errors pickle (the dashboard caches them, failures included).

httpx is imported only when a client is made: importing this module for ``Call``,
``ApiError`` or the defaults stays cheap (``agentlat --help``).
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from agentlat import __version__
from agentlat.errors import AgentlatError

if TYPE_CHECKING:
    import httpx
    from pydantic import ValidationError

    from agentlat.api.models import Answer

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
        # fetch's threads, started on first use and kept: starting threads for every page's calls costs
        self._pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="agentlat-api")

    # --- the command line: full paths ----------------------------------------------------
    def get(self, path: str, **params: Any) -> Answer:
        """GET ``path`` (``/api/v1/...``); parameters that are ``None`` are left out."""
        return self._request("GET", path, params={k: v for k, v in params.items() if v is not None})

    def post(self, path: str, body: dict[str, Any]) -> Answer:
        return self._request("POST", path, json=body)

    def delete(self, path: str) -> Answer:
        return self._request("DELETE", path)

    # --- pages: calls ----------------------------------------------------------------
    def call(self, call: Call) -> Answer:
        """The answer to one ``Call``, in its route's model."""
        return self._request("GET", f"{PREFIX}{call.path}", params=call.params)

    def fetch(self, calls: list[Call]) -> list[Answer | ApiError]:
        """Run ``calls`` concurrently; each result is the answer or the ``ApiError`` it raised."""
        if len(calls) < 2:
            return [self._answer(call) for call in calls]
        return list(self._pool.map(self._answer, calls))

    def _answer(self, call: Call) -> Answer | ApiError:
        try:
            return self.call(call)
        except ApiError as exc:
            return exc

    def close(self) -> None:
        self._pool.shutdown()
        self._client.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> Answer:
        import httpx
        from pydantic import ValidationError

        from agentlat.api.models import READING, answer_model

        try:
            response = self._client.request(method, path, **kwargs)
        except httpx.HTTPError as exc:
            raise ApiError(0, str(exc) or type(exc).__name__, path, self.base_url) from None
        if response.status_code >= 400:
            raise ApiError(response.status_code, _message(response), path, self.base_url)
        model = answer_model(method, path)
        if model is None:  # a route without its entry: a mistake in this package, not in the answer
            raise LookupError(f"no answer model for {method} {path}: add the route to agentlat.api.models.ANSWERS")
        try:
            return model.model_validate_json(response.content, context=READING)
        except ValidationError as exc:
            not_json = exc.errors()[0]["type"] == "json_invalid"
            why = f"not JSON: {response.text[:_SHOWN_CHARS]!r}" if not_json else _misfit(exc)
            raise ApiError(response.status_code, why, path, self.base_url) from None


def _misfit(exc: ValidationError) -> str:
    """Which field of an answer did not fit its model (the first; how many more), and why that happens."""
    first, *rest = exc.errors(include_url=False)
    field = ".".join(map(str, first["loc"])) or "the answer"
    got = "" if first["type"] in ("missing", "extra_forbidden") else f" (got {_shown(first['input'])})"
    more = f" (and {len(rest)} more field{'s' if len(rest) != 1 else ''})" if rest else ""
    return (
        f"the answer does not fit {exc.title} at {field}: {first['msg']}{got}{more}; the server runs another "
        f"version of agentlat than this client ({__version__}): run the same version on both"
    )


def _shown(value: Any, chars: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= chars else text[: chars - 1] + "…"


def _message(response: httpx.Response) -> str:
    """The server's own words: the query API's ``{"error": {"message": ...}}``, else the body's start."""
    try:
        return str(response.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return response.text[:_SHOWN_CHARS] or response.reason_phrase
