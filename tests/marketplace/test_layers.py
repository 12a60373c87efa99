"""The layers contract (`.importlinter`, run by `make lint`) sees every domain module: a module of
an app is either listed in one of its layers or an entry point by name. A new module that is
neither would escape the direction of imports unnoticed."""

import configparser
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
APPS = ("marketplace", "accounts", "catalog", "sellers", "exchange", "billing")
# Entry points and wiring: they may call any app's services and selectors (DESIGN.md).
ENTRY_POINTS = {
    "admin", "api", "apps", "forms", "tasks", "urls", "views", "adapter", "middleware",
    "context_processors", "sitemaps", "errors", "celery", "wsgi", "asgi", "api_support",
}
ENTRY_PACKAGES = {"management", "migrations", "settings", "templatetags"}
LAYER_ORDER = ["billing", "exchange", "sellers", "catalog", "accounts", "marketplace"]


def _layers() -> list[list[str]]:
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    text = config["importlinter:contract:layers"]["layers"]
    return [[name.strip() for name in line.split(":")] for line in text.strip().splitlines()]


def _is_entry_point(module: str) -> bool:
    parts = module.split(".")
    return bool(ENTRY_PACKAGES & set(parts)) or any(
        part in ENTRY_POINTS or part.startswith(("views_", "admin_", "api_")) for part in parts[1:]
    )


def _modules(app: str) -> list[str]:
    found = []
    for path in sorted((ROOT / app).rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if len(parts) > 1:
            found.append(".".join(parts))
    return found


def test_the_contract_orders_the_apps_as_the_design_does():
    assert [layer[0].split(".")[0] for layer in _layers()] == LAYER_ORDER
    for layer in _layers():
        assert len({name.split(".")[0] for name in layer}) == 1, layer


def test_every_module_is_in_a_layer_or_an_entry_point():
    listed = [name for layer in _layers() for name in layer]
    unseen = [
        module for app in APPS for module in _modules(app)
        if not _is_entry_point(module)
        and not any(module == name or module.startswith(name + ".") for name in listed)
    ]
    assert unseen == []


def test_the_contract_lists_no_exceptions():
    config = configparser.ConfigParser()
    config.read(ROOT / ".importlinter")
    assert "ignore_imports" not in config["importlinter:contract:layers"]
