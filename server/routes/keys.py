"""Key administration over HTTP (admin keys only): create, list, revoke.

In embedded mode the server owns the store, so this is how keys are managed while it
runs; ``agentlat keys`` uses it with ``--api``.
"""

from typing import Annotated, Any

from fastapi import APIRouter, Depends, HTTPException, Request
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from agentlat.api.models import CreatedKey, KeysResponse, RevokedKey
from agentlat.server.auth import Caller, new_key
from agentlat.server.routes.deps import AuthenticatorDep, caller_of, errors

router = APIRouter(prefix="/api/v1/keys", tags=["keys"], responses=errors(400, 401, 403, 404, 429, 500, 503))


class NewKey(BaseModel):
    project: str = Field(description="the project the key reads and writes")
    admin: bool = Field(False, description="an admin key may act on every project")
    name: str = Field("", max_length=200, description="what the key is for")


def admin(request: Request, authenticator: AuthenticatorDep) -> Caller:
    if authenticator.keys is None:
        raise HTTPException(404, "API keys are off on this server (it binds loopback without --require-keys)")
    caller = caller_of(request)
    if not caller.admin:
        raise HTTPException(403, "managing keys needs an admin key")
    return caller


Admin = Annotated[Caller, Depends(admin)]


@router.post("", summary="create a key (the secret is shown once)", status_code=201, response_model=CreatedKey)
async def create(body: NewKey, caller: Admin, authenticator: AuthenticatorDep) -> dict[str, Any]:
    try:
        key, record = new_key(body.project, admin=body.admin, name=body.name)
    except ValueError as exc:
        raise HTTPException(400, str(exc)) from None
    await run_in_threadpool(authenticator.keys.add, record)
    return {"key": key, **_public(record)}


@router.get("", summary="list keys (never their secrets)", response_model=KeysResponse)
async def listing(caller: Admin, authenticator: AuthenticatorDep) -> dict[str, Any]:
    keys = await run_in_threadpool(authenticator.keys.active)
    return {"keys": [_public(k) for k in keys]}


@router.delete("/{key_id}", summary="revoke a key", response_model=RevokedKey)
async def revoke(key_id: str, caller: Admin, authenticator: AuthenticatorDep) -> dict[str, Any]:
    record = authenticator.keys.find(key_id)
    if record is None or record.revoked:
        raise HTTPException(404, f"no active key {key_id!r}")
    await run_in_threadpool(authenticator.keys.add, record.revoke())
    return {"revoked": key_id}


def _public(record: Any) -> dict[str, Any]:
    return {"key_id": record.key_id, "project": record.project, "admin": record.admin, "name": record.name,
            "created_ms": record.created_ms}  # fmt: skip
