"""The API at /api/v1/: one NinjaAPI, one router per app, errors as problem details (docs/api.md).

What every request shares before a router sees it (its language, body guards, rate limits,
idempotency keys) is `marketplace.middleware.ApiMiddleware`."""

import logging

from django.db import DataError
from django.http import Http404, HttpResponse
from django.utils.translation import gettext as _
from ninja import NinjaAPI
from ninja.errors import AuthenticationError, HttpError, ValidationError

from accounts.api import router as accounts_router
from billing.api import router as billing_router
from billing.api_seller import router as billing_seller_router
from catalog.api import router as catalog_router
from exchange.api import router as exchange_router
from exchange.api_agent import router as agent_router
from exchange.api_orders import router as orders_router
from exchange.api_seller import router as exchange_seller_router
from exchange.api_ssh_keys import router as ssh_keys_router
from marketplace.errors import DomainError
from sellers.api import router as sellers_router

from .api_support import PROBLEM_TYPE, ApiProblem, openapi_document_complete, problem_response
from .api_validation import validation_errors

logger = logging.getLogger(__name__)


class EverXCloudApi(NinjaAPI):
    """JSON everywhere; problem details get their own media type, set on each answer from its own
    status (the renderer is shared by every request and keeps no per-response state). The OpenAPI
    document is completed with every operation's problem answers, scopes and examples."""

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


def problem(request, *, status: int, code: str, detail, errors=None, headers=None) -> HttpResponse:
    """Problem details (RFC 9457): a short title for the status, a stable code and a detail, both
    in the language of the request's Accept-Language (activated by the middleware)."""
    return problem_response(status=status, code=code, detail=detail, errors=errors, headers=headers)


def _status_of(error: DomainError) -> int:
    if getattr(error, "status", None):  # an error class that says its own
        return error.status
    if error.code.endswith("_not_found"):
        return 404
    if error.code.endswith("_not_open") or error.code.endswith("_ended"):
        return 409
    return 422


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


def _domain_error(request, exc: DomainError):
    return problem(request, status=_status_of(exc), code=exc.code, detail=exc.message,
                   errors=_field_errors(exc))


def _unauthenticated(request, exc):
    return problem(
        request, status=401, code="token_invalid",
        detail=_("Send a valid API token: Authorization: Bearer <token>."),
        headers={"WWW-Authenticate": "Bearer"},
    )


def _not_found(request, exc):
    return problem(request, status=404, code="not_found", detail=_("There is nothing at this address."))


def _http_error(request, exc: HttpError):
    if exc.status_code == 400:  # ninja's only one: a body it cannot parse
        return problem(request, status=400, code="body_not_json", detail=_("The body is not valid JSON."))
    if exc.status_code == 429:
        return problem(request, status=429, code="rate_limited", detail=_("Too many requests."))
    return problem(request, status=exc.status_code, code="http_error", detail=str(exc))


def _invalid(request, exc: ValidationError):
    return problem(request, status=422, code="validation_failed",
                   detail=_("Some fields are missing or not valid."), errors=validation_errors(exc.errors))


def _out_of_range(request, exc: DataError):
    # A number too large for its column reached the database: bad input, which a router's types
    # should have refused (marketplace.api_support.Id); nothing was written (its transaction ended).
    logger.warning("API input the database refused: %s", exc)
    return problem(request, status=422, code="value_out_of_range",
                   detail=_("A number in the request is out of range."))


PROBLEM_HANDLERS = {
    ApiProblem: _api_problem, DomainError: _domain_error, AuthenticationError: _unauthenticated,
    Http404: _not_found, HttpError: _http_error, ValidationError: _invalid, DataError: _out_of_range,
}


def api_build(**options) -> NinjaAPI:
    """A NinjaAPI answering errors as problem details: the site's, and the tests' own."""
    built = EverXCloudApi(docs_url=None, **options)
    for exception, handler in PROBLEM_HANDLERS.items():
        built.add_exception_handler(exception, handler)
    return built


api = api_build(
    title="EverXCloud API",
    version="1",
    description="Trade, rent and sell GPU hours from code. Conventions: docs/api.md.",
    urls_namespace="api",
)
# The host agent of a seller's server (its own agent token): the heartbeat (docs/agent.md). First,
# since Django tries the addresses in order and every server's agent calls it every 30 s.
api.add_router("/", agent_router)
api.add_router("/", accounts_router)
api.add_router("/", catalog_router)
api.add_router("/", exchange_router)
api.add_router("/", ssh_keys_router)
api.add_router("/", orders_router)
api.add_router("/", billing_router)
# The seller's operations (a `sell` token): its seller and servers, offers and rentals, money.
api.add_router("/", sellers_router)
api.add_router("/", exchange_seller_router)
api.add_router("/", billing_seller_router)
