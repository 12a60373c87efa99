from allauth.account.decorators import secure_admin_login
from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.contrib.sitemaps.views import sitemap
from django.urls import include, path
from django.views.generic import RedirectView

from billing.views import stripe_webhook
from sellers.views_agent import agent_download

from .api import api
from .sitemaps import SITEMAPS
from .views import favicon, healthz, robots_txt, server_error
from .views_api_docs import api_quickstart, api_reference

# Staff sign in through allauth (with two-factor authentication), never the admin's own form.
admin.site.login = secure_admin_login(admin.site.login)

# A crash gets a page in the language of its address (Django's own renders 500.html without one).
handler500 = server_error

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("robots.txt", robots_txt, name="robots"),
    path("favicon.ico", favicon, name="favicon"),
    path("sitemap.xml", sitemap, {"sitemaps": SITEMAPS}, name="sitemap"),
    path("webhooks/stripe/", stripe_webhook, name="stripe-webhook"),
    # The host agent's package, which sellers' servers install with pip: one address in every language.
    path("agent/<str:filename>", agent_download, name="agent-download"),
    # The market data's first address, before the API: kept, as a permanent redirect.
    path("api/v1/markets/<slug:slug>/", RedirectView.as_view(url="/api/v1/markets/%(slug)s", permanent=True)),
    path("api/v1/", api.urls),
]

# The API's pages on the site, in every language (the API itself is at /api/v1/, above).
api_docs_patterns = (
    [path("", api_reference, name="reference"), path("quickstart/", api_quickstart, name="quickstart")],
    "apidocs",
)

# Django tries the patterns in order: the public pages that everyone reads (the catalog, the trade
# pages and the order book that htmx reloads every few seconds) come first. No two includes share
# an address, so the order changes nothing else (tests/marketplace/test_urls.py).
urlpatterns += i18n_patterns(
    path("", include("catalog.urls")),
    path("", include("exchange.urls")),
    path("api/", include(api_docs_patterns)),
    path("admin/", admin.site.urls),
    path("account/", include("accounts.urls")),
    path("account/", include("billing.urls")),
    path("account/", include("allauth.urls")),
    path("", include("sellers.urls")),
)
