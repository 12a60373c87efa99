"""Operators deciding on sellers (support): applications, servers; and editing the GPU catalog
(superusers). Each decision is in the audit log; an operator whose role does not allow it changes
nothing, sends no email and leaves no entry."""

from decimal import Decimal

import pytest
from django.contrib.auth.models import Permission
from django.core import mail

from accounts.exceptions import OperatorNotAllowed
from accounts.models import AuditAction, AuditEntry
from catalog.models import GpuModel
from catalog.services import gpu_model_save
from exchange.models import Offer, OfferState, RentalState
from exchange.services import server_activate, server_retire_by_operator
from sellers.exceptions import ServerLocked
from sellers.models import (
    ApplicationStatus,
    Seller,
    SellerApplication,
    SellerMembership,
    Server,
    ServerStatus,
)
from sellers.services import application_approve, application_ask_info, application_reject
from tests.accounts.support import audit_log
from tests.factories import (
    GpuModelFactory,
    OfferFactory,
    RentalFactory,
    ServerFactory,
    UserFactory,
    operator_make,
)
from tests.sellers.support import submitted

pytestmark = pytest.mark.django_db


@pytest.fixture
def support():
    return operator_make("support")


@pytest.fixture
def finance():
    return operator_make("finance")


def state() -> tuple:
    """Applications, sellers, memberships, servers, offers and the audit log."""
    return (
        list(SellerApplication.objects.order_by("pk").values_list(
            "pk", "status", "decided_by", "decided_at", "rejection_reason", "operator_question"
        )),
        Seller.objects.count(),
        SellerMembership.objects.count(),
        list(Server.objects.order_by("pk").values_list("pk", "status", "gpus_rented")),
        list(Offer.objects.order_by("pk").values_list("pk", "state")),
        audit_log(),
    )


# --- applications ------------------------------------------------------------------------------------


def test_approving_is_audited(support, django_capture_on_commit_callbacks):
    application = submitted()

    with django_capture_on_commit_callbacks(execute=True):
        seller = application_approve(application_id=application.pk, operator=support)

    assert SellerMembership.objects.filter(seller=seller, user=application.applicant).exists()
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (support, AuditAction.APPLICATION_APPROVE, "")
    assert (entry.target_type.model, entry.target_id) == ("sellerapplication", str(application.pk))
    assert (entry.before, entry.after) == ({"status": "submitted"}, {"status": "approved"})
    assert len(mail.outbox) == 1


def test_rejecting_is_audited_with_the_reason(support, django_capture_on_commit_callbacks):
    application = submitted()

    with django_capture_on_commit_callbacks(execute=True):
        application_reject(application_id=application.pk, operator=support, reason=" No data centre. ")

    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (
        support, AuditAction.APPLICATION_REJECT, "No data centre."
    )
    assert (entry.before, entry.after) == ({"status": "submitted"}, {"status": "rejected"})
    assert SellerApplication.objects.get(pk=application.pk).rejection_reason == "No data centre."
    assert len(mail.outbox) == 1


def test_asking_for_information_is_audited_with_the_question(support, django_capture_on_commit_callbacks):
    application = submitted()

    with django_capture_on_commit_callbacks(execute=True):
        application_ask_info(application_id=application.pk, operator=support, question="Which data centre?")

    entry = AuditEntry.objects.get()
    assert (entry.action, entry.reason) == (AuditAction.APPLICATION_ASK_INFO, "Which data centre?")
    assert (entry.before, entry.after) == ({"status": "submitted"}, {"status": "needs_info"})
    assert len(mail.outbox) == 1


@pytest.mark.parametrize(
    "decide",
    [
        lambda pk, operator: application_approve(application_id=pk, operator=operator),
        lambda pk, operator: application_reject(application_id=pk, operator=operator, reason="No"),
        lambda pk, operator: application_ask_info(application_id=pk, operator=operator, question="Why?"),
    ],
    ids=["approve", "reject", "ask_info"],
)
def test_finance_may_not_decide_an_application(finance, decide, django_capture_on_commit_callbacks):
    application = submitted()
    before = state()

    with django_capture_on_commit_callbacks(execute=True) as callbacks, pytest.raises(OperatorNotAllowed):
        decide(application.pk, finance)

    assert state() == before
    assert SellerApplication.objects.get(pk=application.pk).status == ApplicationStatus.SUBMITTED
    assert callbacks == [] and mail.outbox == []


# --- servers ---------------------------------------------------------------------------------------


def test_support_activates_a_pending_server(support):
    server = ServerFactory(status=ServerStatus.PENDING)

    activated = server_activate(server_id=server.pk, operator=support)

    assert activated.status == ServerStatus.ACTIVE
    assert Server.objects.get(pk=server.pk).status == ServerStatus.ACTIVE
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action) == (support, AuditAction.SERVER_ACTIVATE)
    assert (entry.target_type.model, entry.target_id) == ("server", str(server.pk))
    assert (entry.before, entry.after) == ({"status": "pending"}, {"status": "active"})


def test_activating_an_active_server_again_records_nothing(support):
    server = ServerFactory(status=ServerStatus.PENDING)
    server_activate(server_id=server.pk, operator=support)
    before = state()
    server_activate(server_id=server.pk, operator=support)
    assert state() == before


def test_a_retired_server_is_not_activated(support):
    server = ServerFactory(status=ServerStatus.RETIRED)
    before = state()
    with pytest.raises(ServerLocked) as refused:
        server_activate(server_id=server.pk, operator=support)
    assert refused.value.code == "server_not_pending"
    assert state() == before


