"""The host agent's heartbeat: `POST /api/v1/agent/heartbeat` (docs/agent.md, the protocol).

Its own authentication: the server's agent token (`Authorization: Bearer evxa_...`), never a
user's API token. The body is read here, not by ninja, so that a heartbeat the protocol's types
refuse is still recorded as refused on its server (`agent_heartbeat_refuse`): the types are this
module's schema, the ranges the service's (`exchange.services.heartbeat_report_check`)."""

import json
from typing import Annotated, Any, Literal

from ninja import Field, Router, Schema
from ninja.security import HttpBearer
from pydantic import BaseModel, ConfigDict, StrictFloat, StrictInt, StrictStr, WithJsonSchema
from pydantic import ValidationError as SchemaError

from marketplace.api_support import (
    EXAMPLE_SITE,
    PROBLEM_TYPE,
    ApiProblem,
    UtcTime,
    client_ip_address,
)
from marketplace.api_validation import validation_errors

from .exceptions import AgentServerRetired, AgentTokenInvalid, HeartbeatInvalid
from .services import (
    DriftReport,
    GpuReport,
    HeartbeatReport,
    LoginReport,
    agent_heartbeat_receive,
    agent_heartbeat_refuse,
)
from .services.agents import heartbeat_invalid_message

router = Router(tags=["agent"])

AGENT_TOKEN_START = "evxa_"  # noqa: S105 - the visible start of every agent token, not a secret


class AgentTokenAuth(HttpBearer):
    """`Authorization: Bearer evxa_...`: passes the secret on (the service looks it up and records
    a revoked token's refusal on its server). Anything else is no token at all: 401."""

    def authenticate(self, request, token: str) -> str | None:
        return token if token.startswith(AGENT_TOKEN_START) else None


AGENT_TOKEN = AgentTokenAuth()


def _inlined(schema: dict) -> dict:
    """A pydantic schema with its `$defs` put in place: the request body is documented here, since
    ninja does not read it."""
    definitions = schema.pop("$defs", {})

    def place(node):
        if isinstance(node, dict):
            if "$ref" in node:
                return place(dict(definitions[node["$ref"].rsplit("/", 1)[-1]]))
            return {key: place(value) for key, value in node.items()}
        if isinstance(node, list):
            return [place(item) for item in node]
        return node

    return place(schema)


class HeartbeatBody(BaseModel):
    """The heartbeat's parts: plain pydantic models, not ninja schemas, since the body is read
    here (ninja's schemas also read Django objects, which costs on every heartbeat); unknown
    fields are refused as in every request body (InputSchema)."""

    model_config = ConfigDict(extra="forbid")


class HeartbeatGpuIn(HeartbeatBody):
    index: StrictInt = Field(description="nvidia-smi's index: 0 to 15, each once.")
    uuid: StrictStr = ""
    name: StrictStr = Field(description="As nvidia-smi names it, e.g. NVIDIA H100 80GB HBM3.")
    memory_total_mib: StrictInt | None = Field(None, description="1 to 2,000,000; null when unreadable.")
    temperature_c: StrictInt | None = Field(None, description="-50 to 150.")
    utilization_percent: StrictInt | None = Field(None, description="0 to 100.")
    ecc_uncorrected: StrictInt | None = Field(None, description="Volatile uncorrected ECC errors, 0 or more.")


class HeartbeatLoginIn(HeartbeatBody):
    rental_id: StrictInt
    username: StrictStr = Field(description="evx-<rental id>.")
    state: StrictStr = Field(
        description="ready, failed (the agent tries again) or refused (this host cannot deliver it as "
                    "sold: the exchange ends the rental as not delivered, with its refund, at once).")
    gpu_indices: list[StrictInt] = []
    detail: StrictStr = ""
    ssh_port: StrictInt | None = Field(
        None, description="The port of the rental's own sshd, 1 to 65535; null or absent when the login goes "
                          "through the host's sshd (the server's registered port).")
    service_ports: dict[StrictStr, StrictInt] = Field(
        default_factory=dict, examples=[{"8888": 41005}],
        description="A container rental's other ports (its template's, besides 22) on the server: the "
                    "container's port, as text, to the server's, 1 to 65535; at most 8.")


