import pytest
from django.core import mail
from django.core.cache import cache

from catalog.models import GpuModel
from catalog.services import gpu_catalog_load, gpu_catalog_read
from demo.seed import demo_orderbook_load
from marketplace.emails import outbox_send_pending

# With HTML_CAPTURE_DIR set, every page the tests render is saved for the HTML checker (make test).
pytest_plugins = ["tests.html_capture"]


@pytest.fixture(autouse=True)
def _english_by_default():
    """Each test starts in the default language, whatever a previous request activated."""
    from django.utils import translation

    translation.activate("en")
    yield
    translation.activate("en")


@pytest.fixture(autouse=True)
def _fresh_cache():
    """Rate limits and cached pages live in Redis: each test starts without them."""
    cache.clear()
    yield


@pytest.fixture
def gpu_catalog(db) -> dict[str, GpuModel]:
    """The real catalog of the data file, by slug."""
    gpu_catalog_load(entries=gpu_catalog_read())
    return {gpu.slug: gpu for gpu in GpuModel.objects.all()}


@pytest.fixture
def demo_book(gpu_catalog) -> dict[str, GpuModel]:
    """The catalog plus the demo order book that `make run` loads."""
    demo_orderbook_load()
    return gpu_catalog


@pytest.fixture(scope="session")
def ed25519_public_key() -> str:
    """A fresh OpenSSH public key, made for the tests."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    key = ed25519.Ed25519PrivateKey.generate().public_key()
    text = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH).decode()
    return f"{text} buyer@laptop"


@pytest.fixture
def outbox_sent():
    """Send what the outbox holds, as the beat's next run would (inside the test's transaction,
    where a service's emails wait for a commit that never comes), and return every email sent so
    far (`django.core.mail.outbox`)."""

    def send() -> list:
        outbox_send_pending(limit=1000)
        return mail.outbox

    return send
