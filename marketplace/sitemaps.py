from django.contrib.sitemaps import Sitemap
from django.urls import reverse

from catalog.selectors import gpu_models_list
from catalog.workloads import WORKLOADS


class PublicPagesSitemap(Sitemap):
    """Every public page, in every language, each with its hreflang alternates."""

    i18n = True
    alternates = True
    x_default = True
    changefreq = "daily"

    def items(self):
        pages = [
            ("catalog:home", {}), ("catalog:gpu-list", {}), ("catalog:compare", {}), ("catalog:fit", {}),
            ("exchange:market-rules", {}), ("sellers:sell", {}), ("sellers:terms", {}),
            ("apidocs:reference", {}), ("apidocs:quickstart", {}),
        ]
        pages += [("catalog:workload-detail", {"slug": w.slug}) for w in WORKLOADS]
        for gpu in gpu_models_list():
            pages += [("catalog:gpu-detail", {"slug": gpu.slug}), ("exchange:trade", {"slug": gpu.slug})]
        return pages

    def location(self, item):
        name, kwargs = item
        return reverse(name, kwargs=kwargs)


SITEMAPS = {"pages": PublicPagesSitemap}
