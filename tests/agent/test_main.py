"""`everx-agent enroll | run | status` against the fake exchange, in temporary directories."""

import json
import os
import shutil
import stat
import sys
import tempfile
from pathlib import Path

import pytest
from everx_agent import main as agent_main
from everx_agent.config import (
    DEFAULT_CONTAINER_LISTEN_ADDRESS,
    AgentConfig,
    ConfigError,
    config_load,
    token_hint,
    url_check,
)
from everx_agent.sandbox import cgroup_mounts

from tests.agent.conftest import TOKEN

# The agent refuses a state folder under /tmp (each rental's sandbox has its own /tmp): the tests'
# state goes in a folder of their own under /var/lib instead, as the agent's own does (not in the
# checkout, which may itself be under /tmp).
STATE_PARENT = Path("/var/lib")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """Every path the agent writes, in tmp_path (the state in a folder of /var/lib, removed at the
    end); systemd not running unless a test says so."""
    paths = {name: tmp_path / name for name in ("etc", "units")}
    outside_tmp = Path(tempfile.mkdtemp(prefix="everx-agent-test-", dir=STATE_PARENT))
    paths["state"] = outside_tmp / "state"
    monkeypatch.setattr(agent_main, "SYSTEMD_RUNTIME_DIR", tmp_path / "no-systemd")
    monkeypatch.delenv("EVERX_AGENT_CONFIG", raising=False)
    monkeypatch.delenv("EVERX_AGENT_STATE_DIR", raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))  # no nvidia-smi
    paths["config"] = paths["etc"] / "config.json"
    # The isolation report's probe groups go under a parent group of the test's, removed at the end.
    paths["cgroup_base"] = f"everx-main-test-{os.getpid()}-{tmp_path.name}"[:60]
    yield paths
    shutil.rmtree(outside_tmp)
    for mount in set(cgroup_mounts(Path("/proc/self/mounts").read_text())[0].values()):
        for group in (mount / paths["cgroup_base"] / "everx", mount / paths["cgroup_base"]):
            if group.exists():
                group.rmdir()


def enroll(dirs, url, *extra):
    return agent_main.main(["--config", str(dirs["config"]), "enroll", "--url", url, "--token", TOKEN,
                            "--state-dir", str(dirs["state"]), "--unit-dir", str(dirs["units"]), *extra])


def run_configured(dirs, tmp_path) -> None:
    """Pointed at this test's device folder and parent group before `run`: the isolation report
    checks ACLs there, not in this machine's /dev, and its probe groups go under the test's."""
    (tmp_path / "dev").mkdir()
    config = json.loads(dirs["config"].read_text())
    dirs["config"].write_text(json.dumps({**config, "device_dir": str(tmp_path / "dev"),
                                           "cgroup_base": dirs["cgroup_base"]}))


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_enroll_checks_the_token_then_writes_config_and_unit(dirs, exchange, capsys):
    assert enroll(dirs, exchange.url + "/", "--remove-home", "--heartbeat-seconds", "20") == 0
    out = capsys.readouterr().out
    assert "this machine is server 3 of the exchange, which asks for 0 logins" in out
    assert TOKEN not in out and token_hint(TOKEN) in out
    assert "systemctl daemon-reload" in out and "systemctl enable --now everx-agent" in out
    (request,) = exchange.requests
    assert request["headers"]["Authorization"] == f"Bearer {TOKEN}"

    assert mode(dirs["config"]) == 0o600
    assert json.loads(dirs["config"].read_text()) == {
        "url": exchange.url, "token": TOKEN, "heartbeat_seconds": 20, "remove_home": True,
        "state_dir": str(dirs["state"]), "device_dir": "/dev",
        "container_listen_address": DEFAULT_CONTAINER_LISTEN_ADDRESS, "container_templates": [],
        "isolation_minutes": 10, "runtime_timeout_seconds": 60.0, "device_check_seconds": 2.0,
        "cgroup_base": "", "ssh_port_first": 41000,
        "ssh_port_last": 41099, "run_dir": "/run/everx-agent", "ssh_listen_address": "0.0.0.0",  # noqa: S104
        "host_sshd_config": "/etc/ssh/sshd_config",
        "host_sshd_drop_in": "/etc/ssh/sshd_config.d/50-everx.conf", "cron_deny": "/etc/cron.deny",
        "at_deny": "/etc/at.deny", "driver_params": "/proc/driver/nvidia/params",
    }
    unit = (dirs["units"] / "everx-agent.service").read_text()
    assert f"ExecStart={sys.executable} -m everx_agent --config {dirs['config']} run\n" in unit
    assert "KillMode=mixed\n" in unit
    assert "Restart=always\n" in unit and "RestartSec=5\n" in unit and "User=root\n" in unit
    assert "WantedBy=multi-user.target" in unit
    assert TOKEN not in unit
    assert "Rentals log in on ports 41000-41099: open them in the firewall" in out
    assert mode(dirs["state"] / "status.json") == 0o600


