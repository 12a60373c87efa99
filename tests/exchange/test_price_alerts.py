"""Price alerts: setting and stopping them, the check that emails a crossing once and re-arms, the
unsubscribe link, two checks at once, the pages, the task and the queries they run."""

from decimal import Decimal
from html import unescape

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import translation
from django.utils.translation import gettext

from exchange.exceptions import PriceAlertNotFound, PriceAlertRejected
from exchange.models import PriceAlert, PriceAlertState
from exchange.selectors import best_asks_by_size_all, price_alert_get_for_buyer
from exchange.services import (
    MAX_PRICE_ALERTS,
    offer_post,
    offer_update,
    price_alert_set,
    price_alert_stop,
    price_alert_stop_by_token,
    price_alerts_check,
)
from exchange.tasks import price_alerts_check_task
from marketplace.celery import app
from marketplace.models import OutboxEmail
from tests.admin_support import operator_client
from tests.factories import GpuModelFactory, OfferFactory, ProfileFactory, ServerFactory, UserFactory
from tests.threads import run_together


def french(message: str) -> str:
    with translation.override("fr"):
        return gettext(message)


def _alert(*, buyer=None, gpu=None, gpus=1, threshold="2.50") -> PriceAlert:
    return price_alert_set(
        buyer=buyer or UserFactory(), gpu_model_id=(gpu or GpuModelFactory()).pk, gpus=gpus,
        threshold_usd=Decimal(threshold),
    )


def _emails(alert: PriceAlert) -> list[OutboxEmail]:
    return list(OutboxEmail.objects.filter(key__startswith=f"price-alert:{alert.pk}:").order_by("id"))


# The service that sets and stops alerts.


@pytest.mark.django_db
def test_an_alert_is_set_armed_with_a_token():
    alert = _alert(gpus=4, threshold="2.50")
    assert (alert.state, alert.gpus, alert.threshold_usd) == (PriceAlertState.ARMED, 4, Decimal("2.50"))
    assert len(alert.unsubscribe_token) >= 40 and alert.notified_at is None


@pytest.mark.django_db
@pytest.mark.parametrize(("gpus", "threshold", "code"), [
    (3, "2.50", "gpus_not_allowed"),
    (16, "2.50", "gpus_not_allowed"),
    (1, "0", "price_out_of_range"),
    (1, "-1.00", "price_out_of_range"),
    (1, "100.01", "price_out_of_range"),
    (1, "2.505", "price_off_tick"),
])
def test_bad_alerts_are_refused_and_nothing_is_saved(gpus, threshold, code):
    with pytest.raises(PriceAlertRejected) as refused:
        _alert(gpus=gpus, threshold=threshold)
    assert refused.value.code == code
    assert not PriceAlert.objects.exists()


@pytest.mark.django_db
def test_an_unknown_model_a_duplicate_and_too_many_are_refused():
    buyer, gpu = UserFactory(), GpuModelFactory()
    with pytest.raises(PriceAlertRejected) as refused:
        price_alert_set(buyer=buyer, gpu_model_id=987654, gpus=1, threshold_usd=Decimal("1.00"))
    assert refused.value.code == "gpu_model_unknown"
    _alert(buyer=buyer, gpu=gpu)
    with pytest.raises(PriceAlertRejected) as refused:
        _alert(buyer=buyer, gpu=gpu)
    assert refused.value.code == "alert_duplicate"
    for cents in range(1, MAX_PRICE_ALERTS):
        _alert(buyer=buyer, gpu=gpu, threshold=f"1.{cents:02d}")
    with pytest.raises(PriceAlertRejected) as refused:
        _alert(buyer=buyer, gpu=gpu, threshold="3.00")
    assert refused.value.code == "alerts_too_many"
    assert PriceAlert.objects.count() == MAX_PRICE_ALERTS


@pytest.mark.django_db
def test_only_the_owner_reads_or_stops_an_alert():
    owner, other = UserFactory(), UserFactory()
    alert = _alert(buyer=owner)
    assert price_alert_get_for_buyer(buyer=other, alert_id=alert.pk) is None
    with pytest.raises(PriceAlertNotFound):
        price_alert_stop(buyer=other, alert_id=alert.pk)
    assert price_alert_get_for_buyer(buyer=owner, alert_id=alert.pk) == alert
    price_alert_stop(buyer=owner, alert_id=alert.pk)
    assert not PriceAlert.objects.exists()


