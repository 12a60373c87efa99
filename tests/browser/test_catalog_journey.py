import pytest

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

NBSP, NNBSP = "\u00a0", "\u202f"


def cells(page, slug: str) -> list[str]:
    row = page.locator(f'#workload-gpus tr[data-gpu="{slug}"] td')
    return [text.strip() for text in row.all_inner_texts()]


def test_french_fine_tuning_page_then_portuguese(live_server, demo_book, page):
    page.goto(f"{live_server.url}/")
    # The browser asks for French: the root sends it to the French home page.
    assert page.url == f"{live_server.url}/fr/"
    page.goto(f"{live_server.url}/fr/workloads/fine-tuning/")
    assert page.locator("html").get_attribute("lang") == "fr"
    assert cells(page, "h200") == [
        f"141{NNBSP}Go", f"4{NNBSP}800{NNBSP}Go/s", f"≈ 110{NBSP}Md", f"≈ 45{NBSP}Md",
        f"dès 4,19{NBSP}$US",
    ]

    page.locator(".language-switcher").get_by_role("link", name="Português").click()
    page.wait_for_url(f"{live_server.url}/pt/workloads/fine-tuning/")
    assert page.locator("html").get_attribute("lang") == "pt"
    assert cells(page, "h200") == [
        "141 GB", "4.800 GB/s", f"≈ 110{NBSP}mil{NBSP}M", f"≈ 45{NBSP}mil{NBSP}M",
        f"a partir de US${NBSP}4,19",
    ]


def test_compare_from_a_workload_page_in_french(live_server, demo_book, page):
    page.goto(f"{live_server.url}/fr/workloads/training/")
    form = page.locator("form[action$='/compare/']")
    form.get_by_label("H100 SXM").check()
    form.get_by_label("H200").check()
    form.locator("button[type=submit]").click()
    page.wait_for_url("**/fr/compare/**")
    table = page.locator("#compare-table")
    assert table.locator("thead th").all_inner_texts()[1:] == ["H100 SXM", "H200"]
    assert f"dès 4,19{NBSP}$US" in table.inner_text()


def test_phone_width_shows_the_scroll_hint(live_server, demo_book, browser):
    context = browser.new_context(viewport={"width": 375, "height": 740}, locale="pt-PT")
    page = context.new_page()
    page.goto(f"{live_server.url}/pt/workloads/fine-tuning/")
    assert page.locator(".scroll-hint").first.is_visible()
    scroller = page.locator(".table-scroll").first
    assert scroller.evaluate("el => el.scrollWidth > el.clientWidth")
    # The page itself does not scroll sideways; only the table does.
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    context.close()
