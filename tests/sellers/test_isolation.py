"""The published isolation function (sellers/isolation.py): a table of reports and the level each
gives, the report's checks, and the shares that never add up to more than a server has."""

import copy

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sellers.isolation import (
    ANY_LEVEL,
    FACTS,
    LEVEL_SETS,
    LEVELS_BY_STRENGTH,
    SHARED_FACTS,
    IsolationLevel,
    RentalLimits,
    ReportInvalid,
    Reserves,
    Sellable,
    containers_paused,
    facts_missing,
    isolation_level_of,
    isolation_report_check,
    isolation_report_digest,
    level_shortfall,
    levels_of_text,
    levels_text,
    toolkit_is_current,
)

RESERVES = Reserves(cpu_cores=2, memory_mib=8 * 1024, disk_gb=50)
MINIMUM = "1.17.8"


def report(**changes) -> dict:
    """A shared-server host's report of server 3 (every shared fact measured true)."""
    base = {
        "version": 1, "server_id": 3,
        "hardware": {"cpu_cores": 66, "memory_mib": 520 * 1024, "disk_gb": 4050},
        "backend": "v1",
        "facts": {name: name != "mig_enabled" for name in FACTS},
        "container": None,
    }
    for key, value in changes.items():
        if key in FACTS:
            base["facts"][key] = value
        else:
            base[key] = value
    return base


def container(**changes) -> dict:
    return {"runtime": "podman", "runtime_version": "4.3.1", "toolkit_version": "1.17.8",
            "gpus_by_uuid": True, "self_test": True, "disk_limited": True,
            "templates": ["sha256:" + "a" * 64], **changes}


def level(data, *, gpu_count=8, devices_held=False) -> str:
    return isolation_level_of(data, server_id=3, gpu_count=gpu_count, reserves=RESERVES,
                              toolkit_minimum=MINIMUM, devices_held=devices_held)


@pytest.mark.parametrize(("data", "expected"), [
    (None, "whole"),                                        # an agent older than the report
    ("garbage", "whole"),
    ({}, "whole"),
    (report(), "shared"),
    (report(container=container()), "container"),
    (report(container=container(), devices_locked=False), "container"),  # the container passes its own GPUs
    (report(container=container(toolkit_version="1.17.7")), "shared"),   # before the CVE-2025-23266 fix
    (report(container=container(toolkit_version="")), "shared"),
    (report(container=container(self_test=False)), "shared"),
    (report(container=container(gpus_by_uuid=False)), "shared"),
    (report(container=container(disk_limited=False)), "shared"),
    (report(container=container(paused=True)), "shared"),       # its runtime stopped answering
    (report(container=container(paused=False)), "container"),
    (report(mig_enabled=True), "whole"),
    (report(mig_enabled=True, container=container()), "whole"),
    (report(processes_hidden=False), "shared"),              # shown, not required
    (report(device_cgroup=False), "shared"),                 # the ACL is the boundary
    (report(version=2), "whole"),
    (report(server_id=4), "whole"),                          # measured for another server
    (report(server_id=None), "shared"),                      # before the agent's first answer
])
def test_the_level_of_a_report(data, expected):
    assert level(data) == expected


@pytest.mark.parametrize("fact", SHARED_FACTS)
def test_each_shared_fact_missing_makes_a_whole_server(fact):
    data = report(**{fact: False})
    assert level(data) == "whole"
    assert facts_missing("shared", report=data) == [fact]


def shortfall(level_name, data, **options):
    return level_shortfall(level_name, report=data, server_id=3, gpu_count=options.pop("gpu_count", 8),
                           reserves=RESERVES, toolkit_minimum=MINIMUM, **options)


