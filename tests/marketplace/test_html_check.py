"""The HTML check of `make test`: the test client's pages are saved once each (tests/html_capture.py)
and scripts/check_html.py reports every error the Nu HTML Checker finds, under the request and
test that rendered its page. Only the last test runs the checker itself, and needs Java."""

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from django.http import HttpResponse, HttpResponseRedirect
from django.test import Client
from django.urls import path

from tests.html_capture import FRAGMENT_HEAD, INDEX, capture_install

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "check_html.py"

VALID = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Fine</title></head>'
    "<body><p>All good.</p></body></html>"
)
# A list inside a paragraph: the paragraph ends before the list, and its end tag is left stray.
INVALID = (
    '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>Broken</title></head>'
    "<body><p>Rules:<ul><li>eight characters</li></ul></p></body></html>"
)


def spec_check_html():
    spec = importlib.util.spec_from_file_location("check_html", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


check_html = spec_check_html()

urlpatterns = [
    path("valid/", lambda request: HttpResponse(VALID)),
    path("invalid/", lambda request: HttpResponse(INVALID)),
    path("fragment/", lambda request: HttpResponse('<div id="book"><p>Empty book</p></div>')),
    path("bare-403/", lambda request: HttpResponse("<h1>403 Forbidden</h1>", status=403)),
    path("moved/", lambda request: HttpResponseRedirect("/valid/")),
    path("pdf/", lambda request: HttpResponse(b"%PDF-1.7", content_type="application/pdf")),
]


@pytest.fixture
def captured(tmp_path):
    """The capture on into a folder of this test's own, instead of the suite's when that is on
    (the broken pages here must not fail `make test`)."""
    uninstall = capture_install(tmp_path)
    yield tmp_path
    uninstall()


def index(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / INDEX).read_text().splitlines()]


@pytest.mark.urls(__name__)
def test_each_distinct_page_is_saved_once_with_the_request_and_test_it_came_from(captured, request):
    client = Client()
    for _ in range(3):
        client.get("/valid/")
    client.get("/invalid/")
    client.get("/moved/")
    client.get("/pdf/")

    entries = index(captured)
    requests = [(e["method"], e["path"], e["status"]) for e in entries]
    assert requests == [("GET", "/valid/", 200), ("GET", "/invalid/", 200)]
    assert entries[0]["test"] == request.node.nodeid
    assert (captured / entries[1]["file"]).read_text() == INVALID
    assert sorted(p.name for p in captured.glob("*.html")) == sorted(e["file"] for e in entries)


@pytest.mark.urls(__name__)
def test_a_capture_of_a_test_replaces_the_suites_while_it_lasts(tmp_path):
    outer, inner = tmp_path / "suite", tmp_path / "test"
    uninstall_outer = capture_install(outer)
    try:
        uninstall_inner = capture_install(inner)
        Client().get("/invalid/")
        uninstall_inner()
        Client().get("/valid/")
    finally:
        uninstall_outer()
    assert [e["path"] for e in index(inner)] == ["/invalid/"]
    assert [e["path"] for e in index(outer)] == ["/valid/"]


@pytest.mark.urls(__name__)
def test_a_fragment_is_checked_inside_a_document_and_a_bare_error_page_as_it_is(captured):
    client = Client()
    client.get("/fragment/")
    client.get("/valid/", headers={"HX-Request": "true"})
    client.get("/bare-403/")
    entries = {e["path"]: e for e in index(captured)}

    fragment = (captured / entries["/fragment/"]["file"]).read_text()
    assert fragment.startswith(FRAGMENT_HEAD + '<div id="book">') and "\n" not in fragment.rstrip()
    assert entries["/valid/"]["fragment"] and not entries["/bare-403/"]["fragment"]
    assert (captured / entries["/bare-403/"]["file"]).read_text() == "<h1>403 Forbidden</h1>"


def test_the_report_lists_each_error_under_its_page_and_nothing_for_a_valid_one(tmp_path):
    """The checker's JSON, as it reports a list in a paragraph, turned into the report."""
    for name, html in (("bad.html", INVALID), ("good.html", VALID)):
        (tmp_path / name).write_text(html)
    (tmp_path / INDEX).write_text(
        json.dumps({"file": "bad.html", "method": "POST", "path": "/en/account/signup/", "status": 200,
                    "fragment": False, "test": "tests/x.py::test_signup"}) + "\n"
    )
    pages = check_html.pages_read(tmp_path)
    messages = [{"type": "error", "url": f"file:{tmp_path}/bad.html", "lastLine": 1, "firstColumn": 140,
                 "message": "No “p” element in scope but a “p” end tag seen.", "extract": "</ul></p>"}]
    stray = check_html.errors_assign(pages=pages, messages=messages)
    text, passed = check_html.report(pages=pages, stray=stray)

    assert not passed and stray == []
    assert "POST '/en/account/signup/' -> 200" in text and "rendered by tests/x.py::test_signup" in text
    assert "1:140: No “p” element in scope but a “p” end tag seen." in text and "good.html" not in text
    assert text.endswith("1 errors on 1 of 2 pages.")
    assert check_html.report(pages=check_html.pages_read(tmp_path / "none"), stray=[])[1]


def test_an_empty_folder_fails_the_check(tmp_path):
    result = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1 and "no pages" in result.stdout


@pytest.mark.urls(__name__)
@pytest.mark.skipif(shutil.which("java") is None, reason="needs Java: `make html-checker` installs it")
def test_the_checker_reports_the_broken_page_and_passes_the_valid_one(captured):
    if not check_html.JAR.exists():
        pytest.skip("needs vnu.jar: `make html-checker` installs it")
    client = Client()
    client.get("/valid/")
    client.get("/fragment/")

    passing = subprocess.run([sys.executable, str(SCRIPT), str(captured)], capture_output=True, text=True)
    assert passing.returncode == 0, passing.stdout
    assert passing.stdout.strip() == "HTML checker: 2 pages, no errors."

    client.get("/invalid/")
    failing = subprocess.run([sys.executable, str(SCRIPT), str(captured)], capture_output=True, text=True)
    assert failing.returncode == 1
    assert "GET '/invalid/' -> 200" in failing.stdout and "'/valid/'" not in failing.stdout
    assert "No “p” element in scope but a “p” end tag seen." in failing.stdout
    assert failing.stdout.rstrip().endswith("of 3 pages.")