@pytest.mark.django_db
def test_the_unsubscribe_token_stops_the_alert_once():
    alert = _alert()
    assert price_alert_stop_by_token(token=alert.unsubscribe_token).pk == alert.pk
    assert not PriceAlert.objects.exists()
    with pytest.raises(PriceAlertNotFound):
        price_alert_stop_by_token(token=alert.unsubscribe_token)
    with pytest.raises(PriceAlertNotFound):
        price_alert_stop_by_token(token="")


# The check.


@pytest.mark.django_db
def test_a_crossing_sends_one_email_no_repeat_and_re_arms_above_the_threshold():
    gpu = GpuModelFactory()
    alert = _alert(gpu=gpu, gpus=2, threshold="2.50")
    offer = OfferFactory(server=ServerFactory(gpu_model=gpu), gpus_offered=4, price_usd=Decimal("2.60"))
    assert price_alerts_check().notified == 0
    assert not _emails(alert)

    offer_update(offer_id=offer.pk, price_usd=Decimal("2.50"))  # at the threshold counts
    assert price_alerts_check().notified == 1
    alert.refresh_from_db()
    assert alert.state == PriceAlertState.TRIGGERED and alert.notified_at is not None
    assert len(_emails(alert)) == 1

    offer_update(offer_id=offer.pk, price_usd=Decimal("2.40"))  # cheaper still: no new email
    assert price_alerts_check().notified == 0
    assert len(_emails(alert)) == 1

    offer_update(offer_id=offer.pk, price_usd=Decimal("2.51"))  # above: armed again, silently
    checked = price_alerts_check()
    assert (checked.notified, checked.rearmed) == (0, 1)
    alert.refresh_from_db()
    assert alert.state == PriceAlertState.ARMED and len(_emails(alert)) == 1

    offer_update(offer_id=offer.pk, price_usd=Decimal("2.00"))  # crossing again: a second email
    assert price_alerts_check().notified == 1
    assert len(_emails(alert)) == 2


@pytest.mark.django_db
def test_the_size_counts_free_gpus_on_one_server():
    gpu = GpuModelFactory()
    eight = _alert(gpu=gpu, gpus=8, threshold="3.00")
    one = _alert(gpu=gpu, gpus=1, threshold="3.00")
    other_model = _alert(gpus=1, threshold="3.00")
    # Two servers of 4 cheap GPUs each are not 8 on one server.
    for _ in range(2):
        OfferFactory(server=ServerFactory(gpu_model=gpu), gpus_offered=4, price_usd=Decimal("1.00"))
    assert price_alerts_check().notified == 1
    assert len(_emails(one)) == 1 and not _emails(eight) and not _emails(other_model)
    assert best_asks_by_size_all()[gpu.pk] == {
        1: Decimal("1.00"), 2: Decimal("1.00"), 4: Decimal("1.00"),
    }


@pytest.mark.django_db
def test_an_alert_whose_size_nothing_fills_is_armed_again():
    gpu = GpuModelFactory()
    alert = _alert(gpu=gpu, threshold="3.00")
    server = ServerFactory(gpu_model=gpu)
    offer = offer_post(server=server, gpus=2, price_usd=Decimal("2.00"))
    price_alerts_check()
    from exchange.services import offer_withdraw

    offer_withdraw(offer_id=offer.pk)
    assert price_alerts_check().rearmed == 1
    alert.refresh_from_db()
    assert alert.state == PriceAlertState.ARMED


