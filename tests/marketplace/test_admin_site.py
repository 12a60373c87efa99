"""The operators' admin over HTTP: every model on the site in three languages, history that nobody
edits, two-factor authentication for staff, the roles (support decides on sellers, finance moves
money) whatever is posted, the action forms, crediting by reference, the market and operations
pages, the audit log and the audited edits (GPU specifications, exchange rates)."""

import json
import uuid
from datetime import timedelta
from decimal import Decimal
from html import unescape
from types import SimpleNamespace

import pytest
from allauth.mfa.models import Authenticator
from django import forms
from django.apps import apps
from django.contrib import admin
from django.contrib import messages as message_levels
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone, translation
from django.utils.translation import gettext, ngettext

from accounts.models import AuditAction, AuditEntry, Profile, VatIdStatus, Wallet
from accounts.services import api_token_create
from billing.ledger import (
    ledger_account_for_seller,
    ledger_account_for_wallet,
    ledger_account_system,
    ledger_post,
)
from billing.models import (
    ExchangeRate,
    LedgerAccount,
    LedgerEntry,
    LedgerTransaction,
    Payout,
    ProviderEvent,
    TopUp,
    TopUpRefund,
    TopUpStatus,
)
from billing.services import (
    ledger_reconcile,
    payout_request,
    rental_charge_next_hour,
    top_up_create,
    top_up_credit_bank_transfer,
    top_up_mark_paid,
    top_up_refund,
    top_ups_vat_refund_confirmed,
    wallet_adjust,
)
from catalog.models import GpuModel
from exchange.models import Bid, BidState, Market, MarketBook, Rental, RentalState, TimeInForce
from exchange.services import OpeningTrade, bid_place, price_alert_set, ssh_key_add
from marketplace import formatting
from marketplace.idempotency import idempotency_claim, idempotency_complete
from sellers.models import (
    AgentMonitor,
    AgentToken,
    ApplicationStatus,
    MemberRole,
    Seller,
    SellerApplication,
    SellerInvitation,
    SellerMembership,
    Server,
    ServerAgent,
    ServerAvailabilityDay,
    ServerEvent,
    ServerHeartbeat,
    ServerIsolationReport,
    ServerTemplate,
)
from sellers.services import agent_token_create, application_save, application_submit
from tests.admin_support import action_post, operator_client
from tests.exchange.agents_support import isolation_of
from tests.exchange.support import VECTOR_KEY
from tests.factories import (
    BidFactory,
    ContainerTemplateFactory,
    ExchangeRateFactory,
    GpuModelFactory,
    OfferFactory,
    ProfileFactory,
    RentalFactory,
    ServerFactory,
    UserFactory,
    WalletFactory,
    operator_make,
)

pytestmark = pytest.mark.django_db

APPS = ("marketplace", "accounts", "catalog", "sellers", "exchange", "billing")
LANGUAGES = ("en", "pt", "fr")
Kind = LedgerAccount.Kind


# --- helpers ---------------------------------------------------------------------------------------


def url(name: str, language: str = "en", **kwargs) -> str:
    with translation.override(language):
        return reverse(name, kwargs=kwargs or None)


def changelist(model, language: str = "en") -> str:
    return url(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist", language)


def change_url(obj, language: str = "en") -> str:
    opts = obj._meta
    return url(f"admin:{opts.app_label}_{opts.model_name}_change", language, object_id=obj.pk)


def our_models() -> list:
    return [model for label in APPS for model in apps.get_app_config(label).get_models()]


def messages_of(response, level: int | None = None) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request) if level is None or m.level == level]


def action_names(response) -> set[str]:
    """The actions offered in the changelist's dropdown (none when the admin offers no action)."""
    form = response.context["action_form"]
    if form is None:
        return set()
    return {name for name, _label in form.fields["action"].choices if name}


def books_state() -> tuple:
    """Everything an operator's action could have moved or written."""
    return (
        list(Wallet.objects.order_by("pk").values_list("balance", flat=True)),
        LedgerTransaction.objects.count(),
        LedgerEntry.objects.count(),
        TopUpRefund.objects.count(),
        list(TopUp.objects.order_by("pk").values_list("status", flat=True)),
        list(Payout.objects.order_by("pk").values_list("status", flat=True)),
        list(Rental.objects.order_by("pk").values_list("state", flat=True)),
        list(SellerApplication.objects.order_by("pk").values_list("status", flat=True)),
        list(Seller.objects.order_by("pk").values_list("suspended_at", flat=True)),
        Seller.objects.count(),
        Market.objects.filter(is_open=True).exists(),
        AuditEntry.objects.count(),
    )


def bank_top_up(amount: str = "120", user=None, **profile) -> TopUp:
    """A pending bank-transfer top-up of a Portuguese consumer (23 % VAT on top)."""
    user = user or ProfileFactory(billing_country="PT", **profile).user
    return top_up_create(user=user, amount_text=amount, currency="EUR", provider="bank",
                         form_token=uuid.uuid4())


def fund_usd(user, amount: str) -> Wallet:
    """A US dollar wallet holding `amount`, brought in through the ledger as a top-up would."""
    wallet = WalletFactory(user=user, currency="USD")
    ledger_post(
        idempotency_key=f"test-fund:{wallet.pk}", kind="top_up", description="test funds",
        lines=[
            (ledger_account_for_wallet(wallet=wallet), Decimal(amount)),
            (ledger_account_system(kind=Kind.PAYMENT_CLEARING, currency="USD", provider="bank"),
             -Decimal(amount)),
        ],
    )
    wallet.refresh_from_db()
    return wallet


def seller_earn(seller, amount: str) -> None:
    ledger_post(
        idempotency_key=f"test-earn:{seller.pk}", kind=LedgerTransaction.Kind.ADJUSTMENT,
        description="test earnings",
        lines=[
            (ledger_account_for_seller(seller=seller, currency="USD"), Decimal(amount)),
            (ledger_account_system(kind=Kind.ADJUSTMENTS, currency="USD"), -Decimal(amount)),
        ],
    )


APPLICATION = {
    "country": "PT", "registration_number": "514000000", "vat_id": "PT501964843",
    "address": "Rua Augusta 10, Lisboa", "contact_name": "Joana Ferreira",
    "contact_phone": "+351 210 000 000", "website": "https://gpu.example.pt",
    "datacentre_locations": "Lisbon (Equinix LS1)", "planned_inventory": "8 × H100 SXM",
    "iban": "PT50 0002 0123 1234 5678 9015 4",
}


def application_submitted(legal_name: str = "Lisbon GPU Lda") -> SellerApplication:
    applicant = ProfileFactory(preferred_language="pt").user
    Authenticator.objects.create(user=applicant, type=Authenticator.Type.TOTP, data={"secret": "x"})
    application_save(applicant=applicant, fields=APPLICATION | {
        "legal_name": legal_name, "account_holder": legal_name, "accept_terms": True,
    })
    return application_submit(applicant=applicant)


