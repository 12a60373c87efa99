"""The heartbeat loop against a fake exchange on 127.0.0.1: what it sends, how it backs off, and that
nothing is created twice whatever the exchange does in between."""

import json
import logging
import re
import socket
from datetime import timedelta

import pytest
from everx_agent.clock import rfc3339_parse
from everx_agent.devices import Drift, DriftQueue, NodeState, node_wanted
from everx_agent.isolation import IsolationReporter
from everx_agent.loop import BACKOFF_CAP_SECONDS, REPORT_SOON_SECONDS
from everx_agent.sandbox import SandboxRefused

from tests.agent.conftest import H100, SERVER_TIME, TOKEN, login, public_key
from tests.agent.fakes import MEMORY_MIB, MIG_QUERY, Host

SERVER_ERROR = {"status": 503, "body": {"type": "about:blank", "title": "Service Unavailable", "status": 503}}


def closed_port_url() -> str:
    """An address on 127.0.0.1 where nothing listens: the connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def test_a_heartbeat_sends_the_protocols_headers_and_body(make_agent, exchange):
    agent = make_agent()
    assert agent.step() == 30.0
    (request,) = exchange.requests
    assert request["path"] == "/api/v1/agent/heartbeat"
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"
    assert request["headers"]["Content-Type"] == "application/json"
    assert request["headers"]["Accept"] == "application/json"
    assert request["headers"]["User-Agent"] == "everx-agent/1.0.0"
    assert request["body"] == {
        "agent_version": "1.0.0", "sent_at": SERVER_TIME, "uptime_seconds": 12345, "hostname": "gpu-01",
        "disk_free_gb": 812.5, "gpus": [H100], "gpu_error": None, "logins": [],
    }


def test_a_new_login_is_reported_ready_at_the_next_heartbeat_soon_after(make_agent, exchange, fake_system):
    exchange.answer_logins = [login(12, public_key(), [0, 1])]
    agent = make_agent()
    assert agent.step() == REPORT_SOON_SECONDS
    assert agent.step() == 30.0
    assert exchange.bodies()[1]["logins"] == [{"rental_id": 12, "username": "evx-12", "state": "ready",
                                               "gpu_indices": [0, 1], "detail": ""}]
    assert fake_system.created() == ["evx-12"]


def test_a_login_refused_for_the_first_time_is_reported_soon_and_then_at_the_usual_pace(
        make_agent, exchange, fake_system):
    def refused(**_arguments):
        raise SandboxRefused("no loop device is left for the home image", fact="disk_limited")

    fake_system.user_create = refused
    exchange.answer_logins = [login(12, public_key(), [0])]
    agent = make_agent()
    assert agent.step() == REPORT_SOON_SECONDS
    assert agent.step() == 30.0  # refused again: nothing new to say
    assert exchange.bodies()[1]["logins"] == [{"rental_id": 12, "username": "evx-12", "state": "refused",
                                               "gpu_indices": [0],
                                               "detail": "no loop device is left for the home image"}]


def test_the_answers_heartbeat_period_is_followed(make_agent, exchange):
    exchange.heartbeat_seconds = 15
    assert make_agent().step() == 15.0
    exchange.heartbeat_seconds = 1  # absurd: the previous value stays
    agent = make_agent()
    agent.step()
    assert agent.heartbeat_seconds == 30


def test_server_errors_back_off_with_full_jitter_then_recover(make_agent, exchange, recorder):
    exchange.script = [SERVER_ERROR] * 8
    agent = make_agent()
    delays = [agent.step() for _ in range(8)]
    assert recorder.ranges == [(0.0, 5.0), (0.0, 10.0), (0.0, 20.0), (0.0, 40.0), (0.0, 80.0), (0.0, 160.0),
                               (0.0, 300.0), (0.0, 300.0)]
    assert delays == [5.0, 10.0, 20.0, 40.0, 80.0, 160.0, 300.0, 300.0]
    assert agent.step() == 30.0
    exchange.script = [SERVER_ERROR]
    recorder.pick = lambda low, high: 1.25
    assert agent.step() == 1.25
    assert recorder.ranges[-1] == (0.0, 5.0)


def test_a_timeout_is_an_error_backed_off(make_agent, exchange, recorder):
    exchange.script = [{"delay": 1.0}]
    agent = make_agent(timeout=0.2)
    assert agent.step() == 5.0
    assert "the exchange could not be reached: " in agent.status.load()["last_error"]["text"]


def test_a_refused_connection_is_an_error_backed_off(make_agent, recorder):
    agent = make_agent(url=closed_port_url())
    assert [agent.step(), agent.step()] == [5.0, 10.0]
    assert agent.status.load()["last_error"]["text"] == \
        "the exchange could not be reached: Connection refused"


def test_a_connection_dropped_without_an_answer_is_an_error(make_agent, exchange):
    exchange.script = [{"drop": True}]
    assert make_agent().step() == 5.0


def test_an_answer_that_is_not_json_is_an_error(make_agent, exchange):
    exchange.script = [{"body": b"<html>gateway</html>"}]
    agent = make_agent()
    assert agent.step() == 5.0
    assert agent.status.load()["last_error"]["text"] == \
        "the exchange could not be reached: the answer is not JSON"


def test_429_waits_at_least_retry_after(make_agent, exchange, recorder):
    exchange.script = [exchange.problem(429, "rate_limited", "Too many", headers={"Retry-After": "120"})]
    recorder.pick = lambda low, high: 0.0
    assert make_agent().step() == 120.0
    exchange.script = [exchange.problem(429, "rate_limited", "Too many", headers={"Retry-After": "1"})]
    recorder.pick = lambda low, high: high
    assert make_agent().step() == 5.0


def test_a_refused_token_keeps_the_logins_and_retries_at_the_cap(make_agent, exchange, fake_system, caplog):
    caplog.set_level(logging.INFO, logger="everx_agent")
    exchange.answer_logins = [login(12, public_key())]
    agent = make_agent()
    agent.step()
    exchange.script = [exchange.problem(401, "token_invalid", "Invalid token",
                                        detail="This agent token is not valid.")] * 2
    assert [agent.step(), agent.step()] == [BACKOFF_CAP_SECONDS, BACKOFF_CAP_SECONDS]
    assert fake_system.actions == [("useradd", "evx-12"), ("write", "evx-12")]
    assert agent.status.load()["last_error"]["text"] == (
        "the exchange refused this agent: 401 token_invalid (Invalid token): This agent token is not "
        "valid.; the logins are kept as they are")
    assert "token_invalid" in caplog.text
    assert TOKEN not in caplog.text and TOKEN[12:] not in caplog.text


def test_a_retired_server_is_refused_the_same_way(make_agent, exchange):
    exchange.script = [exchange.problem(403, "server_retired", "This server is retired")]
    assert make_agent().step() == BACKOFF_CAP_SECONDS


def test_other_refusals_back_off(make_agent, exchange):
    exchange.script = [exchange.problem(422, "invalid_input", "Invalid input")]
    agent = make_agent()
    assert agent.step() == 5.0
    assert agent.status.load()["last_error"]["text"] == \
        "the exchange answered 422 invalid_input (Invalid input)"


def test_an_hour_without_the_exchange_then_back_creates_nothing_twice(make_agent, exchange, fake_system,
                                                                      recorder):
    key = public_key()
    exchange.answer_logins = [login(12, key, [0]), login(13, public_key(), [1])]
    agent = make_agent(timeout=0.2)
    agent.step()
    # An hour of every kind of trouble: 5xx, timeouts, dropped connections, a lost answer.
    exchange.script = [SERVER_ERROR, {"delay": 0.5}, {"drop": True}, SERVER_ERROR] * 5
    waited = sum(agent.step() for _ in range(20))
    assert waited >= 3600 - 5
    assert agent.failures == 20
    exchange.answer_logins = [login(12, key, [0]), login(14, public_key(), [2])]
    agent.step()
    agent.step()
    assert fake_system.created() == ["evx-12", "evx-13", "evx-14"]
    assert sorted(fake_system.users) == ["evx-12", "evx-14"]
    assert agent.failures == 0
    assert [entry["state"] for entry in exchange.bodies()[-1]["logins"]] == ["ready", "ready"]


def test_an_agent_started_while_the_exchange_is_away_creates_once_it_answers(make_agent, exchange,
                                                                              fake_system):
    exchange.answer_logins = [login(12, public_key())]
    exchange.script = [SERVER_ERROR] * 3
    agent = make_agent()
    for _ in range(5):
        agent.step()
    assert fake_system.created() == ["evx-12"]


def test_a_lost_answer_and_a_restart_change_nothing_twice(make_agent, exchange, fake_system):
    exchange.answer_logins = [login(12, public_key())]
    make_agent().step()
    exchange.script = [{"delay": 0.5}]  # the exchange sent its answer: it never arrived
    restarted = make_agent(timeout=0.2)
    restarted.step()
    restarted.step()
    assert fake_system.created() == ["evx-12"]
    assert exchange.bodies()[-1]["logins"][0]["state"] == "ready"


def test_a_clock_far_off_is_warned_and_remembered(make_agent, exchange, caplog):
    caplog.set_level(logging.INFO, logger="everx_agent")
    local = rfc3339_parse(SERVER_TIME) - timedelta(seconds=300)
    agent = make_agent(now=lambda: local)
    agent.step()
    assert agent.clock_skew_seconds == 300.0
    assert agent.status.load()["clock_skew_seconds"] == 300.0
    assert "clock is 300 s behind the exchange's" in caplog.text
    caplog.clear()
    agent.step()
    assert "clock" not in caplog.text  # said once, not at every heartbeat


def test_a_clock_within_a_minute_is_no_warning(make_agent, caplog):
    local = rfc3339_parse(SERVER_TIME) + timedelta(seconds=59)
    agent = make_agent(now=lambda: local)
    agent.step()
    assert agent.clock_skew_seconds == -59.0
    assert "clock" not in caplog.text


def test_the_saved_answer_has_no_ssh_key(make_agent, exchange, state_dir):
    key = public_key()
    exchange.answer_logins = [login(12, key, [0, 1])]
    make_agent().step()
    saved = json.loads((state_dir / "status.json").read_text())
    assert saved["last_answer"]["logins"] == [{"rental_id": 12, "username": "evx-12", "gpu_indices": [0, 1]}]
    assert saved["last_answer"]["server_id"] == 3
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", saved["last_answer_at"])
    assert key.split()[1] not in (state_dir / "status.json").read_text()


def test_neither_the_token_nor_a_key_is_ever_logged(make_agent, exchange, caplog):
    caplog.set_level(logging.DEBUG)
    key = public_key()
    exchange.answer_logins = [login(12, key), login(13, "ssh-ed25519 AAAA-bad-key"),
                              login(1, key, username="root")]
    exchange.script = [SERVER_ERROR, exchange.problem(401, "token_invalid", "Invalid token")]
    agent = make_agent(url=exchange.url)
    for _ in range(4):
        agent.step()
    make_agent(url=closed_port_url()).step()
    assert caplog.text
    assert TOKEN not in caplog.text and TOKEN[12:] not in caplog.text
    assert key.split()[1] not in caplog.text


def test_run_keeps_going_through_errors_and_once_says_whether_it_answered(make_agent, exchange, recorder):
    class Stop(Exception):
        pass

    def sleep(seconds):
        recorder.sleeps.append(seconds)
        if len(recorder.sleeps) == 4:
            raise Stop

    exchange.script = [SERVER_ERROR, SERVER_ERROR]
    agent = make_agent()
    agent.sleep = sleep
    with pytest.raises(Stop):
        agent.run()
    assert recorder.sleeps == [5.0, 10.0, 30.0, 30.0]
    exchange.script = [SERVER_ERROR]
    assert make_agent().run(once=True) == 1
    assert make_agent().run(once=True) == 0


def test_a_bug_in_a_step_is_logged_and_backed_off(make_agent, recorder, caplog):
    agent = make_agent()

    def broken():
        raise RuntimeError("a bug")

    agent.read_gpus = broken
    assert agent.run(once=True) == 1
    assert "unexpected error in the heartbeat" in caplog.text


def test_sigterm_during_a_sleep_stops_at_once(make_agent):
    agent = make_agent()
    agent.sleep = lambda seconds: agent.stop()
    with pytest.raises(SystemExit):
        agent.run()
    assert agent.sleeping is False


def test_sigterm_during_a_pass_lets_it_finish_then_stops(make_agent, exchange, fake_system, recorder):
    exchange.answer_logins = [login(12, public_key())]
    agent = make_agent()
    reading = agent.read_gpus

    def read_then_stop():
        agent.stop()
        return reading()

    agent.read_gpus = read_then_stop
    assert agent.run() == 0
    assert fake_system.created() == ["evx-12"]
    assert recorder.sleeps == []


def test_each_heartbeat_carries_the_isolation_report_measured_at_start_only(make_agent, exchange, tmp_path):
    host = Host(tmp_path / "host")
    exchange.answer_logins = [login(12, public_key(), [0])]
    agent = make_agent(isolation=IsolationReporter(settings=host.settings))
    agent.step()  # the login is created
    agent.step()
    agent.step()  # an unchanged pass

    first, second, third = (body["isolation"] for body in exchange.bodies())
    assert first["server_id"] is None  # before the exchange's first answer
    assert second["server_id"] == 3 and third == second == {**first, "server_id": 3}
    assert first["backend"] == "v1" and first["hardware"]["memory_mib"] == MEMORY_MIB
    assert host.commands.calls() == [["nvidia-smi", *MIG_QUERY]]  # measured once, for three heartbeats


def a_drift(index: int) -> Drift:
    return Drift(index=index, found=NodeState(mode=0o666, uid=0, gid=0, acl=b""), wanted=node_wanted(()))


def test_drifts_go_in_the_next_heartbeat_and_are_forgotten_once_it_is_answered(make_agent, exchange):
    agent = make_agent()
    agent.reconciler.device_drifts.add([a_drift(3)], at="2026-12-04T21:00:00Z")
    exchange.script = [SERVER_ERROR]
    agent.step()  # not answered: kept
    agent.step()
    agent.step()

    sent = [{"at": "2026-12-04T21:00:00Z", "node": "nvidia3",
             "found": "mode 0666, owner 0:0, ACL users none"}]
    assert [body.get("device_drifts") for body in exchange.bodies()] == [sent, sent, None]


def test_a_drift_found_while_a_heartbeat_is_on_its_way_waits_for_the_next(make_agent, exchange):
    agent = make_agent()
    queue = agent.reconciler.device_drifts
    queue.add([a_drift(0)], at=SERVER_TIME)
    reading = agent.read_gpus

    def read_then_drift():  # the device watch repairs a node while the body is being made
        queue.add([a_drift(1)], at=SERVER_TIME)
        return reading()

    agent.read_gpus = read_then_drift
    agent.heartbeat()

    assert [drift["node"] for drift in exchange.bodies()[0]["device_drifts"]] == ["nvidia0"]
    assert [event.node for event in queue] == ["nvidia1"]


def test_at_most_64_drifts_are_kept_the_oldest_dropped_first():
    queue = DriftQueue()
    queue.add([a_drift(index) for index in range(70)], at=SERVER_TIME)
    assert len(queue) == 64
    assert [event.node for event in queue][:2] == ["nvidia6", "nvidia7"]
