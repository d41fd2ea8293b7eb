"""API keys: who is calling, which project they may see, and how fast they may call.

A key looks like ``alk_<id>_<secret>``. The store keeps the id, the project and a SHA-256
of the secret (the secret is 256 random bits, so a plain hash is enough; it is compared in
constant time). A project key reads and writes its own project only; an admin key may
name a project with the ``x-agentlat-project`` header or the ``project`` query parameter.
Keys travel as ``Authorization: Bearer <key>`` or ``x-agentlat-key: <key>``.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from agentlat.errors import AgentlatError
from agentlat.store import ApiKeyRecord, Store

KEY_PREFIX = "alk"
_KEY = re.compile(r"^alk_([0-9a-f]{12})_([A-Za-z0-9_-]{20,})$")
_PROJECT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
DEFAULT_PROJECT = "default"


class AuthError(AgentlatError):
    """The request may not proceed: ``status`` is 401, 403 or 429."""

    def __init__(self, status: int, message: str, retry_after: int | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.retry_after = status, message, retry_after


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def check_project_name(project: str) -> str:
    if not _PROJECT.match(project):
        raise ValueError(
            f"project {project!r}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return project


def new_key(project: str, *, admin: bool = False, name: str = "") -> tuple[str, ApiKeyRecord]:
    """A fresh key: the full key string (shown once) and the record to store."""
    key_id, secret = secrets.token_hex(6), secrets.token_urlsafe(32)
    record = ApiKeyRecord(
        key_id=key_id, project=check_project_name(project), name=name, admin=admin,
        secret_hash=hash_secret(secret), created_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip
    return f"{KEY_PREFIX}_{key_id}_{secret}", record


MIN_BOOTSTRAP_SECRET = 32


def bootstrap_admin_record(key: str, existing: Iterable[ApiKeyRecord]) -> ApiKeyRecord | None:
    """The record that makes ``key`` (chosen by the operator) a valid admin key, or None when it already is.

    For deployments that hand the stack its first admin key (``agentlat keys bootstrap``).
    Raises ValueError when the key is malformed or its secret short, or when its id belongs
    to another key or to a revoked one (a rotated-out key must not come back).
    """
    match = _KEY.match(key)
    if match is None:
        raise ValueError(f"not an agentlat key: expected {KEY_PREFIX}_<12 hex digits>_<secret>")
    key_id, secret = match.groups()
    if len(secret) < MIN_BOOTSTRAP_SECRET:
        raise ValueError(f"the secret of key {key_id} is shorter than {MIN_BOOTSTRAP_SECRET} characters")
    secret_hash = hash_secret(secret)
    for record in existing:
        if record.key_id != key_id:
            continue
        if record.revoked:
            raise ValueError(f"key {key_id} was revoked; generate a new key")
        if not (record.admin and hmac.compare_digest(record.secret_hash, secret_hash)):
            raise ValueError(f"key id {key_id} belongs to another key; generate a new key")
        return None
    return ApiKeyRecord(
        key_id=key_id, project=DEFAULT_PROJECT, name="bootstrap", admin=True, secret_hash=secret_hash,
        created_ms=time.time_ns() // 1_000_000,
    )  # fmt: skip


@dataclass(slots=True)
class _Bucket:
    tokens: float
    updated: float


class RateLimiter:
    """A token bucket per key: ``rate`` requests per second, bursts up to ``burst``."""

    def __init__(self, rate: float, burst: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self._buckets: dict[str, _Bucket] = {}
        self._lock = threading.Lock()

    def retry_after(self, key_id: str) -> int | None:
        """Take a token; None when allowed, else whole seconds until one is available."""
        if self.rate <= 0:
            return None
        now = self.clock()
        with self._lock:
            bucket = self._buckets.setdefault(key_id, _Bucket(self.burst, now))
            bucket.tokens = min(self.burst, bucket.tokens + (now - bucket.updated) * self.rate)
            bucket.updated = now
            if bucket.tokens >= 1:
                bucket.tokens -= 1
                return None
            return max(1, int((1 - bucket.tokens) / self.rate + 0.999))


class KeyRing:
    """The keys the server accepts, cached from the store.

    An unknown key id triggers a reload (at most once a second), so a key created by any
    collector sharing the store works at once; revocations are picked up within
    ``refresh_seconds``.
    """

    def __init__(self, store: Store, refresh_seconds: float = 30.0, clock: Callable[[], float] = time.monotonic):
        self.store, self.refresh_seconds, self.clock = store, refresh_seconds, clock
        self._keys: dict[str, ApiKeyRecord] = {}
        self._loaded_at = float("-inf")
        self._lock = threading.Lock()

    def load(self) -> int:
        with self._lock:
            self._keys = {k.key_id: k for k in self.store.api_keys()}
            self._loaded_at = self.clock()
            return sum(1 for k in self._keys.values() if not k.revoked)

    def find(self, key_id: str) -> ApiKeyRecord | None:
        age = self.clock() - self._loaded_at
        if age > self.refresh_seconds or (key_id not in self._keys and age > 1.0):
            self.load()
        return self._keys.get(key_id)

    def add(self, record: ApiKeyRecord) -> None:
        self.store.save_key(record)
        with self._lock:
            self._keys[record.key_id] = record

    def active(self) -> list[ApiKeyRecord]:
        self.load()
        return [k for k in self._keys.values() if not k.revoked]


@dataclass(frozen=True, slots=True)
class Caller:
    project: str
    key_id: str | None
    admin: bool


class Authenticator:
    """Turns request headers into a Caller, or raises AuthError."""

    def __init__(self, keys: KeyRing | None, limiter: RateLimiter | None = None) -> None:
        self.keys = keys  # None: keys are not required (loopback without --require-keys)
        self.limiter = limiter

    def caller(self, headers: dict[str, str] | object, project_hint: str | None) -> Caller:
        if self.keys is None:
            return Caller(DEFAULT_PROJECT, None, admin=True)
        presented = _presented_key(headers)
        if presented is None:
            raise AuthError(401, "an API key is required: send 'Authorization: Bearer <key>' (agentlat keys create)")
        record = self._verify(presented)
        retry = self.limiter.retry_after(record.key_id) if self.limiter else None
        if retry is not None:
            raise AuthError(429, f"rate limit of key {record.key_id} exceeded; retry in {retry} s", retry)
        if record.admin:
            return Caller(project_hint or DEFAULT_PROJECT, record.key_id, admin=True)
        if project_hint and project_hint != record.project:
            raise AuthError(403, f"key {record.key_id} belongs to project {record.project!r}, not {project_hint!r}")
        return Caller(record.project, record.key_id, admin=False)

    def _verify(self, presented: str) -> ApiKeyRecord:
        match = _KEY.match(presented)
        record = self.keys.find(match.group(1)) if match and self.keys else None
        if record is None or record.revoked or not hmac.compare_digest(record.secret_hash, hash_secret(match.group(2))):
            raise AuthError(401, "the API key is not valid (unknown, revoked or mistyped)")
        return record


def _presented_key(headers: object) -> str | None:
    get = headers.get  # type: ignore[attr-defined]
    bearer = get("authorization") or ""
    if bearer.lower().startswith("bearer "):
        return bearer[7:].strip()
    return get("x-agentlat-key")
