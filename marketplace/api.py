"""The API at /api/v1/: one NinjaAPI, one router per app, errors as problem details (docs/api.md)."""

from django.conf import settings
from django.http import Http404, HttpResponse
from django.utils.translation import gettext as _
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from billing.api import router as billing_router
from billing.api_seller import router as billing_seller_router
from catalog.api import router as catalog_router
from exchange.api import router as exchange_router
from exchange.api_orders import router as orders_router
from exchange.api_seller import router as exchange_seller_router
from exchange.api_ssh_keys import router as ssh_keys_router
from marketplace.errors import DomainError
from sellers.api import router as sellers_router

from .api_support import PROBLEM_MEDIA_TYPE, ApiProblem, openapi_document_complete

PROBLEM_TYPE = PROBLEM_MEDIA_TYPE


class EverXCloudApi(NinjaAPI):
    """JSON everywhere; problem details get their own media type, set on each answer from its own
    status (the renderer is shared by every request and keeps no per-response state)."""

    def create_response(self, request, data, *, status=None, temporal_response=None):
        response = super().create_response(request, data, status=status, temporal_response=temporal_response)
        media_type = PROBLEM_TYPE if response.status_code >= 400 else self.renderer.media_type
        response["Content-Type"] = f"{media_type}; charset={self.renderer.charset}"
        return response

    def get_openapi_schema(self, *, path_prefix=None, path_params=None):
        schema = super().get_openapi_schema(path_prefix=path_prefix, path_params=path_params)
        return openapi_document_complete(schema, scopes=self._operation_scopes())

    def _operation_scopes(self) -> dict[str, str | None]:
        """operationId -> the scope its token needs (None: public, or any token)."""
        scopes = {}
        for bound in self._get_bound_routers():
            for path_view in bound.path_operations.values():
                for operation in path_view.operations:
                    operation_id = operation.operation_id or self.get_openapi_operation_id(operation)
                    needed = [getattr(auth, "scope", None) for auth in operation.auth_callbacks or ()]
                    scopes[operation_id] = next((scope for scope in needed if scope), None)
        return scopes


api = EverXCloudApi(
    title="EverXCloud API",
    version="1",
    description="Trade, rent and sell GPU hours from code. Conventions: docs/api.md.",
    urls_namespace="api",
    docs_url=None,
)
api.add_router("/", catalog_router)
api.add_router("/", exchange_router)
api.add_router("/", ssh_keys_router)
api.add_router("/", orders_router)
api.add_router("/", billing_router)
# The seller's operations (a `sell` token): its seller and servers, offers and rentals, money.
api.add_router("/", sellers_router)
api.add_router("/", exchange_seller_router)
api.add_router("/", billing_seller_router)


def problem(request, *, status: int, code: str, detail, errors=None, headers=None) -> HttpResponse:
    body = {
        "type": f"{settings.SITE_URL.rstrip('/')}/api/problems/{code}",
        "title": str(detail),
        "status": status,
        "code": code,
        "detail": str(detail),
    }
    if errors:
        body["errors"] = errors
    response = api.create_response(request, body, status=status)
    for name, value in (headers or {}).items():
        response[name] = value
    return response


def _status_of(error: DomainError) -> int:
    if error.code.endswith("_not_found"):
        return 404
    if error.code.endswith("_not_open") or error.code.endswith("_ended"):
        return 409
    return 422


@api.exception_handler(ApiProblem)
def _api_problem(request, exc: ApiProblem):
    return problem(request, status=exc.status, code=exc.code, detail=exc.detail, errors=exc.errors,
                   headers=exc.headers)


def _field_errors(error: DomainError) -> list[dict] | None:
    """A domain error that names fields (`errors`: field -> messages) answers them one by one."""
    fields = getattr(error, "errors", None) or {}
    return [
        {"field": field, "code": error.code, "detail": str(message)}
        for field, messages in fields.items() for message in messages
    ] or None


@api.exception_handler(DomainError)
def _domain_error(request, exc: DomainError):
    return problem(request, status=_status_of(exc), code=exc.code, detail=exc.message,
                   errors=_field_errors(exc))


@api.exception_handler(AuthenticationError)
def _unauthenticated(request, exc):
    return problem(
        request, status=401, code="token_invalid",
        detail=_("Send a valid API token: Authorization: Bearer <token>."),
        headers={"WWW-Authenticate": "Bearer"},
    )


@api.exception_handler(Http404)
def _not_found(request, exc):
    return problem(request, status=404, code="not_found", detail=_("There is nothing at this address."))


@api.exception_handler(HttpError)
def _http_error(request, exc: HttpError):
    return problem(request, status=exc.status_code, code="http_error", detail=str(exc))


@api.exception_handler(ValidationError)
def _invalid(request, exc: ValidationError):
    errors = [
        {"field": ".".join(str(part) for part in error.get("loc", ())[1:]) or None,
         "code": error.get("type", "invalid"), "detail": error.get("msg", "")}
        for error in exc.errors
    ]
    return problem(request, status=422, code="validation_failed",
                   detail=_("Some fields are missing or not valid."), errors=errors)
