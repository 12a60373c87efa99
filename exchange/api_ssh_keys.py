"""The buyer's saved SSH keys through the API (docs/api.md): the same services as the account page."""

from ninja import Router, Schema
from ninja.responses import Status

from marketplace.api_support import READ, TRADE, InputSchema, UtcTime, token_of

from . import selectors
from .services import ssh_key_add, ssh_key_delete

router = Router(tags=["account"])

EXAMPLE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrXkXBRUA+dKBjOE4u2cWO/jfw4b44Exy8A93yf490V me@laptop"


class SshKeyOut(Schema):
    id: int
    name: str
    fingerprint: str
    public_key: str
    created_at: UtcTime

    model_config = {"json_schema_extra": {"examples": [{
        "id": 7, "name": "laptop", "fingerprint": "SHA256:xv3GIuUInXDBrWh+xKjGhUvId9hZWAYoxo/gut09oAA",
        "public_key": EXAMPLE_KEY, "created_at": "2026-12-01T21:00:00Z",
    }]}}


class SshKeyIn(InputSchema):
    name: str
    public_key: str

    model_config = {"json_schema_extra": {"examples": [{"name": "laptop", "public_key": EXAMPLE_KEY}]}}


class SshKeyList(Schema):
    items: list[SshKeyOut]


@router.get("/ssh-keys", response=SshKeyList, auth=READ, operation_id="ssh_keys_list",
            summary="Your saved SSH public keys (at most 20, by name)")
def ssh_keys_list(request):
    return {"items": list(selectors.ssh_keys_for_buyer(buyer=token_of(request).user))}


@router.post("/ssh-keys", response={201: SshKeyOut}, auth=TRADE, operation_id="ssh_key_add",
             summary="Save an SSH public key to use on orders")
def ssh_key_create(request, body: SshKeyIn):
    key = ssh_key_add(buyer=token_of(request).user, name=body.name, public_key=body.public_key)
    return Status(201, key)


@router.delete("/ssh-keys/{key_id}", response={204: None}, auth=TRADE, operation_id="ssh_key_delete",
               summary="Delete a saved SSH key (rentals keep the key they were given)")
def ssh_key_remove(request, key_id: int):
    ssh_key_delete(buyer=token_of(request).user, key_id=key_id)
    return Status(204, None)