def test_finance_may_not_activate_a_server(finance):
    server = ServerFactory(status=ServerStatus.PENDING)
    before = state()
    with pytest.raises(OperatorNotAllowed):
        server_activate(server_id=server.pk, operator=finance)
    assert state() == before


def test_support_retires_a_server_and_its_offer_is_withdrawn(support):
    offer = OfferFactory()

    retired = server_retire_by_operator(server_id=offer.server_id, operator=support, reason=" Hardware gone ")

    assert retired.status == ServerStatus.RETIRED
    assert Offer.objects.get(pk=offer.pk).state == OfferState.WITHDRAWN
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action, entry.reason) == (support, AuditAction.SERVER_RETIRE, "Hardware gone")
    assert (entry.target_type.model, entry.target_id) == ("server", str(offer.server_id))
    assert (entry.before, entry.after) == ({"status": "active"}, {"status": "retired"})


def test_retiring_a_retired_server_again_records_nothing(support):
    server = ServerFactory()
    server_retire_by_operator(server_id=server.pk, operator=support)
    before = state()
    server_retire_by_operator(server_id=server.pk, operator=support, reason="Again")
    assert state() == before


def test_a_server_with_a_running_rental_is_not_retired(support):
    rental = RentalFactory(state=RentalState.STARTING)
    before = state()
    with pytest.raises(ServerLocked) as refused:
        server_retire_by_operator(server_id=rental.server_id, operator=support, reason="Hardware gone")
    assert refused.value.code == "server_has_rentals"
    assert state() == before


def test_finance_may_not_retire_a_server(finance):
    offer = OfferFactory()
    before = state()
    with pytest.raises(OperatorNotAllowed):
        server_retire_by_operator(server_id=offer.server_id, operator=finance, reason="Hardware gone")
    assert state() == before


# --- the GPU catalog ---------------------------------------------------------------------------------


def gpu_rows() -> list[tuple]:
    return list(GpuModel.objects.order_by("pk").values_list("pk", "name", "memory_gb", "bf16_dense_tflops"))


def test_an_edit_of_the_catalog_records_the_changed_fields_only():
    operator = operator_make()
    gpu = GpuModelFactory(name="H100 SXM", memory_gb=80, bf16_dense_tflops=Decimal("989.00"))
    gpu = GpuModel.objects.get(pk=gpu.pk)
    gpu.memory_gb, gpu.bf16_dense_tflops = 94, Decimal("989.50")

    gpu_model_save(operator=operator, gpu_model=gpu, changed=["memory_gb", "bf16_dense_tflops"])

    stored = GpuModel.objects.get(pk=gpu.pk)
    assert (stored.memory_gb, stored.bf16_dense_tflops, stored.name) == (94, Decimal("989.50"), "H100 SXM")
    entry = AuditEntry.objects.get()
    assert (entry.actor, entry.action) == (operator, AuditAction.GPU_MODEL_CHANGE)
    assert (entry.target_type.model, entry.target_id, entry.target_repr) == (
        "gpumodel", str(gpu.pk), str(gpu)
    )
    assert entry.before == {"memory_gb": 80, "bf16_dense_tflops": "989.00"}
    assert entry.after == {"memory_gb": 94, "bf16_dense_tflops": "989.50"}


def test_a_new_gpu_is_recorded_with_what_was_entered():
    operator = operator_make()
    gpu = GpuModel(name="B200", slug="b200", architecture="Blackwell", memory_gb=192, memory_type="HBM3e",
                   bandwidth_gb_s=8000)

    gpu_model_save(operator=operator, gpu_model=gpu, changed=["name", "slug", "memory_gb"])

    entry = AuditEntry.objects.get()
    assert entry.target_id == str(GpuModel.objects.get(slug="b200").pk)
    assert entry.before is None
    assert entry.after == {"name": "B200", "slug": "b200", "memory_gb": 192}


def test_saving_without_a_change_records_nothing():
    gpu = GpuModelFactory()
    gpu_model_save(operator=operator_make(), gpu_model=gpu, changed=[])
    gpu_model_save(operator=operator_make(), gpu_model=gpu, changed=["not_a_field"])
    assert not AuditEntry.objects.exists()


def test_a_staff_member_given_the_change_permission_may_edit():
    editor = UserFactory(is_staff=True)
    editor.user_permissions.add(
        Permission.objects.get(content_type__app_label="catalog", codename="change_gpumodel")
    )
    editor = type(editor).objects.get(pk=editor.pk)
    gpu = GpuModelFactory(memory_gb=80)
    gpu.memory_gb = 96

    gpu_model_save(operator=editor, gpu_model=gpu, changed=["memory_gb"])

    assert GpuModel.objects.get(pk=gpu.pk).memory_gb == 96
    assert AuditEntry.objects.get().actor == editor


@pytest.mark.parametrize("role", ["support", "finance"])
def test_an_operator_without_the_change_permission_may_not_edit_the_catalog(role):
    gpu = GpuModelFactory(memory_gb=80)
    before = (gpu_rows(), audit_log())
    gpu.memory_gb = 1

    with pytest.raises(OperatorNotAllowed):
        gpu_model_save(operator=operator_make(role), gpu_model=gpu, changed=["memory_gb"])
    with pytest.raises(OperatorNotAllowed):
        gpu_model_save(
            operator=operator_make(role),
            gpu_model=GpuModel(
                name="X", slug="x", architecture="X", memory_gb=1, memory_type="X", bandwidth_gb_s=1
            ),
            changed=["name"],
        )

    assert (gpu_rows(), audit_log()) == before
