"""Fail when a catalog in locale/ has an untranslated or fuzzy entry, or when makemessages
would change the catalogs (a string added or changed in the code but not in locale/).

Usage: check_messages.py <the makemessages command line>
"""

import subprocess
import sys
from pathlib import Path

from babel.messages.pofile import read_po

LOCALE = Path(__file__).resolve().parent.parent / "locale"


def catalog_files() -> list[Path]:
    return sorted(LOCALE.glob("*/LC_MESSAGES/*.po"))


def without_dates(text: str) -> str:
    return "\n".join(line for line in text.splitlines() if "POT-Creation-Date" not in line)


def incomplete_entries(path: Path) -> list[str]:
    with path.open("rb") as handle:
        catalog = read_po(handle)
    problems = []
    for message in catalog:
        if not message.id:
            continue
        label = message.id if isinstance(message.id, str) else message.id[0]
        strings = message.string if isinstance(message.string, tuple) else (message.string,)
        if message.fuzzy:
            problems.append(f"{path.relative_to(LOCALE)}: fuzzy: {label[:70]!r}")
        elif not all(strings):
            problems.append(f"{path.relative_to(LOCALE)}: untranslated: {label[:70]!r}")
    return problems


def makemessages_changes(command: list[str]) -> list[str]:
    before = {path: path.read_text(encoding="utf-8") for path in catalog_files()}
    try:
        subprocess.run(command, check=True, capture_output=True)
        after = {path: path.read_text(encoding="utf-8") for path in catalog_files()}
    finally:
        for path in catalog_files():
            if path not in before:
                path.unlink()
        for path, text in before.items():
            path.write_text(text, encoding="utf-8")
    changed = [p for p in after if without_dates(after[p]) != without_dates(before.get(p, ""))]
    return [f"{p.relative_to(LOCALE)}: out of date, run `make messages`" for p in changed]


def main(command: list[str]) -> int:
    problems = makemessages_changes(command) if command else []
    for path in catalog_files():
        problems += incomplete_entries(path)
    for problem in problems:
        print(problem, file=sys.stderr)
    if not catalog_files():
        print("No catalogs in locale/.", file=sys.stderr)
        return 1
    print(f"Catalogs: {len(catalog_files())} checked, {len(problems)} problems.")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