def agent_books(server, *, owner, now) -> None:
    """The host agent's rows of a server: its token (and the events it writes), what the agent last
    reported (GPUs that do not match, silent since a minute), a refused heartbeat, a day counted."""
    agent_token_create(seller=server.seller, server_id=server.pk, user=owner)
    ServerAgent.objects.create(
        server=server, enrolled_at=now - timedelta(days=1), last_heartbeat_at=now - timedelta(minutes=4),
        agent_version="1.0.0",
        gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-40GB", "memory_total_mib": 40960}],
        mismatch=[{"code": "model", "index": 0, "expected": server.gpu_model.name, "seen": "NVIDIA A100"}],
        unreachable_since=now - timedelta(minutes=1),
    )
    ServerHeartbeat.objects.create(server=server, received_at=now, accepted=False, problem="invalid_input")
    ServerIsolationReport.objects.create(
        server=server, received_at=now, digest="0" * 64, report={}, level="whole"
    )
    ServerAvailabilityDay.objects.create(server=server, day=now.date(), listed_minutes=60, heard_minutes=56)
    ServerTemplate.objects.create(server=server, template=ContainerTemplateFactory(), since=now)
    AgentMonitor.objects.update_or_create(pk=AgentMonitor.SINGLETON_ID, defaults={"last_run_at": now})


@pytest.fixture
def books(db):
    """A small but complete exchange: a row in every table the admin shows, made by the services."""
    boss = operator_make(email="boss@everxcloud.test")
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    paid = bank_top_up("120", name="Joana Ferreira")
    buyer = paid.user
    top_up_credit_bank_transfer(reference=paid.reference, operator=boss, reason="On the statement")
    top_up_refund(top_up_id=paid.pk, operator=boss, amount_text="10", reason="Goodwill",
                  request_key="books")
    pending = bank_top_up("30", user=buyer)
    # A German business paid VAT while VIES had not confirmed its number; VIES has since.
    business = ProfileFactory(billing_country="DE", billing_type="business", company_name="GPU Labs GmbH",
                              vat_id="DE136695976", vat_id_status=VatIdStatus.UNKNOWN)
    awaiting = bank_top_up("100", user=business.user)
    top_up_credit_bank_transfer(reference=awaiting.reference, operator=boss, reason="On the statement")
    Profile.objects.filter(pk=business.pk).update(vat_id_status=VatIdStatus.VALID,
                                                  vat_id_checked_at=timezone.now())
    top_ups_vat_refund_confirmed(user_id=business.user_id)
    now = timezone.now()
    rental = RentalFactory(buyer=buyer, started_at=now - timedelta(minutes=5))
    rental_charge_next_hour(rental_id=rental.pk, now=now)
    seller = rental.server.seller
    owner = UserFactory()
    SellerMembership.objects.create(seller=seller, user=owner, role=MemberRole.OWNER)
    SellerInvitation.objects.create(seller=seller, email="new.member@example.com", invited_by=owner)
    seller_earn(seller, "80.00")
    payout = payout_request(seller_id=seller.pk, requested_by=owner, amount_text="60")
    application = application_submitted()
    ProviderEvent.objects.create(provider="stripe", event_id="evt_test_1",
                                 event_type="checkout.session.completed", payload={"id": "evt_test_1"})
    ssh_key_add(buyer=buyer, name="laptop", public_key=VECTOR_KEY)
    price_alert_set(buyer=buyer, gpu_model_id=rental.gpu_model.pk, gpus=1, threshold_usd=Decimal("2.50"))
    # The factories write the book without the market lock, which would bump its version.
    MarketBook.objects.get_or_create(gpu_model=rental.gpu_model)
    Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": False})
    agent_books(rental.server, owner=owner, now=now)
    token, _secret = api_token_create(user=buyer, name="books", scopes=["read"])
    claim = idempotency_claim(token_id=token.pk, key="books", method="POST", path="/api/v1/quote", body=b"{}")
    idempotency_complete(record=claim.record, status=200, content_type="application/json", body=b"{}")
    ledger_reconcile()
    rental.refresh_from_db()
    paid.refresh_from_db()
    return SimpleNamespace(
        boss=boss, buyer=buyer, paid=paid, pending=pending, wallet=Wallet.objects.get(user=buyer),
        rental=rental, seller=seller, owner=owner, payout=payout, application=application,
    )


# --- every model, every language -------------------------------------------------------------------


def test_every_model_of_our_apps_is_on_the_admin_site():
    missing = [model._meta.label for model in our_models() if not admin.site.is_registered(model)]
    assert missing == []


@pytest.mark.parametrize("language", LANGUAGES)
def test_a_superuser_opens_every_changelist_in_each_language(client, books, language):
    operator_client(client)
    for model in our_models():
        assert model.objects.exists(), f"no {model._meta.label} row to show"
        response = client.get(changelist(model, language))
        assert response.status_code == 200, model._meta.label
        assert f'lang="{language}"' in response.content.decode()
        if "cl" in response.context:  # the market is a page of its own, not a list
            assert response.context["cl"].result_list, model._meta.label


def test_a_superuser_opens_a_row_of_every_model(client, books):
    operator_client(client)
    for model in our_models():
        obj = model.objects.order_by("pk").first()
        response = client.get(change_url(obj))
        assert response.status_code == 200, model._meta.label


@pytest.mark.parametrize("language", LANGUAGES)
def test_the_operator_pages_and_forms_render_in_each_language(client, books, language):
    operator_client(client)
    with translation.override(language):
        titles = {
            "admin:billing_topup_credit": gettext("Credit a bank transfer"),
            "admin:billing_exchangerate_load": gettext("Load a rates file"),
            "admin:exchange_market_changelist": gettext("Market"),
            "admin:operations": gettext("Operations"),
            "admin:index": gettext("Run the exchange"),
        }
        refund_title, adjust_title = gettext("Refund a top-up"), gettext("Adjust a balance")
        reason_label = gettext("Reason")
    for name, title in titles.items():
        response = client.get(url(name, language))
        assert response.status_code == 200, name
        assert title in unescape(response.content.decode()), name
    for path, action, obj, title in ((changelist(TopUp, language), "refund", books.paid, refund_title),
                                     (changelist(Wallet, language), "adjust", books.wallet, adjust_title)):
        response = client.post(path, {"action": action, "_selected_action": [obj.pk]})
        assert response.status_code == 200
        html = unescape(response.content.decode())
        assert title in html and reason_label in html


def test_the_index_links_the_operations_page_and_the_audit_log(client):
    operator_client(client, "support")
    response = client.get(url("admin:index"))
    assert response.status_code == 200
    html = response.content.decode()
    assert url("admin:operations") in html
    assert changelist(AuditEntry) in html


# --- history is never edited -----------------------------------------------------------------------

HISTORY = [LedgerTransaction, LedgerEntry, AuditEntry, TopUpRefund]


@pytest.mark.parametrize("model", HISTORY, ids=lambda model: model.__name__)
def test_history_is_read_only_even_for_a_superuser(client, books, model):
    operator = operator_client(client)
    request = RequestFactory().get("/en/admin/")
    request.user = operator
    model_admin = admin.site._registry[model]
    obj = model.objects.order_by("pk").first()
    assert model_admin.has_view_permission(request, obj)
    assert not model_admin.has_add_permission(request)
    assert not model_admin.has_change_permission(request, obj)
    assert not model_admin.has_delete_permission(request, obj)
    assert "delete_selected" not in model_admin.get_actions(request)

    rows = list(model.objects.order_by("pk").values())
    opts = model._meta
    assert client.get(change_url(obj)).status_code == 200  # readable
    assert client.post(change_url(obj), {"reason": "edited", "description": "edited"}).status_code == 403
    assert client.post(url(f"admin:{opts.app_label}_{opts.model_name}_add"), {}).status_code == 403
    delete = url(f"admin:{opts.app_label}_{opts.model_name}_delete", object_id=obj.pk)
    assert client.post(delete, {"post": "yes"}).status_code == 403
    response = client.post(changelist(model), {"action": "delete_selected", "_selected_action": [obj.pk],
                                              "post": "yes"})
    assert response.status_code in (200, 302)
    assert list(model.objects.order_by("pk").values()) == rows


