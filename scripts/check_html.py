"""Check the pages that the test suite rendered with the Nu HTML Checker; fail on any error.

Usage: check_html.py FOLDER [--jar PATH]

FOLDER is what pytest filled with HTML_CAPTURE_DIR set (tests/html_capture.py): one file per
distinct page, and index.jsonl saying which request and test each came from. Every file is checked
in one run of the checker (one JVM start for the whole suite); each error is printed under the
request that rendered its page. Exit status 1 on any error, and on a folder without pages (the
capture did not run, so nothing was checked).
"""

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JAR = ROOT / ".tools" / "node_modules" / "vnu-jar" / "build" / "dist" / "vnu.jar"
INDEX = "index.jsonl"
EXTRACT_WIDTH = 160


@dataclass
class Page:
    name: str
    request: str = ""
    test: str = ""
    errors: list[str] = field(default_factory=list)


def pages_read(folder: Path) -> dict[str, Page]:
    """The captured pages by file name, with the request and test that the index gives for each."""
    pages = {path.name: Page(name=path.name) for path in sorted(folder.glob("*.html"))}
    index = folder / INDEX
    if index.exists():
        for line in index.read_text(encoding="utf-8").splitlines():
            entry = json.loads(line)
            page = pages.get(entry["file"])
            if page is not None:
                suffix = " (fragment)" if entry["fragment"] else ""
                page.request = f"{entry['method']} {entry['path']!r} -> {entry['status']}{suffix}"
                page.test = entry["test"]
    return pages


def checker_run(*, jar: Path, files: list[Path]) -> list[dict]:
    """The checker's messages (errors only) for `files`, from one run."""
    command = ["java", "-jar", str(jar), "--errors-only", "--format", "json", "--stdout"]
    command.append("--exit-zero-always")  # errors are read from the report, not the exit status
    result = subprocess.run([*command, *map(str, files)], capture_output=True, text=True, check=False)
    if result.returncode != 0 or not result.stdout.strip():
        raise SystemExit(f"The HTML checker did not run (exit {result.returncode}):\n{result.stderr}")
    return json.loads(result.stdout)["messages"]


def message_line(message: dict) -> str:
    """One error as `line:column: message` with the start of the markup it points at."""
    where = f"{message.get('lastLine', '?')}:{message.get('firstColumn', message.get('lastColumn', '?'))}"
    extract = " ".join(message.get("extract", "").split())[:EXTRACT_WIDTH]
    text = f"{where}: {message.get('message', '')}"
    return f"{text}\n      {extract}" if extract else text


def errors_assign(*, pages: dict[str, Page], messages: list[dict]) -> list[str]:
    """File each message under its page; returns the messages about no page (the checker's own)."""
    stray = []
    for message in messages:
        name = message.get("url", "").rsplit("/", 1)[-1]
        if message.get("type") == "error" and name in pages:
            pages[name].errors.append(message_line(message))
        elif message.get("type") in ("error", "non-document-error"):
            stray.append(message_line(message))
    return stray


def report(*, pages: dict[str, Page], stray: list[str]) -> tuple[str, bool]:
    """The text to print and whether every page passed."""
    failing = [page for page in pages.values() if page.errors]
    lines = []
    for page in failing:
        lines.append(f"{page.request or page.name}  [{page.name}]")
        if page.test:
            lines.append(f"  rendered by {page.test}")
        lines.extend(f"    {error}" for error in page.errors)
    lines.extend(f"checker: {message}" for message in stray)
    count = sum(len(page.errors) for page in failing)
    if failing or stray:
        lines.append(f"HTML checker: {count} errors on {len(failing)} of {len(pages)} pages.")
        return "\n".join(lines), False
    return f"HTML checker: {len(pages)} pages, no errors.", True


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--jar", type=Path, default=JAR)
    args = parser.parse_args(argv)
    pages = pages_read(args.folder) if args.folder.is_dir() else {}
    if not pages:
        print(f"HTML checker: no pages in {args.folder}; was pytest run with HTML_CAPTURE_DIR set?")
        return 1
    messages = checker_run(jar=args.jar, files=[args.folder / name for name in pages])
    stray = errors_assign(pages=pages, messages=messages)
    text, passed = report(pages=pages, stray=stray)
    print(text)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
