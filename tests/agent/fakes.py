"""Fake commands on a PATH of the test's own: `docker`, `podman`, `nvidia-ctk`, `nvidia-smi`... Each
records its arguments as one JSON line and answers from the fixtures the test gave it, so a test
checks both what the agent asked and what it made of the answer."""

import json
import sys
from pathlib import Path

SCRIPT = """#!{python}
import json, os, sys, time
folder = os.path.dirname(os.path.abspath(sys.argv[0]))
name = os.path.basename(sys.argv[0])
with open(os.path.join(folder, "calls.jsonl"), "a") as log:
    log.write(json.dumps([name, *sys.argv[1:]]) + "\\n")
with open(os.path.join(folder, "answers.json")) as answers:
    answer = json.load(answers)[name].get(json.dumps(sys.argv[1:]))
if answer is None:
    sys.stderr.write(name + ": no such fixture\\n")
    sys.exit(64)
time.sleep(answer["sleep"])
sys.stdout.write(answer["out"])
sys.stderr.write(answer["err"])
sys.exit(answer["code"])
"""


class FakeCommands:
    """`answer("docker", ["info", ...], out=...)` makes `docker` answer those exact arguments;
    `calls()` lists what every fake was run with, in order."""

    def __init__(self, folder: Path):
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)
        self.answers: dict[str, dict[str, dict]] = {}
        self._save()

    @property
    def path(self) -> str:
        return str(self.folder)

    def answer(self, name: str, arguments: list[str], *, out: str = "", err: str = "", code: int = 0,
               sleep: float = 0.0) -> None:
        script = self.folder / name
        if not script.exists():
            script.write_text(SCRIPT.format(python=sys.executable))
            script.chmod(0o755)
        self.answers.setdefault(name, {})[json.dumps(arguments)] = {
            "out": out, "err": err, "code": code, "sleep": sleep}
        self._save()

    def calls(self) -> list[list[str]]:
        log = self.folder / "calls.jsonl"
        if not log.exists():
            return []
        return [json.loads(line) for line in log.read_text().splitlines()]

    def forget_calls(self) -> None:
        (self.folder / "calls.jsonl").unlink(missing_ok=True)

    def _save(self) -> None:
        (self.folder / "answers.json").write_text(json.dumps(self.answers))