# --- two-factor authentication ---------------------------------------------------------------------


@pytest.mark.parametrize("role", [None, "support", "finance"])
def test_staff_without_two_factor_are_sent_to_turn_it_on(client, role):
    client.force_login(operator_make(role))
    for path in (url("admin:index"), url("admin:operations"), changelist(TopUp),
                 url("admin:billing_topup_credit")):
        response = client.get(path)
        assert response.status_code == 302, path
        assert response["Location"] == reverse("mfa_activate_totp")


def test_a_superuser_without_two_factor_moves_no_money(client, books):
    client.force_login(operator_make())
    before = books_state()
    response = client.post(url("admin:billing_topup_credit"),
                           {"reference": books.pending.reference, "reason": "Seen"})
    assert response.status_code == 302 and response["Location"] == reverse("mfa_activate_totp")
    action_post(client, changelist(Wallet), "adjust", [books.wallet.pk], amount="50", reason="Gift")
    assert books_state() == before


# --- roles -----------------------------------------------------------------------------------------

SELLER_ACTIONS = {
    "sellers/sellerapplication": {"approve", "reject", "ask_info"},
    "sellers/seller": {"suspend", "reinstate"},
    "sellers/server": {"activate", "retire"},
    "sellers/agenttoken": {"revoke"},
}
MONEY_ACTIONS = {
    "billing/topup": {"credit_bank_transfers", "refund"},
    "accounts/wallet": {"adjust"},
    "billing/payout": {"mark_paid", "reject"},
    "exchange/rental": {"end_as_operator"},
}


def staff_without_a_role(client):
    user = UserFactory(is_staff=True)
    Authenticator.objects.create(user=user, type=Authenticator.Type.TOTP, data={"secret": "x"})
    client.force_login(user)
    return user


def test_staff_without_a_role_cannot_open_the_market_page(client, crossing_book):
    """Like every model page of the admin, the market page needs its model's view permission."""
    staff_without_a_role(client)
    assert client.get(changelist(TopUp)).status_code == 403  # as Django does for any model page
    assert client.get(url("admin:exchange_market_changelist")).status_code == 403


def test_staff_without_a_role_cannot_read_the_operations_page(client, books):
    """The operations page shows every currency's money and the waiting payouts: operators only."""
    staff_without_a_role(client)
    assert client.get(url("admin:operations")).status_code == 403


@pytest.mark.parametrize("role", ["support", "finance"])
def test_operators_read_every_changelist(client, books, role):
    operator_client(client, role)
    for model in our_models():
        response = client.get(changelist(model))
        assert response.status_code == 200, (role, model._meta.label)


@pytest.mark.parametrize(
    ("role", "allowed", "refused"),
    [
        ("support", SELLER_ACTIONS, MONEY_ACTIONS),
        ("finance", MONEY_ACTIONS, SELLER_ACTIONS),
        (None, SELLER_ACTIONS | MONEY_ACTIONS, {}),
    ],
    ids=["support", "finance", "superuser"],
)
def test_each_role_is_offered_its_own_actions_only(client, books, role, allowed, refused):
    operator_client(client, role)
    for path, names in allowed.items():
        offered = action_names(client.get(f"/en/admin/{path}/"))
        assert names <= offered, (path, offered)
    for path, names in refused.items():
        offered = action_names(client.get(f"/en/admin/{path}/"))
        assert not names & offered, (path, offered)


def test_support_moves_no_money_whatever_it_posts(client, books):
    operator_client(client, "support")
    before = books_state()
    action_post(client, changelist(TopUp), "refund", [books.paid.pk], amount="5", reason="Asked")
    action_post(client, changelist(TopUp), "credit_bank_transfers", [books.pending.pk], reason="Seen")
    action_post(client, changelist(Wallet), "adjust", [books.wallet.pk], amount="50", reason="Gift")
    action_post(client, changelist(Payout), "mark_paid", [books.payout.pk], reason="SEPA 123")
    action_post(client, changelist(Payout), "reject", [books.payout.pk], reason="No")
    action_post(client, changelist(Rental), "end_as_operator", [books.rental.pk], reason="Abuse")
    response = client.post(url("admin:billing_topup_credit"),
                           {"reference": books.pending.reference, "reason": "Seen"})
    assert response.status_code == 302 and response["Location"] == changelist(TopUp)
    with translation.override("en"):
        assert gettext("Your operator role does not allow this action.") in messages_of(response)
    assert client.get(url("admin:billing_topup_credit")).status_code == 302
    credit = url("admin:billing_topup_credit_one", top_up_id=books.pending.pk)
    assert client.post(credit, {"received": "36.90", "bank_reference": "X"}).status_code == 302
    assert books_state() == before
    assert TopUp.objects.get(pk=books.pending.pk).status == TopUpStatus.PENDING


def test_finance_decides_nothing_about_sellers_whatever_it_posts(client, books):
    operator_client(client, "finance")
    before = books_state()
    sellers_before = set(SellerMembership.objects.values_list("pk", flat=True))
    action_post(client, changelist(SellerApplication), "approve", [books.application.pk])
    action_post(client, changelist(SellerApplication), "reject", [books.application.pk], reason="No")
    action_post(client, changelist(SellerApplication), "ask_info", [books.application.pk], reason="Why?")
    action_post(client, changelist(Seller), "suspend", [books.seller.pk], reason="Fraud")
    action_post(client, url("admin:sellers_server_changelist"), "retire", [books.rental.server_id],
                reason="Old")
    assert books_state() == before
    assert SellerApplication.objects.get(pk=books.application.pk).status == ApplicationStatus.SUBMITTED
    assert set(SellerMembership.objects.values_list("pk", flat=True)) == sellers_before


def test_support_approves_an_application_and_the_audit_log_names_it(client, books):
    operator = operator_client(client, "support")
    response = action_post(client, changelist(SellerApplication), "approve", [books.application.pk])
    assert response.status_code == 302
    application = SellerApplication.objects.get(pk=books.application.pk)
    assert (application.status, application.decided_by) == (ApplicationStatus.APPROVED, operator)
    assert SellerMembership.objects.filter(user=application.applicant, role=MemberRole.OWNER).exists()
    entry = AuditEntry.objects.get(action=AuditAction.APPLICATION_APPROVE)
    assert (entry.actor, entry.target_id) == (operator, str(application.pk))


def test_finance_refunds_and_the_audit_log_names_it(client, books):
    operator = operator_client(client, "finance")
    before = books.wallet.balance
    response = action_post(client, changelist(TopUp), "refund", [books.paid.pk], amount="20,50",
                           reason="Unused credit")
    assert response.status_code == 302
    with translation.override("en"):
        assert gettext("The top-up was refunded.") in messages_of(response, message_levels.SUCCESS)
    assert Wallet.objects.get(pk=books.wallet.pk).balance == before - Decimal("20.50")
    entry = AuditEntry.objects.filter(action=AuditAction.TOP_UP_REFUND).latest("pk")
    assert (entry.actor, entry.reason) == (operator, "Unused credit")


