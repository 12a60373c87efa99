"""The account's operations of the API (docs/api.md): who a token acts for. Entry points only."""

from ninja import Router, Schema

from marketplace.api_support import ANY_TOKEN, Problem, UtcTime, token_of

from .selectors import user_language

router = Router(tags=["account"])


class MeOut(Schema):
    email: str
    language: str
    token_name: str
    token_prefix: str
    scopes: list[str]
    seller: str | None
    expires_at: UtcTime | None


@router.get(
    "/me", response={200: MeOut, 401: Problem, 429: Problem}, auth=ANY_TOKEN, operation_id="me_get",
    summary="Who the token acts for: its user, its scopes and its seller",
)
def me_get(request):
    token = token_of(request)
    return {
        "email": token.user.email, "language": user_language(user=token.user),
        "token_name": token.name, "token_prefix": token.prefix, "scopes": token.scopes,
        "seller": token.seller.slug if token.seller_id else None, "expires_at": token.expires_at,
    }
