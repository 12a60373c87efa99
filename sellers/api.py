"""The seller's own operations of the API: the seller a `sell` token acts for and its servers
(docs/api.md, "Seller"). Entry points only: the rules are `sellers.services.server_register`'s,
exactly as the portal's registration form calls it."""

from typing import Annotated

from django.utils.translation import gettext_lazy as _
from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict

from catalog.selectors import gpu_model_get
from marketplace.api_support import (
    SELL,
    TOKEN_ERRORS,
    ApiProblem,
    InputSchema,
    ObjectId,
    Page,
    PageCursor,
    PageLimit,
    Problem,
    ShareText,
    page_of,
    share,
    token_of,
    whole_number,
)

from .models import Region, Server
from .selectors import server_get_for_seller, servers_for_seller
from .services import SERVER_DETAIL_LIMITS, server_register

router = Router(tags=["seller"], auth=SELL)

# Text on one line, as a form's text input sends it: no control characters (they would reach the
# database, which refuses NUL). Lengths are the service's rules, with their translated messages;
# this cap only keeps the body reasonable.
OneLine = Annotated[str, Field(max_length=1000, pattern=r"^[^\x00-\x1f\x7f]*$")]


class SellerOut(Schema):
    slug: str = Field(examples=["lisbon-gpu-lda"])
    name: str = Field(examples=["Lisbon GPU Lda"])
    suspended: bool = Field(
        examples=[False], description="A suspended seller posts and changes no offers until reinstated."
    )
    reliability: ShareText = Field(
        description="Over all the seller's servers, as each server's: a share from 0 to 1, null while new."
    )


class ServerOut(Schema):
    id: int = Field(examples=[12])
    name: str = Field(examples=["lis-h100-01"])
    gpu_model: str = Field(examples=["h100-sxm"], description="The GPU model's slug.")
    gpu_count: int = Field(examples=[8])
    gpus_rented: int = Field(examples=[2], description="GPUs held by rentals now.")
    region: str = Field(examples=["europe"], json_schema_extra={"enum": Region.values})
    status: str = Field(
        examples=["pending"], json_schema_extra={"enum": ["pending", "active", "retired"]},
        description="`pending` until an operator verifies the server and activates it.",
    )
    host: str = Field(examples=["lis-h100-01.example.pt"])
    ssh_port: int = Field(examples=[22])
    city: str = Field(examples=["Lisbon"], description="Empty when not given.")
    cpu_cores: int | None = Field(examples=[64])
    ram_gb: int | None = Field(examples=[512])
    disk_gb: int | None = Field(examples=[4000])
    network_gbps: int | None = Field(examples=[25])
    reliability: ShareText = Field(
        description="Over the last days, a share from 0 to 1 that buyers see on its offers; null while "
                    "the server is new (no score yet)."
    )
    reliability_uptime: ShareText = Field(
        description="The share of minutes the server was listed with its agent reporting."
    )
    reliability_delivery: ShareText = Field(description="The share of its rentals delivered in time.")


class ServerIn(InputSchema):
    """The fields of the portal's registration form, with the same rules."""

    model_config = ConfigDict(json_schema_extra={"examples": [{
        "gpu_model": "h100-sxm", "name": "lis-h100-01", "gpu_count": 8, "region": "europe",
        "host": "lis-h100-01.example.pt", "ssh_port": 22, "city": "Lisbon", "cpu_cores": 64, "ram_gb": 512,
    }]})

    gpu_model: OneLine = Field(examples=["h100-sxm"], description="The slug of a listed GPU model.")
    name: OneLine = Field(
        examples=["lis-h100-01"], description="Unique among your servers; 100 characters at most."
    )
    gpu_count: whole_number(low=1, high=Server.MAX_GPUS, example=8)
    region: OneLine = Field(examples=["europe"], json_schema_extra={"enum": Region.values})
    host: OneLine = Field(
        examples=["lis-h100-01.example.pt"],
        description="The DNS name (two labels or more) or IP address buyers connect to with SSH.",
    )
    ssh_port: whole_number(low=1, high=65535, example=22) = 22
    city: OneLine = Field("", examples=["Lisbon"])
    cpu_cores: whole_number(low=1, high=SERVER_DETAIL_LIMITS["cpu_cores"], example=64) | None = None
    ram_gb: whole_number(low=1, high=SERVER_DETAIL_LIMITS["ram_gb"], example=512) | None = None
    disk_gb: whole_number(low=1, high=SERVER_DETAIL_LIMITS["disk_gb"], example=4000) | None = None
    network_gbps: whole_number(low=1, high=SERVER_DETAIL_LIMITS["network_gbps"], example=25) | None = None