def test_support_suspends_and_reinstates_a_seller_through_the_forms(client, books):
    operator = operator_client(client, "support")
    idle = OfferFactory(server=ServerFactory(seller=books.seller))
    response = action_post(client, changelist(Seller), "suspend", [books.seller.pk])  # no reason
    assert response.status_code == 200 and "reason" in response.context["form"].errors
    assert Seller.objects.get(pk=books.seller.pk).suspended_at is None

    response = action_post(client, changelist(Seller), "suspend", [books.seller.pk], reason="Fraud report")
    assert response.status_code == 302
    assert Seller.objects.get(pk=books.seller.pk).suspended_at is not None
    idle.refresh_from_db()
    assert idle.state == "withdrawn"
    assert Rental.objects.get(pk=books.rental.pk).state == RentalState.RUNNING  # running rentals go on
    action_post(client, changelist(Seller), "reinstate", [books.seller.pk], reason="Cleared")
    assert Seller.objects.get(pk=books.seller.pk).suspended_at is None
    assert [entry.action for entry in AuditEntry.objects.filter(actor=operator).order_by("pk")] == [
        AuditAction.SELLER_SUSPEND, AuditAction.SELLER_REINSTATE,
    ]


def test_support_retires_servers_except_one_with_a_running_rental(client, books):
    operator_client(client, "support")
    idle = ServerFactory(seller=books.seller)
    response = action_post(client, url("admin:sellers_server_changelist"), "retire",
                           [idle.pk, books.rental.server_id], reason="Decommissioned")
    assert response.status_code == 302
    idle.refresh_from_db()
    books.rental.server.refresh_from_db()
    assert (idle.status, books.rental.server.status) == ("retired", "active")
    [error] = messages_of(response, message_levels.ERROR)
    assert error.startswith(f"{books.rental.server}: ")
    assert AuditEntry.objects.filter(action=AuditAction.SERVER_RETIRE).count() == 1


def test_support_activates_a_pending_server(client, books):
    operator = operator_client(client, "support")
    pending = ServerFactory(seller=books.seller, status="pending")
    action_post(client, url("admin:sellers_server_changelist"), "activate", [pending.pk])
    pending.refresh_from_db()
    assert pending.status == "active"
    assert AuditEntry.objects.get(action=AuditAction.SERVER_ACTIVATE).actor == operator


def test_support_rejects_and_asks_through_the_forms(client, books):
    operator_client(client, "support")
    other = application_submitted("Braga GPU Lda")
    action_post(client, changelist(SellerApplication), "ask_info", [other.pk], reason="Which datacentre?")
    action_post(client, changelist(SellerApplication), "reject", [books.application.pk],
                reason="Not a company")
    other.refresh_from_db()
    books.application.refresh_from_db()
    assert (other.status, other.operator_question) == (ApplicationStatus.NEEDS_INFO, "Which datacentre?")
    assert (books.application.status, books.application.rejection_reason) == (
        ApplicationStatus.REJECTED, "Not a company"
    )


@pytest.mark.parametrize(("action", "status"), [("mark_paid", "paid"), ("reject", "rejected")])
def test_finance_decides_a_payout_through_the_form(client, books, action, status):
    operator = operator_client(client, "finance")
    response = action_post(client, changelist(Payout), action, [books.payout.pk], reason="SEPA 2026-12-02",
                           reference="SEPA 2026-12-02")
    assert response.status_code == 302
    payout = Payout.objects.get(pk=books.payout.pk)
    assert (payout.status, payout.decided_by) == (status, operator)
    assert AuditEntry.objects.get(actor=operator).reason == "SEPA 2026-12-02"


# --- the action forms ------------------------------------------------------------------------------


def test_an_action_shows_its_form_before_anything_moves(client, books):
    operator_client(client)
    before = books_state()
    response = client.post(changelist(TopUp), {"action": "refund", "_selected_action": [books.paid.pk]})
    assert response.status_code == 200
    assert "admin/operator_action_form.html" in [template.name for template in response.templates]
    form = response.context["form"]
    assert not form.is_bound and form.initial["request_key"]
    html = response.content.decode()
    for field in ('name="amount"', 'name="reason"', 'name="request_key"', 'name="confirm" value="yes"',
                  'name="action" value="refund"', f'name="_selected_action" value="{books.paid.pk}"'):
        assert field in html
    assert books.paid.reference in html
    assert books_state() == before


def test_a_refund_without_a_reason_shows_the_form_again(client, books):
    operator_client(client)
    before = books_state()
    response = action_post(client, changelist(TopUp), "refund", [books.paid.pk], amount="5", reason="  ")
    assert response.status_code == 200
    form = response.context["form"]
    assert form.is_bound and "reason" in form.errors
    assert str(forms.Field.default_error_messages["required"]) in response.content.decode()
    assert books_state() == before


def test_a_refund_above_what_can_be_refunded_keeps_the_form_open_with_the_most_that_can(client, books):
    operator_client(client)
    before = books_state()
    response = action_post(client, changelist(TopUp), "refund", [books.paid.pk], amount="500",
                           reason="Unhappy")
    assert response.status_code == 200
    # 110.00 of the top-up are left, but a rental has spent part of the wallet since.
    held = Wallet.objects.get(pk=books.wallet.pk).balance
    assert held < Decimal("110.00")
    with translation.override("en"):
        expected = gettext("At most %(amount)s can still be refunded.") % {
            "amount": formatting.money(held, "EUR")}
    assert response.context["form"].errors == {"amount": [expected]}
    assert not messages_of(response)
    assert books_state() == before


def test_a_refund_of_two_top_ups_at_once_is_refused(client, books):
    operator_client(client)
    before = books_state()
    response = action_post(client, changelist(TopUp), "refund", [books.paid.pk, books.pending.pk],
                           amount="5", reason="Two")
    assert response.status_code == 302
    with translation.override("en"):
        expected = gettext("Select exactly one row for this action.")
    assert messages_of(response, message_levels.WARNING) == [expected]
    assert books_state() == before


def test_an_adjustment_without_a_reason_moves_nothing(client, books):
    operator_client(client)
    before = books_state()
    response = action_post(client, changelist(Wallet), "adjust", [books.wallet.pk], amount="25")
    assert response.status_code == 200
    assert "reason" in response.context["form"].errors
    assert books_state() == before


def test_an_adjustment_below_zero_is_refused_with_the_balance(client, books):
    operator_client(client)
    before = books_state()
    response = action_post(client, changelist(Wallet), "adjust", [books.wallet.pk], amount="-1000",
                           reason="Chargeback")
    assert response.status_code == 200  # the form stays open, with what the operator typed
    with translation.override("en"):
        held = formatting.money(books.wallet.balance, "EUR")
    [error] = response.context["form"].errors["amount"]
    assert held in error
    assert response.context["form"]["amount"].value() == "-1000"
    assert not messages_of(response)
    assert books_state() == before


def test_an_adjustment_sent_twice_moves_money_once(client, books):
    operator = operator_client(client)
    key = uuid.uuid4().hex
    before = books.wallet.balance
    for _ in range(2):  # a double click: the same form, the same one-time key
        response = action_post(client, changelist(Wallet), "adjust", [books.wallet.pk], amount="25",
                               reason="Outage credit", request_key=key)
        assert response.status_code == 302
    assert Wallet.objects.get(pk=books.wallet.pk).balance == before + Decimal("25.00")
    assert LedgerTransaction.objects.filter(kind=LedgerTransaction.Kind.ADJUSTMENT,
                                            created_by=operator).count() == 1
    entry = AuditEntry.objects.get(action=AuditAction.WALLET_ADJUST)
    assert (entry.actor, entry.reason) == (operator, "Outage credit")