def test_enroll_starts_the_service_when_systemd_runs(dirs, exchange, tmp_path, monkeypatch, capsys):
    (tmp_path / "systemd").mkdir()
    monkeypatch.setattr(agent_main, "SYSTEMD_RUNTIME_DIR", tmp_path / "systemd")
    calls = tmp_path / "calls.txt"
    fake = tmp_path / "systemctl"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\n')
    fake.chmod(0o755)
    monkeypatch.setattr(agent_main, "systemctl_find", lambda: str(fake))
    assert enroll(dirs, exchange.url) == 0
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now everx-agent"]
    assert "enabled and running" in capsys.readouterr().out
    calls.unlink()
    assert enroll(dirs, exchange.url) == 0  # a new token: the running service must read it
    assert calls.read_text().splitlines() == ["daemon-reload", "enable --now everx-agent",
                                              "restart everx-agent"]


def test_enroll_refuses_plain_http_to_another_host_and_writes_nothing(dirs, capsys):
    assert enroll(dirs, "http://exchange.example") == 2
    assert "must start with https://" in capsys.readouterr().err
    assert not dirs["config"].exists() and not dirs["units"].exists()


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost", "http://[::1]:8000",
                                 "https://exchange.example/api/v1/"])
def test_addresses_that_are_accepted(url):
    assert url_check(url) == url.rstrip("/").removesuffix("/api/v1")


@pytest.mark.parametrize("url", ["ftp://exchange.example", "exchange.example", "http://10.0.0.1",
                                 "http://localhost.evil.example"])
def test_addresses_that_are_refused(url):
    with pytest.raises(ConfigError):
        url_check(url)


def test_enroll_refuses_what_is_not_an_agent_token(dirs, exchange, capsys):
    code = agent_main.main(["--config", str(dirs["config"]), "enroll", "--url", exchange.url,
                            "--token", "evx_" + "a" * 40])
    assert code == 2
    assert "not an agent token" in capsys.readouterr().err
    assert exchange.requests == []


def test_a_refused_token_prints_the_problem_and_exits_2(dirs, exchange, capsys):
    exchange.script = [exchange.problem(401, "token_invalid", "Invalid token",
                                        detail="This agent token is not valid or was revoked.")]
    assert enroll(dirs, exchange.url) == 2
    captured = capsys.readouterr()
    assert "The exchange refused it (401): Invalid token" in captured.err
    assert "This agent token is not valid or was revoked." in captured.err
    assert TOKEN not in captured.out + captured.err
    assert not dirs["config"].exists()


def test_an_unreachable_exchange_at_enrolment_exits_2(dirs, capsys):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    assert enroll(dirs, f"http://127.0.0.1:{port}") == 2
    assert "could not be reached" in capsys.readouterr().err


