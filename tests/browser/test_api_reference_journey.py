"""The API reference draws every operation of the served document with Swagger UI from our own
static files, under the site's strict Content-Security-Policy, and "Try it out" reaches the API."""

import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# Records what the policy refuses, before any script of the page runs.
WATCH_VIOLATIONS = """
window.__violations = [];
document.addEventListener("securitypolicyviolation", (event) => {
  window.__violations.push(`${event.violatedDirective} ${event.blockedURI || "inline"} ${event.sourceFile}`);
});
"""


def test_the_reference_draws_the_document_and_tries_an_operation(live_server, gpu_catalog, page):
    problems: list[str] = []
    page.add_init_script(WATCH_VIOLATIONS)
    page.on("console", lambda message: message.type == "error" and problems.append(message.text))
    page.on("request", lambda request: request.url.startswith(live_server.url)
            or problems.append(f"left the site: {request.url}"))

    page.goto(f"{live_server.url}/pt/api/")
    page.locator(".opblock").first.wait_for()
    document = page.request.get(f"{live_server.url}/api/v1/openapi.json").json()
    operations = sum(len(item) for item in document["paths"].values())
    assert page.locator(".opblock").count() == operations

    market = page.locator(".opblock", has=page.locator("[data-path='/api/v1/markets/{slug}']"))
    market.locator(".opblock-summary").click()
    market.get_by_text("Try it out").click()
    market.locator("input[placeholder='slug']").fill("h100-sxm")
    market.get_by_text("Execute").click()
    status = market.locator(".live-responses-table .response .response-col_status").first
    status.wait_for()
    assert status.inner_text().strip() == "200"
    assert page.evaluate("window.__violations") == []
    assert problems == []


def test_without_javascript_the_page_still_links_the_document(live_server, browser):
    context = browser.new_context(java_script_enabled=False, locale="fr-FR")
    page = context.new_page()
    page.goto(f"{live_server.url}/fr/api/")
    links = page.locator("main a").evaluate_all("links => links.map(link => link.getAttribute('href'))")
    assert {"/api/v1/openapi.json", "/fr/api/quickstart/", "/fr/account/api-tokens/"} <= set(links)
    assert page.locator("noscript").count() == 1
    context.close()
