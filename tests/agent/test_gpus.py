"""nvidia-smi as it really answers, from a fake `nvidia-smi` script first on PATH."""

import textwrap

import pytest
from everx_agent.gpus import QUERY_ARGS, gpus_parse, gpus_read

H100_LINES = [
    f"{index}, GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c0{index}, NVIDIA H100 80GB HBM3, 81559, {31 + index}, "
    f"{index * 10}, 0"
    for index in range(8)
]
A100_LINES = [
    "0, GPU-a1b2c3d4-0000-1111-2222-333344445550, NVIDIA A100-SXM4-80GB, 81920, 29, 0, 0",
    "1, GPU-a1b2c3d4-0000-1111-2222-333344445551, NVIDIA A100-SXM4-80GB, 81920, 30, 100, 0",
    "2, GPU-a1b2c3d4-0000-1111-2222-333344445552, NVIDIA A100-SXM4-80GB, 81920, 31, 57, 0",
    "3, GPU-a1b2c3d4-0000-1111-2222-333344445553, NVIDIA A100-SXM4-80GB, 81920, 28, 0, 0",
]


@pytest.fixture
def nvidia_smi(tmp_path, monkeypatch):
    """`nvidia_smi(output, exit_code=0, hang=False)` installs the fake; it records its arguments."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")

    def install(output: str = "", *, exit_code: int = 0, hang: bool = False, stderr: str = "") -> None:
        (tmp_path / "out.txt").write_text(output)
        (tmp_path / "err.txt").write_text(stderr)
        script = bin_dir / "nvidia-smi"
        script.write_text(textwrap.dedent(f"""\
            #!/bin/sh
            echo "$@" > {tmp_path}/args.txt
            {"exec sleep 30" if hang else ""}
            cat {tmp_path}/out.txt
            cat {tmp_path}/err.txt >&2
            exit {exit_code}
            """))
        script.chmod(0o755)

    install.args = lambda: (tmp_path / "args.txt").read_text().split()
    return install


def test_eight_h100_are_read_with_every_field(nvidia_smi):
    nvidia_smi("\n".join(H100_LINES) + "\n")
    reading = gpus_read()
    assert reading.error is None
    assert len(reading.gpus) == 8
    assert reading.gpus[0] == {
        "index": 0, "uuid": "GPU-3f2c8a51-7d4e-1b9a-c0d2-5e6f7a8b9c00", "name": "NVIDIA H100 80GB HBM3",
        "memory_total_mib": 81559, "temperature_c": 31, "utilization_percent": 0, "ecc_uncorrected": 0,
    }
    assert [gpu["index"] for gpu in reading.gpus] == list(range(8))
    assert reading.gpus[7]["utilization_percent"] == 70
    assert nvidia_smi.args() == list(QUERY_ARGS)
    assert QUERY_ARGS[0] == ("--query-gpu=index,uuid,name,memory.total,temperature.gpu,utilization.gpu,"
                             "ecc.errors.uncorrected.volatile.total")


def test_four_a100_are_read(nvidia_smi):
    nvidia_smi("\n".join(A100_LINES) + "\n")
    reading = gpus_read()
    assert reading.error is None
    assert {gpu["name"] for gpu in reading.gpus} == {"NVIDIA A100-SXM4-80GB"}
    assert [gpu["memory_total_mib"] for gpu in reading.gpus] == [81920] * 4
    assert reading.gpus[1]["utilization_percent"] == 100


def test_fields_nvidia_smi_could_not_read_are_null_and_the_gpu_still_listed():
    reading = gpus_parse(text=(
        "0, GPU-aaaa, NVIDIA H100 80GB HBM3, 81559, [N/A], [N/A], [N/A]\n"
        "1, GPU-bbbb, NVIDIA H100 80GB HBM3, [N/A], N/A, [Not Supported], \n"
    ))
    assert reading.error is None
    assert reading.gpus[0] == {"index": 0, "uuid": "GPU-aaaa", "name": "NVIDIA H100 80GB HBM3",
                               "memory_total_mib": 81559, "temperature_c": None, "utilization_percent": None,
                               "ecc_uncorrected": None}
    assert reading.gpus[1]["memory_total_mib"] is None
    assert reading.gpus[1]["ecc_uncorrected"] is None


def test_a_vanished_gpu_is_simply_not_listed(nvidia_smi):
    nvidia_smi("\n".join(line for line in H100_LINES if not line.startswith("5,")) + "\n")
    reading = gpus_read()
    assert reading.error is None
    assert [gpu["index"] for gpu in reading.gpus] == [0, 1, 2, 3, 4, 6, 7]


def test_uncorrected_ecc_errors_are_reported_as_counted():
    lines = list(H100_LINES)
    lines[3] = lines[3].rsplit(",", 1)[0] + ", 17"
    reading = gpus_parse(text="\n".join(lines))
    assert [gpu["ecc_uncorrected"] for gpu in reading.gpus] == [0, 0, 0, 17, 0, 0, 0, 0]


def test_lines_that_cannot_be_read_are_skipped_and_counted(nvidia_smi):
    nvidia_smi("\n".join([
        H100_LINES[0],
        "Unable to determine the device handle for GPU 0000:1B:00.0: Unknown Error",
        "x, GPU-cccc, NVIDIA H100 80GB HBM3, 81559, 30, 0, 0",
        "",
        H100_LINES[1],
    ]) + "\n")
    reading = gpus_read()
    assert [gpu["index"] for gpu in reading.gpus] == [0, 1]
    assert reading.error == "2 lines of nvidia-smi output could not be read"


def test_one_unreadable_line_is_said_in_the_singular():
    assert gpus_parse(text=H100_LINES[0] + "\n0, GPU-x, name\n").error == \
        "1 line of nvidia-smi output could not be read"


def test_a_missing_nvidia_smi_is_no_gpus_and_a_short_error(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    reading = gpus_read()
    assert reading.gpus == []
    assert reading.error == "nvidia-smi was not found (is the NVIDIA driver installed?)"


def test_a_failing_nvidia_smi_says_its_exit_code_and_first_words(nvidia_smi):
    nvidia_smi("", exit_code=9, stderr="NVIDIA-SMI has failed because it couldn't communicate with the "
                                       "NVIDIA driver.\nMake sure that the latest driver is installed.\n")
    reading = gpus_read()
    assert reading.gpus == []
    assert reading.error == ("nvidia-smi failed with exit code 9: NVIDIA-SMI has failed because it couldn't "
                             "communicate with the NVIDIA driver.")


def test_a_hanging_nvidia_smi_is_given_up_after_the_timeout(nvidia_smi):
    nvidia_smi(H100_LINES[0], hang=True)
    reading = gpus_read(timeout=0.3)
    assert reading.gpus == []
    assert reading.error == "nvidia-smi did not answer within 0.3 seconds"


def test_no_gpu_at_all_is_said():
    assert gpus_parse(text="\n").gpus == []
    assert gpus_parse(text="").error == "nvidia-smi listed no GPUs"