class HeartbeatDriftIn(HeartbeatBody):
    at: StrictStr = Field(description="When the agent found and repaired it, RFC 3339 with its zone.")
    node: StrictStr = Field(description="The device node's name, e.g. nvidia3; at most 64 characters.")
    found: StrictStr = Field(description="What it found, e.g. mode 0666 owner 0:0, no ACL; at most 200.")


# The isolation report, documented here and checked by sellers.isolation.isolation_report_check
# (a report it refuses is `isolation_invalid`, not `invalid_input`): these models only describe it.
class IsolationHardwareDoc(HeartbeatBody):
    cpu_cores: int = Field(ge=0, le=4096)
    memory_mib: int = Field(ge=0, le=2**31)
    disk_gb: int = Field(ge=0, le=10**7)


class IsolationFactsDoc(HeartbeatBody):
    devices_locked: bool = Field(description="ACLs on the GPU device nodes can be written and read back.")
    driver_keeps_permissions: bool = Field(description="The driver's parameters do not undo them.")
    device_cgroup: bool = Field(description="A second layer: cgroup v1 devices or systemd's DevicePolicy.")
    cpu_limited: bool
    memory_limited: bool
    processes_limited: bool
    disk_limited: bool = Field(description="The loop-mounted home image works.")
    tmp_private: bool
    processes_hidden: bool
    login_sandboxed: bool = Field(description="Each rental's own sshd runs inside its sandbox.")
    host_login_closed: bool = Field(description="The host's sshd, cron and at refuse the rentals' users.")
    mig_enabled: bool


class IsolationContainerDoc(HeartbeatBody):
    runtime: Literal["docker", "podman"]
    runtime_version: str = Field(description="1 to 40 printable characters.")
    toolkit_version: str = Field(description="The NVIDIA Container Toolkit's, or empty.")
    gpus_by_uuid: bool
    self_test: bool
    disk_limited: bool
    templates: list[str] = Field(description="Digests sha256:<64 hex> of the templates held, at most 32.")


class IsolationReportDoc(HeartbeatBody):
    version: Literal[1]
    server_id: int | None = Field(description="From the last desired state; null before the first answer.")
    hardware: IsolationHardwareDoc
    backend: Literal["systemd", "v2", "v1", "none"] = Field(description="The cgroup backend in use.")
    facts: IsolationFactsDoc = Field(description="Every key required, each true only when measured to hold.")
    container: IsolationContainerDoc | None = Field(description="Null when the host has no container mode.")


ISOLATION_SCHEMA = {
    "anyOf": [_inlined(IsolationReportDoc.model_json_schema()), {"type": "null"}],
    "description": "The agent's isolation report (docs/agent.md); absent or null: an agent without one, "
                   "sold as a whole server. A report that does not hold is refused: 422 isolation_invalid.",
}


class HeartbeatIn(HeartbeatBody):
    agent_version: StrictStr = Field(description="At most 20 characters.")
    sent_at: StrictStr = Field(description="The agent's clock, RFC 3339 with its zone.")
    uptime_seconds: StrictInt | None = None
    hostname: StrictStr = ""
    disk_free_gb: StrictFloat | None = Field(None, description="0 to 10,000,000, one decimal.")
    gpus: list[HeartbeatGpuIn] = Field([], description="At most 16.")
    gpu_error: StrictStr | None = Field(None, description="Why nvidia-smi could not be read, if so.")
    logins: list[HeartbeatLoginIn] = Field([], description="Every login the agent manages now, at most 64.")
    isolation: Annotated[Any, WithJsonSchema(ISOLATION_SCHEMA)] = None
    device_drifts: list[HeartbeatDriftIn] = Field(
        [], description="Device node repairs since the last accepted heartbeat, at most 64."
    )
    ssh_host_key: StrictStr = Field(
        "", description="The public host key of the rentals' sshds, one line: ssh-ed25519, "
                        "ecdsa-sha2-nistp256/384/521 or ssh-rsa, then the key; at most 1000 characters. "
                        "Empty or absent when there is none.")


