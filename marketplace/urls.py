from django.conf.urls.i18n import i18n_patterns
from django.contrib import admin
from django.contrib.sitemaps.views import sitemap
from django.urls import include, path

from .sitemaps import SITEMAPS
from .views import healthz, robots_txt

urlpatterns = [
    path("healthz", healthz, name="healthz"),
    path("robots.txt", robots_txt, name="robots"),
    path("sitemap.xml", sitemap, {"sitemaps": SITEMAPS}, name="sitemap"),
]

urlpatterns += i18n_patterns(
    path("admin/", admin.site.urls),
    path("", include("catalog.urls")),
)
