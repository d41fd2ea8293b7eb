"""Key administration over HTTP (admin keys only): create, list, revoke.

In embedded mode the server owns the store, so this is how keys are managed while it
runs; ``agentlat keys`` uses it with ``--api``.
"""

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from agentlat.server.auth import Authenticator, Caller, new_key


class NewKey(BaseModel):
    project: str = Field(description="the project the key reads and writes")
    admin: bool = Field(False, description="an admin key may act on every project")
    name: str = Field("", max_length=200, description="what the key is for")


def make_router(authenticator: Authenticator, caller_of: Callable[[Request], Caller]) -> APIRouter:
    router = APIRouter(prefix="/api/v1/keys", tags=["keys"])

    def admin(request: Request) -> Caller:
        if authenticator.keys is None:
            raise HTTPException(404, "API keys are off on this server (it binds loopback without --require-keys)")
        caller = caller_of(request)
        if not caller.admin:
            raise HTTPException(403, "managing keys needs an admin key")
        return caller

    Admin = Annotated[Caller, Depends(admin)]

    @router.post("", summary="create a key (the secret is shown once)", status_code=201)
    async def create(body: NewKey, caller: Admin) -> dict[str, Any]:
        try:
            key, record = new_key(body.project, admin=body.admin, name=body.name)
        except ValueError as exc:
            raise HTTPException(400, str(exc)) from None
        await run_in_threadpool(authenticator.keys.add, record)
        return {"key": key, **_public(record)}

    @router.get("", summary="list keys (never their secrets)")
    async def listing(caller: Admin) -> dict[str, Any]:
        keys = await run_in_threadpool(authenticator.keys.active)
        return {"keys": [_public(k) for k in keys]}

    @router.delete("/{key_id}", summary="revoke a key")
    async def revoke(key_id: str, caller: Admin) -> dict[str, Any]:
        record = authenticator.keys.find(key_id)
        if record is None or record.revoked:
            raise HTTPException(404, f"no active key {key_id!r}")
        await run_in_threadpool(authenticator.keys.add, record.revoke())
        return {"revoked": key_id}

    return router


def _public(record: Any) -> dict[str, Any]:
    return {"key_id": record.key_id, "project": record.project, "admin": record.admin, "name": record.name,
            "created_ms": record.created_ms}  # fmt: skip