EXAMPLE_KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFrXkXBRUA+dKBjOE4u2cWO/jfw4b44Exy8A93yf490V buyer@laptop"
EXAMPLE_HEARTBEAT = {
    "agent_version": "1.0.0", "sent_at": "2026-12-02T01:00:00Z", "uptime_seconds": 12345,
    "hostname": "gpu-01", "disk_free_gb": 812.5,
    "gpus": [{"index": 0, "uuid": "GPU-5b3c7f4e-9a1d-4c2b-8e6f-0a1b2c3d4e5f", "name": "NVIDIA H100 80GB HBM3",
              "memory_total_mib": 81559, "temperature_c": 34, "utilization_percent": 0,
              "ecc_uncorrected": 0}],
    "gpu_error": None,
    "logins": [{"rental_id": 12, "username": "evx-12", "state": "ready", "gpu_indices": [0], "detail": "",
                "ssh_port": 41003}],
    "isolation": {
        "version": 1, "server_id": 3, "hardware": {"cpu_cores": 64, "memory_mib": 524288, "disk_gb": 3500},
        "backend": "v1",
        "facts": {"devices_locked": True, "driver_keeps_permissions": True, "device_cgroup": True,
                  "cpu_limited": True, "memory_limited": True, "processes_limited": True,
                  "disk_limited": True, "tmp_private": True, "processes_hidden": True,
                  "login_sandboxed": True, "host_login_closed": True, "mig_enabled": False},
        "container": None,
    },
    "device_drifts": [
        {"at": "2026-12-02T00:59:40Z", "node": "nvidia0", "found": "mode 0666 owner 0:0, no ACL"},
    ],
    "ssh_host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHxnZ3pXq0m1XbVdyQwLzfZbCq8YtE0R3w1b7J2h9kQs",
}
EXAMPLE_DESIRED = {
    "server_id": 3, "server_time": "2026-12-02T01:00:00Z", "heartbeat_seconds": 30, "remove_home": False,
    "logins": [{"rental_id": 12, "username": "evx-12", "ssh_public_key": EXAMPLE_KEY, "gpu_indices": [0],
                "gpu_uuids": ["GPU-5b3c7f4e-9a1d-4c2b-8e6f-0a1b2c3d4e5f"], "isolation": "shared",
                "limits": {"cpu_cores": 7, "memory_mib": 64512, "disk_gb": 431, "processes": 4096},
                "template": None, "service_token": ""}],
    "templates": [{"image": "registry.example.com/everx/pytorch@sha256:" + "3f" * 32, "ports": [22, 8888],
                   "key_path": "/etc/ssh/everx_authorized_keys", "command": [], "min_driver": "550.54",
                   "token_env": "JUPYTER_TOKEN"}],
}


class RentalLimitsOut(Schema):
    cpu_cores: int
    memory_mib: int
    disk_gb: int
    processes: int


class DesiredLoginOut(Schema):
    rental_id: int
    username: str
    ssh_public_key: str
    gpu_indices: list[int]
    gpu_uuids: list[str] = Field(description="The same GPUs by the UUIDs of this heartbeat's report, in the "
                                 "same order; empty when one is not known.")
    isolation: Literal["container", "shared", "whole"] = Field(
        description="The isolation level the rental was sold with: the sandbox the agent must give it.")
    limits: RentalLimitsOut | None = Field(
        description="Its share of the server's CPU cores, memory, disk and processes; null while the server "
                    "has sent no isolation report.")
    template: str | None = Field(
        description="A container rental: the digest (sha256:…) of the image of its template, one of "
                    "`templates`; null for the agent's own first template.")
    service_token: str = Field(
        description="A container rental's own secret: the agent gives it to its container in the template's "
                    "`token_env` variable and in the file /etc/everx/service-token; empty for other rentals.")


class DesiredTemplateOut(Schema):
    image: str = Field(description="name@sha256:<digest>: pulled by digest, and refused if it is another.")
    ports: list[int] = Field(description="The ports its container serves; 22 is its sshd.")
    key_path: str = Field(description="Where the buyer's key file is mounted, read-only.")
    command: list[str] = Field(description="The command it runs; empty for the image's own.")
    min_driver: str = Field(description="The oldest GPU driver it runs on; empty for any. An agent with an "
                                        "older one neither pulls it nor reports it held.")
    token_env: str = Field(description="The environment variable its image reads the rental's "
                                       "`service_token` from (Jupyter's JUPYTER_TOKEN); empty for none.")