def test_a_refund_sent_twice_refunds_once(client, books):
    operator_client(client)
    key = uuid.uuid4().hex
    before = books.wallet.balance
    for _ in range(2):
        action_post(client, changelist(TopUp), "refund", [books.paid.pk], amount="5", reason="Asked",
                    request_key=key)
    assert Wallet.objects.get(pk=books.wallet.pk).balance == before - Decimal("5.00")
    assert TopUpRefund.objects.filter(top_up=books.paid).count() == 2  # the fixture's and this one
    assert AuditEntry.objects.filter(action=AuditAction.TOP_UP_REFUND).count() == 2


def test_a_rental_ended_by_an_operator_is_refunded_its_unused_minutes(client, books):
    operator = operator_client(client)
    before = Wallet.objects.get(pk=books.wallet.pk).balance
    response = action_post(client, changelist(Rental), "end_as_operator", [books.rental.pk],
                           reason="Server on fire")
    assert response.status_code == 302
    rental = Rental.objects.get(pk=books.rental.pk)
    assert rental.state == RentalState.ENDED
    assert Wallet.objects.get(pk=books.wallet.pk).balance > before
    entry = AuditEntry.objects.get(action=AuditAction.RENTAL_END)
    assert (entry.actor, entry.reason) == (operator, "Server on fire")


# --- crediting a bank transfer by its reference ------------------------------------------------------


def test_the_credit_page_credits_a_transfer_once(client, books):
    operator = operator_client(client, "finance")
    page = url("admin:billing_topup_credit")
    response = client.get(page)
    assert response.status_code == 200
    assert 'name="reference"' in response.content.decode()
    assert page in client.get(changelist(TopUp)).content.decode()  # the link above the list
    wallet_before = books.wallet.balance

    response = client.post(page, {"reference": f" {books.pending.reference.lower()} "})
    credit = url("admin:billing_topup_credit_one", top_up_id=books.pending.pk)
    assert response.status_code == 302 and response["Location"] == credit
    response = client.post(credit, {"received": str(books.pending.total), "bank_reference": "BCP 2-12 #9",
                                    "reason": "Statement of 2 December"})
    assert response.status_code == 302 and response["Location"] == change_url(books.pending)
    with translation.override("en"):
        expected = gettext("Bank transfer %(reference)s credited: %(amount)s to %(email)s.") % {
            "reference": books.pending.reference, "amount": formatting.money(Decimal("30.00"), "EUR"),
            "email": books.buyer.email,
        }
    assert messages_of(response, message_levels.SUCCESS) == [expected]
    top_up = TopUp.objects.get(pk=books.pending.pk)
    assert (top_up.status, top_up.credited_by, top_up.bank_reference) == (
        TopUpStatus.PAID, operator, "BCP 2-12 #9"
    )
    assert Wallet.objects.get(pk=books.wallet.pk).balance == wallet_before + Decimal("30.00")
    entry = AuditEntry.objects.get(action=AuditAction.TOP_UP_CREDIT, actor=operator)
    assert (entry.target_id, entry.reason) == (str(top_up.pk), "Statement of 2 December")

    before = books_state()
    response = client.post(credit, {"received": "36.90", "bank_reference": "Again"})
    assert response.status_code == 200
    with translation.override("en"):
        message = gettext("This bank transfer has already been credited: nothing was credited again.")
    assert response.context["form"].non_field_errors() == [message]
    assert books_state() == before


def test_the_credit_page_refuses_an_unknown_reference_or_no_bank_reference(client, books):
    operator_client(client, "finance")
    page = url("admin:billing_topup_credit")
    before = books_state()
    response = client.post(page, {"reference": "EXC-NOPE0000"})
    assert response.status_code == 200
    with translation.override("en"):
        assert response.context["form"].errors["reference"] == [
            gettext("No bank-transfer top-up has this reference.")
        ]
    credit = url("admin:billing_topup_credit_one", top_up_id=books.pending.pk)
    response = client.post(credit, {"received": "36.90", "bank_reference": ""})
    assert response.status_code == 200 and "bank_reference" in response.context["form"].errors
    assert books_state() == before


def test_the_credit_page_refuses_a_card_top_up(client, books):
    operator_client(client, "finance")
    sandbox = top_up_create(user=books.buyer, amount_text="20", currency="EUR", provider="sandbox",
                            form_token=uuid.uuid4())
    before = books_state()
    response = client.post(url("admin:billing_topup_credit"), {"reference": sandbox.reference})
    assert response.status_code == 200 and "reference" in response.context["form"].errors
    credit = url("admin:billing_topup_credit_one", top_up_id=sandbox.pk)
    assert client.post(credit, {"received": "24.60", "bank_reference": "X"}).status_code == 404
    assert books_state() == before


# --- the market page -------------------------------------------------------------------------------


@pytest.fixture
def crossing_book(db, ed25519_public_key):
    """A closed market where two funded bids cross an offer and one unfunded bid would be cancelled."""
    Market.objects.update_or_create(pk=Market.SINGLETON_ID, defaults={"is_open": False})
    gpu = GpuModelFactory(name="Preview H200", slug="preview-h200")
    OfferFactory(server=ServerFactory(gpu_model=gpu), gpus_offered=4, price_usd=Decimal("2.10"))
    for _ in range(2):
        buyer = UserFactory()
        fund_usd(buyer, "100.00")
        bid_place(buyer=buyer, gpu_model_id=gpu.pk, gpus=1, max_price_usd=Decimal("2.50"),
                  time_in_force=TimeInForce.BID, ssh_public_key=ed25519_public_key, form_token=uuid.uuid4())
    BidFactory(gpu_model=gpu, state="open", time_in_force="bid", max_price_usd=Decimal("3.00"))
    return gpu


def test_the_closed_market_page_previews_the_opening(client, crossing_book):
    operator_client(client)
    response = client.get(url("admin:exchange_market_changelist"))
    assert response.status_code == 200
    preview = response.context["preview"]
    assert preview.trades == [OpeningTrade(gpu_model="Preview H200", rentals=2, gpus=2,
                                           hourly_usd=Decimal("4.20"))]
    assert preview.bids_cancelled == 1
    html = response.content.decode()
    assert "<td>Preview H200</td>" in html and "<td>2</td>" in html
    assert formatting.usd(Decimal("4.20")) in html
    # Only a preview: nothing matched, nothing cancelled, still closed.
    assert not Rental.objects.exists()
    assert Bid.objects.filter(state=BidState.OPEN).count() == 3
    assert not Market.objects.get().is_open


def test_the_market_page_previews_in_french(client, crossing_book):
    operator_client(client)
    response = client.get(url("admin:exchange_market_changelist", "fr"))
    assert response.status_code == 200
    with translation.override("fr"):
        closed = gettext("The market is closed: bids and offers rest in the book.")
        button = gettext("Open the market")
    html = response.content.decode()
    assert closed in html and f'value="{button}"' in html
    assert formatting.usd(Decimal("4.20"), language="fr") in html


