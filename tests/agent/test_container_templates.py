"""The exchange's container templates on the agent: read from the desired state (nothing a
seller's own template may say, like host mounts), held only where the host's driver is recent
enough, pulled one at a time while the agent is idle and checked by digest, inspected once, and
reported, which measures the isolation report again."""

import pytest
from everx_agent.containers import (
    Template,
    TemplateInvalid,
    TemplatePuller,
    driver_version_read,
    exchange_template_read,
    exchange_templates_read,
)

from tests.agent.conftest import public_key
from tests.agent.test_containers import (
    DIGEST,
    IMAGE,
    OTHER_DIGEST,
    FakeRuntime,
    container_entry,
    reconciler_for,
)

PYTORCH = f"registry.example/everx/pytorch@sha256:{'12' * 32}"
JUPYTER = f"registry.example/everx/jupyter@sha256:{'34' * 32}"


@pytest.fixture
def fake(tmp_path) -> FakeRuntime:
    """The fake runtime, holding the configuration's image (test_containers' own fixture)."""
    fake = FakeRuntime(tmp_path / "bin")
    fake.image_held()
    return fake


def spec(image, **extra) -> dict:
    return {"image": image, "ports": [22], "key_path": "/etc/ssh/everx_authorized_keys", "command": [],
            "min_driver": "", "token_env": "", **extra}


def test_a_template_of_the_exchange_is_read_with_its_minimum_driver_and_token_variable():
    template = exchange_template_read(spec(PYTORCH, ports=[22, 8888], min_driver="550.54",
                                           token_env="JUPYTER_TOKEN"))
    assert (template.image, template.ports, template.min_driver, template.token_env) == (
        PYTORCH, (22, 8888), "550.54", "JUPYTER_TOKEN")
    # An exchange from before tokens sends no variable: the template takes none.
    older = {name: value for name, value in spec(PYTORCH).items() if name != "token_env"}
    assert exchange_template_read(older).token_env == ""


@pytest.mark.parametrize(("data", "problem"), [
    (spec(PYTORCH, mounts={"/srv/data": "/data"}), "names only its image"),
    (spec(PYTORCH, files={"/etc/motd": "hi"}), "names only its image"),
    (spec("registry.example/everx/pytorch:latest"), "not pinned by digest"),
    (spec(PYTORCH, ports=[8888]), "22 among them"),
    (spec(PYTORCH, min_driver="new"), "minimum driver"),
    (spec(PYTORCH, min_driver=550), "minimum driver"),
    (spec(PYTORCH, token_env="JUPYTER-TOKEN"), "token variable"),
    ("pytorch", "names only its image"),
])
def test_a_template_of_the_exchange_that_says_more_or_less_is_refused(data, problem):
    with pytest.raises(TemplateInvalid, match=problem):
        exchange_template_read(data)


def test_the_usable_templates_of_the_exchange_are_kept_and_the_others_logged(caplog):
    templates = exchange_templates_read([spec(PYTORCH), spec("bad:tag"), spec(JUPYTER)])
    assert [template.image for template in templates] == [PYTORCH, JUPYTER]
    assert "template 2 is not used" in caplog.text
    assert exchange_templates_read(None) == ()
    assert exchange_templates_read({"image": PYTORCH}) == ()


@pytest.mark.parametrize(("text", "version"), [
    ("NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb 22 01:44:30 UTC 2024\n",
     "550.54.14"),
    ("NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  560.35.03  Release Build\n", "560.35.03"),
    ("something else\n", ""),
])
def test_the_driver_version_is_read_from_its_proc_file(tmp_path, text, version):
    path = tmp_path / "version"
    path.write_text(text)
    assert driver_version_read(path) == version
    assert driver_version_read(tmp_path / "missing") == ""


@pytest.mark.parametrize(("driver", "minimum", "runs"), [
    ("550.54.14", "550.54", True), ("550.54.14", "550.54.15", False), ("535.183.01", "550", False),
    ("", "550", False), ("", "", True), ("560.1", "", True),
])
def test_a_template_runs_only_on_a_driver_at_least_its_minimum(driver, minimum, runs):
    assert Template(image=PYTORCH, min_driver=minimum).runs_on(driver) is runs


def test_the_exchange_s_templates_come_first_each_once_and_none_beyond_the_driver(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state",
                                driver_version=lambda: "535.183.01")
    containers.templates_take([spec(PYTORCH), spec(JUPYTER, min_driver="550"), spec(IMAGE)])
    assert [template.image for template in containers.templates] == [PYTORCH, IMAGE]


