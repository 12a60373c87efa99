"""Make django-allauth's European Portuguese catalog serve our `pt` language.

allauth ships `pt_PT` and `pt_BR`; Django looks for `pt` only. This copies the installed
package's compiled `pt_PT` catalog into the git-ignored `.locale_vendor/pt/`, which settings
list after our own `locale/`, so our translations still win where both have a string.
"""

import shutil
import sys
from pathlib import Path

import allauth

ROOT = Path(__file__).resolve().parent.parent
TARGET = ROOT / ".locale_vendor"
ALIASES = {"pt": "pt_PT"}  # our language -> the package's locale folder


def main() -> int:
    source_root = Path(allauth.__file__).resolve().parent / "locale"
    for ours, theirs in ALIASES.items():
        source = source_root / theirs / "LC_MESSAGES" / "django.mo"
        if not source.exists():
            print(f"allauth has no {theirs} catalog; skipped", file=sys.stderr)
            continue
        destination = TARGET / ours / "LC_MESSAGES"
        destination.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, destination / "django.mo")
    return 0


if __name__ == "__main__":
    sys.exit(main())
