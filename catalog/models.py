from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from marketplace import formatting

# Who makes each architecture the catalog sells (the catalog names architectures, not makers).
VENDOR_OF_ARCHITECTURE = {
    "ampere": "NVIDIA", "ada lovelace": "NVIDIA", "hopper": "NVIDIA", "blackwell": "NVIDIA",
    "cdna 2": "AMD", "cdna 3": "AMD", "cdna 4": "AMD",
}


class GpuModel(models.Model):
    """One GPU model as sold on the exchange, with the manufacturer's published figures."""

    name = models.CharField(_("name"), max_length=80, unique=True)
    slug = models.SlugField(_("slug"), max_length=80, unique=True)
    architecture = models.CharField(_("architecture"), max_length=40)
    memory_gb = models.PositiveSmallIntegerField(_("memory (GB)"))
    memory_type = models.CharField(_("memory type"), max_length=20)
    bandwidth_gb_s = models.PositiveIntegerField(_("memory bandwidth (GB/s)"))
    bf16_dense_tflops = models.DecimalField(
        _("dense BF16 tensor TFLOPS"), max_digits=7, decimal_places=2, null=True, blank=True,
        help_text=_("Without sparsity. Empty where the manufacturer does not publish it."),
    )
    fp64_tflops = models.DecimalField(
        _("FP64 TFLOPS"), max_digits=6, decimal_places=2, null=True, blank=True,
        help_text=_("Empty where the manufacturer does not publish it."),
    )
    ray_tracing_cores = models.BooleanField(_("has ray-tracing cores"), default=False)
    # The document the figures come from, by the title its publisher gives it (a title, not a
    # sentence: the page says "Source: ..." around it in the reader's language), and what in it.
    source = models.CharField(
        _("source of the figures"), max_length=300, blank=True,
        help_text=_("The document's title, as its publisher gives it."),
    )
    source_column = models.CharField(
        _("column of the source"), max_length=40, blank=True,
        help_text=_("The product variant's column in that document, e.g. SXM; empty if it has none."),
    )
    bf16_sparse_tflops = models.DecimalField(
        _("BF16 tensor TFLOPS with sparsity"), max_digits=7, decimal_places=2, null=True, blank=True,
        help_text=_(
            "The figure the document publishes when it gives only the one with sparsity "
            "(the dense one is half)."
        ),
    )
    position = models.PositiveSmallIntegerField(_("position in lists"), default=0)

    class Meta:
        ordering = ("position", "memory_gb", "name")
        verbose_name = _("GPU model")
        verbose_name_plural = _("GPU models")
        constraints = [
            models.CheckConstraint(condition=Q(memory_gb__gt=0), name="catalog_gpu_memory_positive"),
            models.CheckConstraint(
                condition=Q(bandwidth_gb_s__gt=0), name="catalog_gpu_bandwidth_positive"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def source_note(self) -> str:
        """The sentence under the figures, in the active language: the document, its column, and
        the published figure with sparsity that the dense one halves."""
        if not self.source:
            return ""
        values = {"document": self.source, "column": self.source_column}
        if self.source_column:
            note = _("Source: %(document)s, %(column)s column.") % values
        else:
            note = _("Source: %(document)s.") % values
        if self.bf16_sparse_tflops is not None:
            sparse = formatting.tflops(self.bf16_sparse_tflops)
            sentence = _(
                "%(note)s The document gives %(sparse)s in BF16 with sparsity; "
                "the dense figure is half of it."
            )
            note = sentence % {"note": note, "sparse": sparse}
        return note

    @property
    def vendor(self) -> str:
        """The maker, from the architecture; "" for an architecture we have not named."""
        return VENDOR_OF_ARCHITECTURE.get(self.architecture.strip().lower(), "")

    @property
    def has_hbm(self) -> bool:
        return self.memory_type.upper().startswith("HBM")