def test_a_superuser_opens_the_market_from_its_page(client, crossing_book):
    operator = operator_client(client)
    page = url("admin:exchange_market_changelist")
    response = client.post(page, {"target": "open", "reason": "Launch day"})
    assert response.status_code == 302
    assert Market.objects.get().is_open
    assert Rental.objects.filter(gpu_model=crossing_book).count() == 2
    entry = AuditEntry.objects.get(action=AuditAction.MARKET_OPEN)
    assert (entry.actor, entry.reason, entry.before, entry.after) == (
        operator, "Launch day", {"is_open": False}, {"is_open": True}
    )
    with translation.override("en"):
        assert messages_of(response, message_levels.SUCCESS) == [
            gettext("The market is open: the opening pass made %(count)d rentals.") % {"count": 2}
        ]

    response = client.get(url("admin:exchange_market_changelist"))
    assert response.context["is_open"] and response.context["preview"] is None
    client.post(url("admin:exchange_market_changelist"), {"target": "close", "reason": ""})
    assert not Market.objects.get().is_open
    assert AuditEntry.objects.get(action=AuditAction.MARKET_CLOSE).actor == operator


def test_open_the_market_sent_twice_leaves_it_open(client, crossing_book):
    """A double click on "Open the market" (or a second operator on a page loaded before the first
    opened it) must not close the market again: the button says what it does."""
    operator_client(client)
    page = url("admin:exchange_market_changelist")
    for _ in range(2):
        assert client.post(page, {"target": "open", "reason": "Launch day"}).status_code == 302
    assert Market.objects.get().is_open
    assert not AuditEntry.objects.filter(action=AuditAction.MARKET_CLOSE).exists()
    assert AuditEntry.objects.filter(action=AuditAction.MARKET_OPEN).count() == 1


@pytest.mark.parametrize("role", ["support", "finance"])
def test_other_roles_see_the_market_page_but_cannot_open_it(client, crossing_book, role):
    operator_client(client, role)
    response = client.get(url("admin:exchange_market_changelist"))
    assert response.status_code == 200 and not response.context["can_operate"]
    assert "<form" not in response.content.decode().split('id="content-main"')[1]
    before = books_state()
    response = client.post(url("admin:exchange_market_changelist"), {"target": "open", "reason": "Let's go"})
    assert response.status_code == 200
    assert not Market.objects.get().is_open
    assert not Rental.objects.exists()
    assert books_state() == before


# --- the operations page ---------------------------------------------------------------------------


def activity(count: int, *, now) -> None:
    """`count` buyers who topped up by bank transfer and run one charged rental each."""
    for _ in range(count):
        top_up = bank_top_up("50")
        top_up_mark_paid(top_up_id=top_up.pk)
        rental = RentalFactory(buyer=top_up.user, started_at=now - timedelta(minutes=5))
        rental_charge_next_hour(rental_id=rental.pk, now=now)


def test_the_operations_page_shows_the_figures(client, books):
    operator_client(client)
    response = client.get(url("admin:operations"))
    assert response.status_code == 200
    summary = response.context["summary"]
    assert (summary.market_open, summary.rentals_running, summary.gpus_rented) == (False, 1, 1)
    assert summary.last_24_hours.gpu_hours == 1 and summary.last_24_hours.gross_usd == Decimal("2.00")
    assert (summary.applications_waiting, summary.payouts_waiting) == (1, 1)
    assert summary.payouts_waiting_usd == Decimal("60.00")
    eur = next(position for position in summary.positions if position.currency == "EUR")
    assert eur.wallets == sum(Wallet.objects.filter(currency="EUR").values_list("balance", flat=True))
    assert summary.last_reconciliation is not None
    html = response.content.decode()
    for text in (formatting.usd(Decimal("2.00")), formatting.usd(Decimal("60.00")),
                 formatting.money(eur.wallets, "EUR"), formatting.money(eur.vat, "EUR")):
        assert text in html
    assert f"{url('admin:sellers_sellerapplication_changelist')}?status__exact=submitted" in html
    with translation.override("en"):
        assert gettext("Open the market") in html  # a superuser may open the market


def test_the_operations_page_hides_the_market_link_from_other_roles(client, books):
    operator_client(client, "finance")
    response = client.get(url("admin:operations"))
    assert response.status_code == 200
    content = response.content.decode().split('id="content-main"')[1]
    assert url("admin:exchange_market_changelist") not in content  # the sidebar still lists the page
    with translation.override("en"):
        assert gettext("Open the market") not in content


def test_the_operations_page_runs_a_constant_number_of_queries(client, django_assert_max_num_queries):
    operator_client(client)
    ExchangeRateFactory(currency="EUR", rate=Decimal("0.92000000"))
    now = timezone.now()
    activity(2, now=now)
    page = url("admin:operations")
    client.get(page)  # warm the caches (content types, permissions) once
    with CaptureQueriesContext(connection) as few:
        assert client.get(page).status_code == 200
    # The session, the user, their two-factor check, the summary's seven queries, the agents' three
    # and the isolation's two.
    assert len(few.captured_queries) <= 17
    activity(38, now=now)
    with django_assert_max_num_queries(len(few.captured_queries)):
        response = client.get(page)
    assert response.status_code == 200
    summary = response.context["summary"]
    assert (summary.rentals_running, summary.last_24_hours.gpu_hours) == (40, 40)
    assert TopUp.objects.filter(status=TopUpStatus.PAID).count() == 40


# The labels of the operations page that must read in the visitor's language.
OPERATIONS_LABELS = (
    "Operations", "Market", "Rentals running", "GPUs rented", "Trading", "Last 24 hours", "Last 30 days",
    "GPU-hours sold", "Gross volume", "Platform fees", "Money, from the ledger", "All wallets",
    "VAT collected", "Platform revenue", "Waiting for an operator", "Seller applications to review",
    "Payouts to pay or reject", "Closed: bids and offers rest",
)


@pytest.mark.parametrize("language", ["pt", "fr"])
def test_the_operations_page_renders_in_portuguese_and_french(client, books, language):
    operator_client(client)
    response = client.get(url("admin:operations", language))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'lang="{language}"' in html
    assert html.count('<div class="module">') == 5
    with translation.override(language):
        labels = {label: gettext(label) for label in OPERATIONS_LABELS}
    untranslated = [label for label, translated in labels.items() if translated == label]
    assert untranslated == []
    text = unescape(html)
    for label, translated in labels.items():
        assert translated in text, label
    assert {"fr": "24 dernières heures", "pt": "Últimas 24 horas"}[language] in html
    summary = response.context["summary"]
    eur = next(position for position in summary.positions if position.currency == "EUR")
    assert formatting.money(eur.wallets, "EUR", language=language) in html
    assert formatting.usd(summary.payouts_waiting_usd, language=language) in html


# --- the audit log ---------------------------------------------------------------------------------


@pytest.fixture
def audit_log(books):
    """Besides the fixture's credit and refund by the superuser: two finance operators' adjustments
    and a support operator's approval."""
    alice = operator_make("finance", email="alice@everxcloud.test")
    bruno = operator_make("finance", email="bruno@everxcloud.test")
    wallet_adjust(wallet_id=books.wallet.pk, operator=alice, amount_text="5", reason="Outage of 3 December",
                  request_key="a1")
    wallet_adjust(wallet_id=books.wallet.pk, operator=bruno, amount_text="-2", reason="Typo in a credit",
                  request_key="b1")
    top_up_refund(top_up_id=books.paid.pk, operator=alice, amount_text="1", reason="Partial refund",
                  request_key="a2")
    return SimpleNamespace(alice=alice, bruno=bruno)


def audit_rows(client, query: str) -> list[AuditEntry]:
    response = client.get(f"{changelist(AuditEntry)}?{query}")
    assert response.status_code == 200
    return list(response.context["cl"].result_list)