@pytest.mark.django_db
def test_the_email_is_in_the_buyers_language_with_the_unsubscribe_link(outbox_sent):
    gpu = GpuModelFactory(name="H100 SXM", slug="h100-sxm")
    french_buyer = ProfileFactory(preferred_language="fr").user
    portuguese_buyer = ProfileFactory(preferred_language="pt").user
    to_french = _alert(buyer=french_buyer, gpu=gpu, gpus=1, threshold="2.50")
    to_portuguese = _alert(buyer=portuguese_buyer, gpu=gpu, gpus=1, threshold="2.50")
    OfferFactory(server=ServerFactory(gpu_model=gpu), gpus_offered=4, price_usd=Decimal("2.25"))
    assert price_alerts_check().notified == 2
    (fr,) = _emails(to_french)
    (pt,) = _emails(to_portuguese)
    assert fr.language == "fr" and pt.language == "pt"
    assert fr.subject == "H100 SXM est maintenant à 2,25\u00a0$US par heure GPU"
    assert "Vous nous avez demandé de vous prévenir quand 1\u00a0GPU H100 SXM" in fr.body or (
        "Vous nous avez demandé de vous prévenir quand 1 GPU H100 SXM" in fr.body
    )
    assert "2,50\u00a0$US" in fr.body and "/fr/trade/h100-sxm/" in fr.body
    assert f"/fr/price-alerts/stop/{to_french.unsubscribe_token}/" in fr.body
    assert pt.subject.startswith("H100 SXM está agora a US$") and "2,25 por hora de GPU" in pt.subject
    assert "A melhor oferta está agora a" in pt.body
    assert f"/pt/price-alerts/stop/{to_portuguese.unsubscribe_token}/" in pt.body
    with translation.override("pt"):
        assert gettext("Thank you for using EverXCloud.") in pt.body
    assert "Hello," not in fr.body and "Hello," not in pt.body
    sent = outbox_sent()
    assert {message.to[0] for message in sent} == {french_buyer.email, portuguese_buyer.email}


@pytest.mark.django_db
def test_the_check_runs_a_fixed_number_of_queries():
    def queries_for(count: int) -> int:
        PriceAlert.objects.all().delete()
        for index in range(count):
            _alert(gpu=GpuModelFactory(), threshold=f"{index + 1}.00")
        with CaptureQueriesContext(connection) as captured:
            price_alerts_check()
        return len(captured)

    assert queries_for(2) == queries_for(12) <= 4


@pytest.mark.django_db
def test_the_task_runs_the_check_and_is_on_the_beat():
    gpu = GpuModelFactory()
    alert = _alert(gpu=gpu, threshold="3.00")
    OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal("2.00"))
    assert price_alerts_check_task() == {"notified": 1, "rearmed": 0}
    assert price_alerts_check_task() == {"notified": 0, "rearmed": 0}
    assert len(_emails(alert)) == 1
    entry = app.conf.beat_schedule["check-price-alerts"]
    assert (entry["task"], entry["schedule"]) == ("exchange.price_alerts_check", 30.0)


@pytest.mark.django_db(transaction=True)
def test_two_checks_at_once_send_one_email():
    gpu = GpuModelFactory()
    alerts = [_alert(gpu=gpu, threshold="3.00") for _ in range(5)]
    OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal("2.00"))
    results, errors = run_together(4, lambda _index: price_alerts_check().notified)
    assert not errors
    assert sum(results) == 5
    for alert in alerts:
        assert len(_emails(alert)) == 1
    assert set(PriceAlert.objects.values_list("state", flat=True)) == {PriceAlertState.TRIGGERED}


# The pages.


@pytest.fixture
def signed_in(client, db):
    buyer = UserFactory()
    client.force_login(buyer)
    client.buyer = buyer
    return client


def test_the_page_sets_lists_and_stops_an_alert(signed_in, django_assert_max_num_queries):
    gpu = GpuModelFactory(name="H100 SXM")
    response = signed_in.post(
        "/fr/account/price-alerts/", {"gpu_model": gpu.pk, "gpus": "2", "threshold_usd": "2,50"}, follow=True
    )
    assert response.status_code == 200
    alert = PriceAlert.objects.get()
    assert (alert.buyer, alert.gpus, alert.threshold_usd) == (signed_in.buyer, 2, Decimal("2.50"))
    for index in range(5):
        _alert(buyer=signed_in.buyer, gpu=GpuModelFactory(), threshold=f"{index + 1}.00")
    with django_assert_max_num_queries(12):
        html = signed_in.get("/fr/account/price-alerts/").content.decode()
    assert "H100 SXM" in html and "2,50\u00a0$US" in html
    response = signed_in.post(f"/fr/account/price-alerts/{alert.pk}/stop/", follow=True)
    assert response.status_code == 200
    assert not PriceAlert.objects.filter(pk=alert.pk).exists()