def test_run_once_then_status_shows_what_the_exchange_asked(dirs, exchange, tmp_path, capsys):
    enroll(dirs, exchange.url)
    capsys.readouterr()
    run_configured(dirs, tmp_path)
    assert agent_main.main(["--config", str(dirs["config"]), "run", "--once"]) == 0
    assert len(exchange.requests) == 2
    assert agent_main.main(["status", "--config", str(dirs["config"])]) == 0
    text = capsys.readouterr().out
    assert f"Exchange: {exchange.url} (token {token_hint(TOKEN)})" in text
    assert "GPUs seen by nvidia-smi: 0" in text and "nvidia-smi was not found" in text
    assert "Logins managed: 0" in text
    assert "Last answer, at " in text and "server 3, heartbeat every 30 s, logins wanted: none" in text
    assert "Clock: " in text
    assert "Isolation, as last reported: backend " in text
    assert TOKEN not in text

    assert agent_main.main(["status", "--json", "--config", str(dirs["config"])]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["enrolled"] is True and report["token"] == token_hint(TOKEN)
    assert report["last_answer"]["server_id"] == 3 and report["last_error"] is None
    assert report["isolation"]["version"] == 1 and report["isolation"]["server_id"] is None
    assert "device_drifts" not in exchange.bodies()[1] and "isolation" not in exchange.bodies()[0]  # enroll


def test_status_shows_the_last_error(dirs, exchange, capsys, tmp_path):
    enroll(dirs, exchange.url)
    run_configured(dirs, tmp_path)
    exchange.script = [{"status": 502, "body": {"title": "Bad Gateway"}}]
    assert agent_main.main(["--config", str(dirs["config"]), "run", "--once"]) == 1
    capsys.readouterr()
    agent_main.main(["--config", str(dirs["config"]), "status"])
    text = capsys.readouterr().out
    assert "Last error, at " in text and "Isolation: not reported yet." in text


@pytest.mark.parametrize("key", ["state_dir", "run_dir"])
@pytest.mark.parametrize("covered", ["/tmp", "/var/tmp", "/dev/shm"])  # noqa: S108
def test_run_refuses_a_folder_that_every_rental_s_sandbox_covers(dirs, exchange, key, covered, capsys):
    enroll(dirs, exchange.url)
    capsys.readouterr()
    config = json.loads(dirs["config"].read_text())
    dirs["config"].write_text(json.dumps({**config, key: f"{covered}/everx-agent"}))
    assert agent_main.main(["--config", str(dirs["config"]), "run", "--once"]) == 2
    assert f"{key} {covered}/everx-agent is under {covered}, which each rental's sandbox replaces" \
        in capsys.readouterr().err
    assert len(exchange.requests) == 1  # enroll's alone: the agent did not start


def test_run_without_a_configuration_says_to_enroll(dirs, capsys):
    assert agent_main.main(["--config", str(dirs["config"]), "run", "--once"]) == 2
    assert "run `everx-agent enroll` first" in capsys.readouterr().err


def test_the_config_comes_from_the_environment_too(dirs, exchange, monkeypatch):
    monkeypatch.setenv("EVERX_AGENT_CONFIG", str(dirs["config"]))
    assert agent_main.main(["enroll", "--url", exchange.url, "--token", TOKEN,
                            "--state-dir", str(dirs["state"]), "--unit-dir", str(dirs["units"])]) == 0
    assert config_load(path=dirs["config"]).url == exchange.url


def test_a_configuration_never_shows_its_token():
    assert TOKEN not in repr(AgentConfig(url="https://exchange.example", token=TOKEN))


def test_status_lists_the_gpus_nvidia_smi_sees(dirs, tmp_path, monkeypatch, capsys):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\necho '0, GPU-a1b2, NVIDIA A100-SXM4-80GB, 81920, 29, 12, 0'\n"
                      "echo '1, GPU-a1b3, NVIDIA A100-SXM4-80GB, 81920, [N/A], 0, 2'\n")
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    assert agent_main.main(["--config", str(dirs["config"]), "status"]) == 0
    text = capsys.readouterr().out
    assert "Not enrolled: run `everx-agent enroll --url URL --token TOKEN`." in text
    assert "GPUs seen by nvidia-smi: 2" in text
    assert "  0: NVIDIA A100-SXM4-80GB, 81920 MiB, 29 °C, 12 % busy, 0 uncorrected ECC errors" in text
    assert "  1: NVIDIA A100-SXM4-80GB, 81920 MiB, n/a °C, 0 % busy, 2 uncorrected ECC errors" in text


def test_enroll_keeps_the_ssh_port_range_and_refuses_one_that_will_not_do(dirs, exchange, capsys):
    assert enroll(dirs, exchange.url, "--ssh-ports", "42000-42009") == 0
    assert config_load(path=dirs["config"]).ssh_port_first == 42000
    assert config_load(path=dirs["config"]).ssh_port_last == 42009
    for wrong in ("42009-42000", "22-100", "41000", "a-b", "41000-70000"):
        assert enroll(dirs, exchange.url, "--ssh-ports", wrong) == 2
    assert "41000-41099" in capsys.readouterr().err


def test_status_shows_each_login_s_ssh_port(dirs, capsys):
    enroll_free = {"url": "https://exchange.example", "token": TOKEN, "state_dir": str(dirs["state"])}
    dirs["etc"].mkdir()
    dirs["config"].write_text(json.dumps(enroll_free))
    dirs["state"].mkdir()
    (dirs["state"] / "logins.json").write_text(json.dumps({"version": 1, "logins": {"evx-12": {
        "rental_id": 12, "username": "evx-12", "ssh_public_key": "ssh-ed25519 AAAA", "gpu_indices": [0],
        "created_at": "2026-12-02T01:00:00Z", "ready": True}}}))
    (dirs["state"] / "ssh_ports.json").write_text(json.dumps({"version": 1, "ports": {"evx-12": 41003}}))
    assert agent_main.main(["status", "--config", str(dirs["config"])]) == 0
    assert "  evx-12 (rental 12), GPUs 0, since 2026-12-02T01:00:00Z, ready, SSH port 41003" \
        in capsys.readouterr().out