def test_the_audit_log_filters_by_action(client, audit_log):
    operator_client(client, "support")
    rows = audit_rows(client, "action__exact=wallet_adjust")
    assert sorted(entry.reason for entry in rows) == ["Outage of 3 December", "Typo in a credit"]
    assert {entry.action for entry in audit_rows(client, "action__exact=top_up_refund")} == {"top_up_refund"}


def test_the_audit_log_filters_by_actor(client, audit_log):
    operator_client(client)
    rows = audit_rows(client, f"actor__id__exact={audit_log.alice.pk}")
    assert {entry.actor for entry in rows} == {audit_log.alice}
    assert sorted(entry.action for entry in rows) == ["top_up_refund", "wallet_adjust"]
    # The actor filter offers the operators who acted, not every user.
    response = client.get(changelist(AuditEntry))
    html = response.content.decode()
    assert f"actor__id__exact={audit_log.alice.pk}" in html
    assert f"actor__id__exact={audit_log.bruno.pk}" in html


def test_the_audit_log_searches_the_reasons(client, audit_log):
    operator_client(client)
    rows = audit_rows(client, "q=outage")
    assert [(entry.actor, entry.reason) for entry in rows] == [(audit_log.alice, "Outage of 3 December")]
    assert audit_rows(client, "q=nothing+like+this") == []


def test_an_audit_entry_shows_before_and_after(client, audit_log):
    operator_client(client)
    entry = AuditEntry.objects.get(actor=audit_log.bruno)
    response = client.get(change_url(entry))
    assert response.status_code == 200
    html = response.content.decode()
    assert "Typo in a credit" in html and "<pre>" in html and "&quot;balance&quot;" in html


# --- audited edits: GPU specifications, exchange rates -------------------------------------------------


def change_form_data(response, **changes) -> dict:
    """The admin change form as the browser would send it back, with `changes`."""
    form = response.context["adminform"].form
    data = {}
    for name, field in form.fields.items():
        value = form.initial.get(name)
        if isinstance(field, forms.BooleanField):
            if value:
                data[name] = "on"
        else:
            data[name] = "" if value is None else value
    data.update(changes)
    data["_save"] = "Save"
    return data


def test_a_gpu_spec_edit_is_audited_with_before_and_after(client):
    operator = operator_client(client)
    gpu = GpuModelFactory(name="Edit H100", slug="edit-h100", memory_gb=80)
    page = change_url(gpu)
    response = client.post(page, change_form_data(client.get(page), memory_gb=94))
    assert response.status_code == 302
    assert GpuModel.objects.get(pk=gpu.pk).memory_gb == 94
    entry = AuditEntry.objects.get(action=AuditAction.GPU_MODEL_CHANGE)
    assert (entry.actor, entry.target_id) == (operator, str(gpu.pk))
    assert (entry.before, entry.after) == ({"memory_gb": 80}, {"memory_gb": 94})

    # Saving without a change records nothing.
    client.post(page, change_form_data(client.get(page)))
    assert AuditEntry.objects.filter(action=AuditAction.GPU_MODEL_CHANGE).count() == 1


def test_a_decimal_spec_and_a_list_edit_are_audited_too(client):
    operator_client(client)
    gpu = GpuModelFactory(name="Edit H200", slug="edit-h200")
    page = change_url(gpu)
    response = client.post(page, change_form_data(client.get(page), bf16_dense_tflops="989.40"))
    assert response.status_code == 302
    entry = AuditEntry.objects.get(action=AuditAction.GPU_MODEL_CHANGE)
    assert entry.before == {"bf16_dense_tflops": None}
    assert Decimal(str(entry.after["bf16_dense_tflops"])) == Decimal("989.40")

    # The position, edited in the list itself, goes through the same service.
    response = client.post(changelist(GpuModel), {
        "form-TOTAL_FORMS": "1", "form-INITIAL_FORMS": "1", "form-MIN_NUM_FORMS": "0",
        "form-MAX_NUM_FORMS": "1000", "form-0-id": str(gpu.pk), "form-0-position": "7", "_save": "Save",
    })
    assert response.status_code == 302
    assert GpuModel.objects.get(pk=gpu.pk).position == 7
    latest = AuditEntry.objects.filter(action=AuditAction.GPU_MODEL_CHANGE).latest("pk")
    assert (latest.before, latest.after) == ({"position": 0}, {"position": 7})


def test_a_gpu_added_in_the_admin_is_audited(client):
    operator = operator_client(client)
    response = client.post(url("admin:catalog_gpumodel_add"), {
        "name": "New L40S", "slug": "new-l40s", "architecture": "Ada Lovelace", "memory_gb": "48",
        "memory_type": "GDDR6", "bandwidth_gb_s": "864", "bf16_dense_tflops": "362.05", "fp64_tflops": "",
        "source": "datasheet", "position": "3", "_save": "Save",
    })
    assert response.status_code == 302
    gpu = GpuModel.objects.get(slug="new-l40s")
    entry = AuditEntry.objects.get(action=AuditAction.GPU_MODEL_CHANGE)
    assert (entry.actor, entry.target_id, entry.before) == (operator, str(gpu.pk), None)
    assert entry.after["memory_gb"] == 48 and entry.after["name"] == "New L40S"


@pytest.mark.parametrize("role", ["support", "finance"])
def test_only_superusers_edit_the_gpu_catalog(client, role):
    gpu = GpuModelFactory(name="Locked H100", slug="locked-h100", memory_gb=80)
    superuser_client = client.__class__()
    operator_client(superuser_client)
    data = change_form_data(superuser_client.get(change_url(gpu)), memory_gb=1)
    operator_client(client, role)
    assert client.get(change_url(gpu)).status_code == 200  # read only
    assert client.post(change_url(gpu), data).status_code == 403
    assert GpuModel.objects.get(pk=gpu.pk).memory_gb == 80
    assert not AuditEntry.objects.exists()


def rates_file(content: bytes, name: str = "rates.json") -> SimpleUploadedFile:
    return SimpleUploadedFile(name, content, content_type="application/json")


@pytest.mark.parametrize("role", [None, "finance"])
def test_a_rates_file_adds_rates_and_an_audit_row(client, role):
    operator = operator_client(client, role)
    page = url("admin:billing_exchangerate_load")
    assert client.get(page).status_code == 200
    assert page in client.get(changelist(ExchangeRate)).content.decode()
    content = json.dumps({
        "base": "USD", "valid_from": "2026-12-01T00:00:00Z", "source": "ECB reference rates",
        "rates": {"USD": "1", "EUR": "0.93", "GBP": "0.80"},
    }).encode()
    response = client.post(page, {"file": rates_file(content), "reason": "Monthly rates"})
    assert response.status_code == 302 and response["Location"] == changelist(ExchangeRate)
    assert sorted(ExchangeRate.objects.values_list("currency", "rate")) == [
        ("EUR", Decimal("0.93000000")), ("GBP", Decimal("0.80000000")),
    ]
    entry = AuditEntry.objects.get(action=AuditAction.EXCHANGE_RATES_LOAD)
    assert (entry.actor, entry.reason, entry.after["added"]) == (operator, "Monthly rates", 2)
    with translation.override("en"):
        assert messages_of(response, message_levels.SUCCESS) == [
            ngettext("%(count)d exchange rate added.", "%(count)d exchange rates added.", 2) % {"count": 2}
        ]