@pytest.mark.parametrize(("data", "message"), [
    ({"gpus": "2", "threshold_usd": "abc"}, None),
    ({"gpus": "3", "threshold_usd": "2,50"}, None),
    ({"gpus": "2", "threshold_usd": "2,505"}, None),
    ({"gpus": "2", "threshold_usd": "100,01"}, None),
    ({"gpus": "2", "threshold_usd": "0"}, None),
    ({"gpus": "2", "threshold_usd": ""}, "This field is required."),
])
def test_bad_input_shows_a_french_error_and_saves_nothing(signed_in, data, message):
    gpu = GpuModelFactory()
    response = signed_in.post("/fr/account/price-alerts/", {"gpu_model": gpu.pk, **data})
    assert response.status_code == 400
    html = unescape(response.content.decode())
    assert 'class="field-error"' in html
    if message:
        assert french(message) in html
    assert not PriceAlert.objects.exists()


def test_an_unknown_model_is_a_form_error(signed_in):
    data = {"gpu_model": "999999", "gpus": "1", "threshold_usd": "1"}
    response = signed_in.post("/pt/account/price-alerts/", data)
    assert response.status_code == 400 and not PriceAlert.objects.exists()


def test_another_buyers_alert_is_404_and_kept(signed_in):
    alert = _alert()
    assert signed_in.post(f"/fr/account/price-alerts/{alert.pk}/stop/").status_code == 404
    assert PriceAlert.objects.filter(pk=alert.pk).exists()
    assert f'data-alert="{alert.pk}"' not in signed_in.get("/fr/account/price-alerts/").content.decode()
    assert signed_in.get(f"/fr/account/price-alerts/{alert.pk}/stop/").status_code == 405


def test_the_page_needs_a_sign_in(client, db):
    response = client.get("/fr/account/price-alerts/")
    assert response.status_code == 302 and "login" in response["Location"]


def test_the_unsubscribe_link_asks_then_stops_signed_out(client, db):
    alert = _alert()
    url = f"/fr/price-alerts/stop/{alert.unsubscribe_token}/"
    response = client.get(url)
    assert response.status_code == 200 and PriceAlert.objects.exists()
    response = client.post(url)
    assert response.status_code == 200 and not PriceAlert.objects.exists()
    assert 'data-testid="alert-stopped"' in response.content.decode()
    assert client.post(url).status_code == 404


def test_the_trade_page_panel_posts_the_model(signed_in, django_assert_max_num_queries):
    gpu = GpuModelFactory(slug="h100-sxm")
    for index in range(5):
        _alert(buyer=signed_in.buyer, gpu=gpu, threshold=f"{index + 1}.00")
    with django_assert_max_num_queries(14):  # the panel itself reads nothing
        html = signed_in.get("/pt/trade/h100-sxm/").content.decode()
    assert 'action="/pt/account/price-alerts/"' in html
    assert f'name="gpu_model" value="{gpu.pk}"' in html
    data = {"gpu_model": gpu.pk, "gpus": "1", "threshold_usd": "2,50"}
    response = signed_in.post("/pt/account/price-alerts/", data)
    assert response.status_code == 302
    set_now = PriceAlert.objects.get(buyer=signed_in.buyer, threshold_usd=Decimal("2.50"))
    assert set_now.gpu_model == gpu


def test_the_trade_page_asks_a_visitor_to_sign_in(client, db):
    GpuModelFactory(slug="h100-sxm")
    html = client.get("/fr/trade/h100-sxm/").content.decode()
    assert 'id="alert-title"' in html and 'name="threshold_usd"' not in html


@pytest.mark.django_db
def test_the_admin_lists_alerts_read_only(client):
    operator_client(client)
    admin_client = client
    alert = _alert()
    response = admin_client.get(reverse("admin:exchange_pricealert_changelist"))
    assert response.status_code == 200 and alert.gpu_model.name in response.content.decode()
    response = admin_client.get(reverse("admin:exchange_pricealert_change", args=[alert.pk]))
    assert response.status_code == 200 and alert.unsubscribe_token not in response.content.decode()
    assert admin_client.get(reverse("admin:exchange_pricealert_add")).status_code == 403
