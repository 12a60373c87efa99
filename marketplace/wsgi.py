"""The WSGI application: the site, and a short path for the host agents.

Every seller's server posts a heartbeat every 30 s (`/api/v1/agent/`): ten thousand servers are
more than three hundred requests a second, each with a bearer token and no cookie. Sessions,
users, messages, allauth, htmx, CSRF, CSP and static files have nothing to do for them, and
together cost about as much as the heartbeat's own queries. So those paths run the same Django
(URLs, ninja, views, services) under a shorter middleware stack: the host check, the security
headers, and the API's own middleware (language, body guards, rate limits, problem details).
Shared public pages already rendered are answered before Django's handler
(`marketplace.page_cache.SharedPagesFront`).
"""

import os

from django.core.handlers.exception import convert_exception_to_response
from django.core.handlers.wsgi import WSGIHandler
from django.core.wsgi import get_wsgi_application
from django.utils.module_loading import import_string

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "marketplace.settings.embedded")

AGENT_PATH_PREFIX = "/api/v1/agent/"

# Outermost first, in the order of settings.MIDDLEWARE; each is a plain `__call__` middleware or
# a MiddlewareMixin one without view, template or exception hooks (tests/marketplace/test_wsgi.py).
AGENT_MIDDLEWARE = (
    "django.middleware.security.SecurityMiddleware",
    "django.middleware.common.CommonMiddleware",
    "marketplace.middleware.ApiMiddleware",
    "marketplace.middleware.RefuseControlCharactersMiddleware",
)


class ShortStackHandler(WSGIHandler):
    """Django's WSGI handler with `AGENT_MIDDLEWARE` in place of settings.MIDDLEWARE."""

    middleware = AGENT_MIDDLEWARE

    def load_middleware(self, is_async=False):
        self._view_middleware = []
        self._template_response_middleware = []
        self._exception_middleware = []
        handler = convert_exception_to_response(self._get_response)
        for path in reversed(self.middleware):
            handler = convert_exception_to_response(import_string(path)(handler))
        self._middleware_chain = handler


class AgentPathRouter:
    """Sends the host agents' paths to the short stack, everything else to the site's."""

    def __init__(self, site, agents) -> None:
        self.site = site
        self.agents = agents

    def __call__(self, environ, start_response):
        if environ.get("PATH_INFO", "").startswith(AGENT_PATH_PREFIX):
            return self.agents(environ, start_response)
        return self.site(environ, start_response)


_site = get_wsgi_application()  # sets Django up: the front's module may be imported after it only
_front = import_string("marketplace.page_cache.SharedPagesFront")
application = AgentPathRouter(_front(_site), ShortStackHandler())