class DesiredStateOut(Schema):
    server_id: int
    server_time: UtcTime
    heartbeat_seconds: int
    remove_home: bool
    logins: list[DesiredLoginOut] = Field(description="Exactly the logins that must exist on the server now.")
    templates: list[DesiredTemplateOut] = Field(
        description="The container templates to hold: the published ones, pulled while idle and reported in "
                    "the isolation report's container.templates, and those live rentals run.")

    model_config = ConfigDict(json_schema_extra={"examples": [EXAMPLE_DESIRED]})


def _problem_answer(description: str, status: int, code: str, detail: str) -> dict:
    example = {"type": f"{EXAMPLE_SITE}/api/problems/{code}", "title": detail, "status": status,
               "code": code, "detail": detail}
    if status == 422:
        example["errors"] = [{"field": "gpus.0.memory_total_mib", "code": "less_than_equal",
                              "detail": "Send a value of at most 2000000."}]
    return {"description": description, "content": {PROBLEM_TYPE: {
        "schema": {"$ref": "#/components/schemas/Problem"}, "example": example}}}


OPENAPI_EXTRA = {
    "requestBody": {"required": True, "content": {"application/json": {
        "schema": _inlined(HeartbeatIn.model_json_schema()), "example": EXAMPLE_HEARTBEAT,
    }}},
    "responses": {
        "403": _problem_answer("The token's server is retired.", 403, "server_retired",
                               "This server is retired: its agent can be stopped and removed."),
        "422": _problem_answer("A field is missing, of the wrong type or out of range (invalid_input), or "
                               "the isolation report does not hold (isolation_invalid: the server is then "
                               "sold as a whole server); recorded as refused.",
                               422, "invalid_input",
                               "This heartbeat does not follow the agent protocol: see the fields it names."),
    },
}


def _report_of(body: bytes) -> HeartbeatReport:
    """The body as the service's report; raises HeartbeatInvalid with pydantic's errors."""
    try:
        data = HeartbeatIn.model_validate(json.loads(body or b"null"))
    except (SchemaError, ValueError) as error:
        errors = validation_errors(error.errors()) if isinstance(error, SchemaError) else []
        raise HeartbeatInvalid(heartbeat_invalid_message(), errors=errors) from None
    return HeartbeatReport(
        agent_version=data.agent_version, sent_at=data.sent_at, uptime_seconds=data.uptime_seconds,
        hostname=data.hostname, disk_free_gb=data.disk_free_gb, gpu_error=data.gpu_error,
        ssh_host_key=data.ssh_host_key,
        gpus=tuple(GpuReport(**gpu.model_dump()) for gpu in data.gpus),
        logins=tuple(LoginReport(**{**login.model_dump(), "gpu_indices": tuple(login.gpu_indices)})
                     for login in data.logins),
        isolation=data.isolation, device_drifts=tuple(DriftReport(**drift.model_dump())
                                                      for drift in data.device_drifts),
    )


def _problem(error) -> ApiProblem:
    if isinstance(error, AgentTokenInvalid):
        return ApiProblem(401, error.code, error.message, headers={"WWW-Authenticate": "Bearer"})
    if isinstance(error, AgentServerRetired):
        return ApiProblem(403, error.code, error.message)
    return ApiProblem(422, error.code, error.message, errors=error.field_errors or None)


@router.post(
    "/agent/heartbeat", auth=AGENT_TOKEN, response={200: DesiredStateOut}, operation_id="agent_heartbeat",
    summary="A server's host agent reports what it sees and gets the logins it must have",
    openapi_extra=OPENAPI_EXTRA,
)
def agent_heartbeat(request):
    secret, address = request.auth, client_ip_address(request)
    try:
        try:
            report = _report_of(request.body)
        except HeartbeatInvalid as invalid:
            raise agent_heartbeat_refuse(secret=secret, error=invalid, address=address) from None
        return agent_heartbeat_receive(secret=secret, report=report, address=address)
    except (AgentTokenInvalid, AgentServerRetired, HeartbeatInvalid) as error:
        raise _problem(error) from None

