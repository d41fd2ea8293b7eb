"""How API keys are kept: an id, the project, and a hash of the secret (never the secret).

``KeyAdmin`` is the part of ``Store`` (store/__init__.py) that saves and lists them."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from agentlat.store.backends import Backend

KEY_ROW_SCHEMA = pa.schema(
    [
        ("KeyId", pa.string()),
        ("ProjectId", pa.string()),
        ("Name", pa.string()),
        ("Admin", pa.uint8()),
        ("SecretHash", pa.string()),
        ("CreatedAt", pa.timestamp("ms", tz="UTC")),
        ("Revoked", pa.uint8()),
        ("Version", pa.uint64()),
    ]
)


@dataclass(frozen=True, slots=True)
class ApiKeyRecord:
    key_id: str
    project: str
    name: str
    admin: bool
    secret_hash: str
    created_ms: int
    revoked: bool = False
    version: int = 1

    def revoke(self) -> ApiKeyRecord:
        return replace(self, revoked=True, version=self.version + 1)

    def row(self) -> dict[str, Any]:
        return {
            "KeyId": self.key_id,
            "ProjectId": self.project,
            "Name": self.name,
            "Admin": int(self.admin),
            "SecretHash": self.secret_hash,
            "CreatedAt": self.created_ms,
            "Revoked": int(self.revoked),
            "Version": self.version,
        }

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> ApiKeyRecord:
        return cls(
            key_id=row["KeyId"],
            project=row["ProjectId"],
            name=row["Name"],
            admin=bool(row["Admin"]),
            secret_hash=row["SecretHash"],
            created_ms=row["CreatedMs"],
            revoked=bool(row["Revoked"]),
            version=row["Version"],
        )


class KeyAdmin:
    """The ``agentlat_api_keys`` table: every version of every key; the newest wins."""

    backend: Backend

    def save_key(self, key: ApiKeyRecord) -> None:
        """Insert a key, or a newer version of it (revocation)."""
        table = pa.Table.from_pylist([key.row()], schema=KEY_ROW_SCHEMA)
        self.backend.insert_arrow("agentlat_api_keys", table)

    def api_keys(self) -> list[ApiKeyRecord]:
        rows = self.backend.query_arrow(
            "SELECT KeyId, ProjectId, Name, Admin, SecretHash, toUnixTimestamp64Milli(CreatedAt) AS CreatedMs, "
            "Revoked, Version FROM agentlat_api_keys FINAL ORDER BY CreatedAt"
        ).to_pylist()
        return [ApiKeyRecord.from_row(row) for row in rows]