def server_out(server: Server) -> ServerOut:
    return ServerOut(
        id=server.pk, name=server.name, gpu_model=server.gpu_model.slug, gpu_count=server.gpu_count,
        gpus_rented=server.gpus_rented, region=server.region, status=server.status, host=server.host,
        ssh_port=server.ssh_port, city=server.city, cpu_cores=server.cpu_cores, ram_gb=server.ram_gb,
        disk_gb=server.disk_gb, network_gbps=server.network_gbps,
        reliability=share(server.reliability), reliability_uptime=share(server.reliability_uptime),
        reliability_delivery=share(server.reliability_delivery),
    )


@router.get(
    "/seller", response={200: SellerOut, **TOKEN_ERRORS}, operation_id="seller_get",
    summary="The seller this token acts for",
)
def seller_get(request):
    """Its slug, name and whether an operator suspended it."""
    seller = token_of(request).seller
    return SellerOut(
        slug=seller.slug, name=seller.name, suspended=seller.suspended_at is not None,
        reliability=share(seller.reliability),
    )


@router.get(
    "/seller/servers", response={200: Page[ServerOut], **TOKEN_ERRORS, frozenset({400, 422}): Problem},
    operation_id="seller_servers_list", summary="The seller's servers, newest first",
)
def seller_servers_list(request, limit: PageLimit = None, cursor: PageCursor = None):
    """Every server of the seller, retired ones too, as the portal lists them."""
    servers, next_cursor = page_of(
        servers_for_seller(seller=token_of(request).seller), cursor=cursor, limit=limit
    )
    return {"items": [server_out(server) for server in servers], "next_cursor": next_cursor}


@router.get(
    "/seller/servers/{server_id}", response={200: ServerOut, **TOKEN_ERRORS, frozenset({404, 422}): Problem},
    operation_id="seller_server_get", summary="One of the seller's servers",
)
def seller_server_get(request, server_id: ObjectId):
    """Another seller's server answers 404 `server_not_found`, as an unknown one does."""
    server = server_get_for_seller(seller=token_of(request).seller, server_id=server_id)
    if server is None:
        raise ApiProblem(404, "server_not_found", _("We could not find this server."))
    return server_out(server)


@router.post(
    "/seller/servers", response={201: ServerOut, **TOKEN_ERRORS, 422: Problem},
    operation_id="seller_server_register",
    summary="Register a server: it stays pending until an operator verifies and activates it",
)
def seller_server_register(request, body: ServerIn):
    """The portal's registration: the same fields, rules and messages (`422 server_invalid` with
    `errors` per field, `422 gpu_model_unknown`)."""
    gpu = gpu_model_get(slug=body.gpu_model)
    if gpu is None:
        unknown = _("We do not list this GPU.")
        raise ApiProblem(422, "gpu_model_unknown", unknown,
                         errors=[{"field": "gpu_model", "code": "gpu_model_unknown", "detail": str(unknown)}])
    fields = body.model_dump(exclude={"gpu_model"})
    server = server_register(seller=token_of(request).seller, gpu_model_id=gpu.pk, **fields)
    return Status(201, server_out(server))