@pytest.mark.parametrize(("level_name", "data", "options", "reasons"), [
    ("shared", report(), {}, []),
    ("container", report(container=container()), {}, []),
    ("whole", None, {}, []),
    ("shared", None, {}, ["The agent sends no isolation report (an older agent)."]),
    ("container", "garbage", {}, ["The agent's last isolation report did not hold."]),
    ("shared", report(tmp_private=False, host_login_closed=False), {},
     [FACTS["tmp_private"], FACTS["host_login_closed"]]),
    ("shared", report(processes_hidden=False), {}, []),  # shown, not required
    ("shared", report(mig_enabled=True), {}, [FACTS["mig_enabled"]]),
    ("shared", report(), {"devices_held": True},
     ["The GPU locks were found changed too often; an operator has not yet trusted them again."]),
    ("container", report(container=container()), {"devices_held": True}, []),
    ("shared", report(), {"gpu_count": 128},
     ["Once your reserves are set aside, a GPU's share is under one core, 1 GiB of memory or 1 GB of disk."]),
    ("container", report(), {}, ["No container runtime answered."]),
    ("container", report(container=container(self_test=False, disk_limited=False)), {},
     ["The container self-test failed.", "Containers' disks are not limited."]),
    ("container", report(container=container(gpus_by_uuid=False, toolkit_version="1.17.7")), {},
     ["The container runtime cannot give GPUs by their UUID.",
      "The NVIDIA Container Toolkit is older than 1.17.8."]),
])
def test_why_a_report_falls_short_of_a_level(level_name, data, options, reasons):
    assert shortfall(level_name, data, **options) == [str(reason) for reason in reasons]
    # Whatever it says, it says exactly when the level function gives a lower level.
    if data is not None and level_name != "whole":
        reached = level(data, gpu_count=options.get("gpu_count", 8),
                        devices_held=options.get("devices_held", False))
        assert (reasons == []) == (LEVELS_BY_STRENGTH.index(reached) <= LEVELS_BY_STRENGTH.index(level_name))


def test_a_paused_runtime_keeps_the_containers_of_a_host_that_reached_container_otherwise():
    arguments = {"server_id": 3, "gpu_count": 8, "reserves": RESERVES, "toolkit_minimum": MINIMUM}
    assert containers_paused(report(container=container(paused=True)), **arguments) is True
    assert containers_paused(report(container=container()), **arguments) is False
    assert containers_paused(report(container=container(paused=True, self_test=False)), **arguments) is False
    assert containers_paused(report(container=None), **arguments) is False
    assert shortfall("container", report(container=container(paused=True))) == [
        "The container runtime stopped answering: the containers it runs keep running, and no new one is "
        "sold until it answers again."]
    with pytest.raises(ReportInvalid, match="true or false"):
        isolation_report_check(report(container=container(paused="yes")), server_id=3)


def test_a_host_whose_driver_would_undo_the_locks_is_sold_whole():
    assert level(report(driver_keeps_permissions=False)) == IsolationLevel.WHOLE


def test_distrusted_device_locks_make_a_shared_server_whole():
    assert level(report(), devices_held=True) == "whole"


def test_a_share_under_one_core_per_gpu_is_no_sandbox():
    small = report(hardware={"cpu_cores": 9, "memory_mib": 520 * 1024, "disk_gb": 4050})
    assert level(small, gpu_count=8) == "whole"
    assert level(small, gpu_count=7) == "shared"


@pytest.mark.parametrize(("changes", "field"), [
    ({"facts": {**dict.fromkeys(FACTS, True), "gpu_teleport": True}}, "facts.gpu_teleport"),
    ({"facts": {name: True for name in FACTS if name != "tmp_private"}}, "facts.tmp_private"),
    ({"facts": {**dict.fromkeys(FACTS, True), "tmp_private": "yes"}}, "facts.tmp_private"),
    ({"backend": "none"}, "backend"),                        # limits without a cgroup
    ({"backend": "v3"}, "backend"),
    ({"container": container(runtime_version="")}, "container.runtime_version"),
    ({"container": container(runtime="lxc")}, "container.runtime"),
    ({"container": container(templates=["latest"])}, "container.templates.0"),
    ({"container": container(templates=["sha256:" + "A" * 64])}, "container.templates.0"),
    ({"container": {**container(), "privileged": True}}, "container.privileged"),
    ({"hardware": {"cpu_cores": -1, "memory_mib": 1, "disk_gb": 1}}, "hardware.cpu_cores"),
    ({"hardware": {"cpu_cores": True, "memory_mib": 1, "disk_gb": 1}}, "hardware.cpu_cores"),
    ({"server_id": 4}, "server_id"),
    ({"server_id": 3.0}, "server_id"),
    ({"version": True}, "version"),
    ({"version": 1.0}, "version"),
    ({"extra": 1}, "extra"),
])
def test_a_report_out_of_the_protocol_names_its_field(changes, field):
    data = report()
    data.update(changes)
    with pytest.raises(ReportInvalid) as refused:
        isolation_report_check(data, server_id=3)
    assert refused.value.field == field
    assert level(data) == "whole"