@pytest.mark.parametrize(
    "content",
    [b"not a rates file", b'{"base": "EUR", "valid_from": "2026-12-01T00:00:00Z", "rates": {"GBP": "0.8"}}',
     b'{"valid_from": "2026-12-01T00:00:00", "rates": {"EUR": "0.93"}}',
     b'{"valid_from": "2026-12-01T00:00:00Z", "rates": {"EUR": "-1"}}',
     b'{"valid_from": "2026-12-01T00:00:00Z", "rates": {"USD": "1"}}', b"\xff\xfe"],
    ids=["not-json", "base-eur", "naive-time", "negative", "usd-only", "not-utf8"],
)
def test_an_invalid_rates_file_is_a_form_error_and_adds_nothing(client, content):
    operator_client(client)
    response = client.post(url("admin:billing_exchangerate_load"), {"file": rates_file(content)})
    assert response.status_code == 200
    assert response.context["form"].errors["file"]
    assert not ExchangeRate.objects.exists()
    assert not AuditEntry.objects.exists()


def test_support_cannot_load_rates(client):
    operator_client(client, "support")
    content = b'{"valid_from": "2026-12-01T00:00:00Z", "rates": {"EUR": "0.93"}}'
    response = client.post(url("admin:billing_exchangerate_load"), {"file": rates_file(content)})
    assert response.status_code == 302
    assert not ExchangeRate.objects.exists() and not AuditEntry.objects.exists()


def test_a_rate_added_in_the_admin_form_is_audited(client):
    operator = operator_client(client, "finance")
    response = client.post(url("admin:billing_exchangerate_add"), {
        "currency": "GBP", "rate": "0.79", "valid_from_0": "2026-12-01", "valid_from_1": "00:00:00",
        "source": "Desk", "_save": "Save",
    })
    assert response.status_code == 302
    rate = ExchangeRate.objects.get()
    assert (rate.currency, rate.rate) == ("GBP", Decimal("0.79000000"))
    entry = AuditEntry.objects.get(action=AuditAction.EXCHANGE_RATE_CHANGE)
    assert (entry.actor, entry.target_id, entry.before) == (operator, str(rate.pk), None)


# --- the host agent --------------------------------------------------------------------------------


def test_the_operations_page_lists_unreachable_and_mismatched_servers(client, books):
    operator_client(client, "support")
    server = books.rental.server
    response = client.get(url("admin:operations"))
    agents = response.context["agents"]
    assert (agents.unreachable_count, agents.mismatched_count) == (1, 1)
    html = response.content.decode()
    assert html.count(url("admin:sellers_server_change", object_id=server.pk)) == 2
    assert url("admin:sellers_serveragent_change", object_id=server.pk) in html
    assert f"GPU 0 is a NVIDIA A100, the registration says {server.gpu_model.name}." in unescape(html)
    ServerAgent.objects.update(unreachable_since=None, mismatch=[])
    with translation.override("en"):
        quiet = client.get(url("admin:operations")).content.decode()
        assert unescape(gettext("Every agent with rentals at stake is reporting.")) in unescape(quiet)
        assert unescape(gettext("Every agent sees what its server's registration says.")) in unescape(quiet)


def test_the_server_admin_shows_its_agent_and_history(client, books):
    operator_client(client, "support")
    server = books.rental.server
    for minute in range(60):
        ServerHeartbeat.objects.create(server=server, received_at=timezone.now() - timedelta(minutes=minute),
                                       accepted=True, agent_version="1.0.0")
    response = client.get(change_url(server))
    assert response.status_code == 200
    html = unescape(response.content.decode())
    assert "Unreachable" in html and "GPU 0 is a NVIDIA A100" in html
    heartbeats = next(formset for formset in response.context["inline_admin_formsets"]
                      if formset.formset.model is ServerHeartbeat)
    assert len(heartbeats.formset.forms) == 50
    assert "Agent token created" in html  # its events


def test_support_revokes_an_agent_token_and_finance_cannot(client, books):
    token = AgentToken.objects.get(revoked_at__isnull=True)
    operator_client(client, "finance")
    refused = client.post(changelist(AgentToken), {"action": "revoke", "_selected_action": [token.pk]})
    assert refused.status_code == 200  # Django answers "no action selected"
    token.refresh_from_db()
    assert token.revoked_at is None
    client.logout()
    operator_client(client, "support")
    response = client.post(changelist(AgentToken), {"action": "revoke", "_selected_action": [token.pk]})
    assert response.status_code == 302
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert messages_of(response) == ["1 agent token was revoked."]


def test_the_host_agents_rows_are_read_only(client, books):
    operator_client(client)
    for obj in (ServerAgent.objects.first(), AgentToken.objects.first(), ServerHeartbeat.objects.first()):
        response = client.post(change_url(obj), {"agent_version": "9.9.9"})
        assert response.status_code == 403, obj._meta.label


def test_the_operations_page_lists_servers_that_lost_isolation_or_whose_locks_are_distrusted(client, books):
    operator_client(client, "support")
    server = books.rental.server
    now = timezone.now()
    other = ServerFactory(seller=server.seller, isolation_level="shared",
                          devices_held_at=now - timedelta(hours=1))
    ServerEvent.objects.create(server=server, at=now - timedelta(days=2), kind="isolation_changed",
                               detail={"from": "container", "to": "shared"})
    ServerEvent.objects.create(server=server, at=now - timedelta(days=1), kind="isolation_changed",
                               detail={"from": "shared", "to": "whole"})
    ServerEvent.objects.create(server=other, at=now - timedelta(days=8), kind="isolation_changed",
                               detail={"from": "shared", "to": "whole"})  # too old to list
    ServerEvent.objects.create(server=other, at=now, kind="isolation_changed",
                               detail={"from": "whole", "to": "shared"})  # a rise, not a fall
    Server.objects.filter(pk=server.pk).update(isolation_level="whole")
    # The report in force, the one its agent's digest names: it lacks a private /tmp.
    ServerAgent.objects.update_or_create(server=server, defaults={
        "enrolled_at": now, "last_heartbeat_at": now, "agent_version": "1.2.0", "isolation_digest": "a" * 64})
    ServerIsolationReport.objects.create(server=server, received_at=now, digest="a" * 64, level="whole",
                                         report=isolation_of(server, tmp_private=False))
    with translation.override("fr"):
        response = client.get(url("admin:operations", language="fr"))
    trouble = response.context["isolation"]
    assert trouble.count == 2
    assert [(listed.pk, listed.dropped_from) for listed in trouble.servers] == [
        (server.pk, "shared"), (other.pk, None),
    ]
    html = unescape(response.content.decode())
    assert "Descendu du niveau «\u00a0Serveur partagé\u00a0» le " in html
    lacking = "/tmp et /dev/shm privés"  # noqa: S108 (the fact's French label, not a path)
    assert (trouble.servers[0].dropped_why, trouble.servers[1].dropped_why) == ([lacking], [])
    assert f'Ce qui manque\u00a0:<ul data-testid="isolation-why-{server.pk}"><li>{lacking}</li></ul>' in html
    assert "Verrous des périphériques GPU mis en doute depuis le " in html
    assert url("admin:sellers_server_change", object_id=other.pk, language="fr") in html
    Server.objects.update(devices_held_at=None)
    ServerEvent.objects.filter(kind="isolation_changed").delete()
    with translation.override("en"):
        quiet = unescape(client.get(url("admin:operations")).content.decode())
        assert unescape(gettext("No server lost isolation in the last 7 days.")) in quiet