def test_a_container_rental_runs_the_template_the_exchange_named(fake, tmp_path):
    fake.image_held(PYTORCH, "sha256:" + "12" * 32)
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.templates_take([spec(PYTORCH, command=["/usr/sbin/sshd", "-D"])])

    containers.reconcile(entries=[container_entry(12, public_key(), template="sha256:" + "12" * 32)])

    [run] = [call for call in fake.calls() if call[1] == "run"]
    assert run[-3:] == [PYTORCH, "/usr/sbin/sshd", "-D"]


def test_an_older_exchange_without_templates_leaves_the_last_ones(fake, tmp_path):
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state")
    containers.templates_take([spec(PYTORCH)])
    containers.templates_take(None)
    assert containers.exchange_templates[0].image == PYTORCH


# --- pulling while idle --------------------------------------------------------------------------------


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def puller_for(fake: FakeRuntime, clock=None) -> TemplatePuller:
    return TemplatePuller(runtime=fake.runtime("podman"), timeout=5, retry_seconds=300,
                          clock=clock or Clock())


def pull_all(puller: TemplatePuller, templates) -> None:
    for _ in range(len(templates) + 1):
        puller.step(templates)
        puller.wait(10)


def test_an_idle_pass_pulls_the_missing_templates_one_at_a_time_by_digest(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.image_held()  # the configuration's own template
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", puller=puller_for(fake))
    containers.templates_take([spec(PYTORCH), spec(JUPYTER)])

    for _ in range(4):
        containers.reconcile(entries=[])
        containers.puller.wait(10)

    pulls = [call[2] for call in fake.calls() if call[1] == "pull"]
    assert pulls == [PYTORCH, JUPYTER]
    assert containers.puller.held == {PYTORCH, JUPYTER, IMAGE}
    assert containers.puller.version == 3

    fake.forget_calls()
    containers.reconcile(entries=[])
    containers.puller.wait(10)
    assert fake.calls() == []  # each image inspected once: an idle pass then starts nothing


def test_a_pass_that_starts_a_container_pulls_nothing_else(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.image_held()
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", puller=puller_for(fake))
    containers.templates_take([spec(PYTORCH)])

    containers.reconcile(entries=[container_entry(12, public_key(), template=DIGEST)])
    containers.puller.wait(10)

    assert "pull" not in fake.commands()


def test_an_image_held_already_is_inspected_not_pulled(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.image_held(PYTORCH, "sha256:" + "12" * 32)
    puller = puller_for(fake)

    pull_all(puller, [Template(image=PYTORCH)])

    assert fake.commands() == ["image inspect"]
    assert puller.held == {PYTORCH}


def test_a_pull_bringing_another_digest_is_deleted_and_tried_again_later(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.set(served_digest=OTHER_DIGEST)
    clock = Clock()
    puller = puller_for(fake, clock)
    templates = [Template(image=PYTORCH)]

    pull_all(puller, templates)
    assert fake.commands() == ["image inspect", "pull", "image inspect", "rmi"]
    assert (puller.held, fake.load()["images"]) == (set(), {})

    fake.forget_calls()
    pull_all(puller, templates)
    assert fake.calls() == []  # not before the retry time

    clock.now += 300
    fake.set(served_digest=None)
    pull_all(puller, templates)
    assert puller.held == {PYTORCH}


def test_a_hanging_pull_gives_up_at_its_own_timeout(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    fake.set(hang=["pull"])
    puller = TemplatePuller(runtime=fake.runtime("podman"), timeout=0.5, clock=Clock())

    puller.step([Template(image=PYTORCH)])
    puller.wait(10)

    assert puller.held == set()
    assert PYTORCH in puller.failed


def test_the_report_measures_again_once_a_template_is_pulled(tmp_path):
    fake = FakeRuntime(tmp_path / "bin")
    containers = reconciler_for(fake.runtime("podman"), tmp_path / "state", puller=puller_for(fake))
    before = containers.templates_version
    containers.templates_take([spec(PYTORCH)])
    taken = containers.templates_version
    containers.reconcile(entries=[])
    containers.puller.wait(10)
    assert len({before, taken, containers.templates_version}) == 3


def test_the_agent_passes_the_desired_state_s_templates_on(make_agent, exchange):
    agent = make_agent()
    taken = []
    agent.reconciler.templates_take = taken.append
    exchange.answer_templates = [spec(PYTORCH)]

    agent.step()

    assert taken == [[spec(PYTORCH)]]