def test_the_digest_is_the_same_whatever_the_order_of_keys():
    data = report(container=container())
    shuffled = {key: data[key] for key in reversed(list(data))}
    shuffled["facts"] = dict(reversed(list(data["facts"].items())))
    assert isolation_report_digest(shuffled) == isolation_report_digest(data)
    changed = copy.deepcopy(data)
    changed["facts"]["tmp_private"] = False
    assert isolation_report_digest(changed) != isolation_report_digest(data)


@pytest.mark.parametrize(("version", "current"), [
    ("1.17.8", True), ("1.18.0", True), ("v1.17.9", True), ("1.17.8-rc.1", True), ("2.0", True),
    ("1.17.7", False), ("1.9.99", False), ("", False), ("unknown", False),
])
def test_the_toolkit_minimum(version, current):
    assert toolkit_is_current(version, "1.17.8") is current


def test_level_sets_are_every_non_empty_choice_strongest_first():
    assert ANY_LEVEL == "container,shared,whole"
    assert len(LEVEL_SETS) == 7
    assert levels_text(["whole", "container"]) == "container,whole"
    assert levels_of_text("container,whole") == ("container", "whole")
    assert all(levels_text(levels_of_text(text)) == text for text in LEVEL_SETS)


def test_a_rental_of_one_gpu_of_eight():
    sellable = Sellable.of(hardware={"cpu_cores": 66, "memory_mib": 520 * 1024, "disk_gb": 4050},
                           reserves=RESERVES)
    limits = RentalLimits.of(sellable=sellable, gpus=1, gpu_count=8, processes_per_gpu=4096)
    assert limits.as_dict() == {"cpu_cores": 8, "memory_mib": 64 * 1024, "disk_gb": 500, "processes": 4096}


@given(
    cores=st.integers(1, 512), memory_gib=st.integers(1, 4096), disk=st.integers(1, 100_000),
    gpu_count=st.integers(1, 16), data=st.data(),
)
def test_rentals_never_add_up_to_more_than_the_server(cores, memory_gib, disk, gpu_count, data):
    sellable = Sellable.of(hardware={"cpu_cores": cores, "memory_mib": memory_gib * 1024, "disk_gb": disk},
                           reserves=RESERVES)
    if not sellable.enough_for(gpu_count):
        return  # sold as a whole server: one rental takes it all
    # A random mix of rentals whose GPUs fill the server at most.
    mix, left = [], gpu_count
    while left:
        gpus = data.draw(st.integers(1, left))
        mix.append(gpus)
        left -= gpus
        if data.draw(st.booleans()):
            break
    limits = [RentalLimits.of(sellable=sellable, gpus=g, gpu_count=gpu_count, processes_per_gpu=4096)
              for g in mix]
    assert sum(limit.cpu_cores for limit in limits) <= sellable.cpu_cores
    assert sum(limit.memory_mib for limit in limits) <= sellable.memory_mib
    assert sum(limit.disk_gb for limit in limits) <= sellable.disk_gb
    assert all(limit.cpu_cores >= 1 and limit.memory_mib >= 1024 and limit.disk_gb >= 1 for limit in limits)
