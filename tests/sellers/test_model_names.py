"""What the admin calls a server's records (their `str()`): whole sentences in the reader's
language, days, moments and counts formatted for it, the server's name as it is."""

from datetime import UTC, date, datetime

import pytest
from django.utils import timezone

from sellers.models import (
    AgentMonitor,
    SellerApplication,
    ServerAvailabilityDay,
    ServerEvent,
    ServerEventKind,
)
from tests.factories import SellerFactory, ServerFactory
from tests.translation_support import names

pytestmark = pytest.mark.django_db

NBSP = "\u00a0"
NARROW = "\u202f"  # CLDR's French grouping: a narrow no-break space




def test_a_server_event_and_day_read_in_the_language():
    server = ServerFactory(seller=SellerFactory(name="Alpha GPU Lda"), name="lisbon-1")
    name = "Alpha GPU Lda / lisbon-1"
    event = ServerEvent.objects.create(server=server, at=timezone.now(), kind=ServerEventKind.ENROLLED)
    assert names(event) == {
        "en": f"{name}: Agent enrolled",
        "pt": f"{name}: Agente inscrito",
        "fr": f"{name}{NBSP}: Agent inscrit",
    }
    day = ServerAvailabilityDay.objects.create(
        server=server, day=date(2026, 12, 3), listed_minutes=1440, heard_minutes=1380
    )
    assert names(day) == {
        "en": f"{name} on December 3, 2026: heartbeats in 1,380 of 1,440 minutes listed",
        "pt": f"{name} em 3 de dezembro de 2026: sinais de vida em 1.380 de 1.440 minutos listados",
        "fr": f"{name} le 3 décembre 2026{NBSP}: signaux de vie pendant 1{NARROW}380 des "
              f"1{NARROW}440 minutes en vente",
    }


def test_the_agent_monitor_and_an_unnamed_application():
    monitor = AgentMonitor(last_run_at=datetime(2026, 12, 3, 14, 5, tzinfo=UTC))
    assert names(monitor) == {
        "en": "Agent monitor, last run Dec 3, 2026, 14:05 UTC",
        "pt": "Vigilância dos agentes, última execução em 3 de dez. de 2026, 14:05 UTC",
        "fr": "Surveillance des agents, dernière exécution le 3 déc. 2026, 14:05 UTC",
    }
    application = SellerApplication(pk=7)
    assert names(application) == {
        "en": "Application #7", "pt": "Candidatura n.º 7", "fr": f"Candidature n°{NBSP}7",
    }
