"""Two Portuguese seller journeys without dead ends. An applicant without two-factor authentication
sees the VAT format of the country chosen, is refused at submission with a link to the set-up,
turns it on with a real code and comes straight back to submit. A member posting an offer watches
the pricing help follow the price as it is typed."""

from decimal import Decimal

import pytest
from django.utils import translation
from django.utils.translation import gettext
from playwright.sync_api import expect

from exchange.models import Offer
from sellers.forms import vat_id_help
from sellers.models import ApplicationStatus, SellerApplication
from tests.browser.support import PASSWORD, landed_on, new_page, submit, totp_code_to_type
from tests.browser.test_seller_journey import APPLICATION
from tests.factories import (
    BidFactory,
    GpuModelFactory,
    OfferFactory,
    ProfileFactory,
    SellerFactory,
    ServerFactory,
)
from tests.sellers.support import member, with_mfa

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def portuguese(message: str) -> str:
    with translation.override("pt"):
        return gettext(message)


def sign_in(page, base: str, user) -> None:
    page.goto(f"{base}/pt/account/login/")
    page.locator("input[name=login]").fill(user.email)
    page.locator("input[name=password]").fill(PASSWORD)
    submit(page, page.locator("main form button[type=submit]").last)


def test_an_applicant_turns_two_factor_on_from_the_refusal_and_comes_back(live_server, browser):
    base = live_server.url
    applicant = ProfileFactory(preferred_language="pt").user
    page = new_page(browser, "pt")
    sign_in(page, base, applicant)
    page.goto(f"{base}/pt/sell/apply/")
    form = page.locator("main form")
    help_text = page.locator("#id_vat_id_helptext")
    form.locator("select[name=country]").select_option("DE")
    with translation.override("pt"):
        expect(help_text).to_have_text(vat_id_help("DE"))
    form.locator("select[name=country]").select_option("PT")
    with translation.override("pt"):
        expect(help_text).to_have_text(vat_id_help("PT"))
    for name, value in APPLICATION.items():
        form.locator(f"[name={name}]").fill(value)
    form.locator("input[name=accept_terms]").check()
    submit(page, form.locator("button[name=submit]"))
    assert SellerApplication.objects.get(applicant=applicant).status == ApplicationStatus.DRAFT

    # The refusal links to the set-up, which remembers the way back.
    submit(page, page.get_by_role("link", name=portuguese("Set up two-factor authentication")))
    # Turning it on asks for the password again (a recent sign-in is not enough for allauth).
    if "/reauthenticate/" in page.url:
        page.locator("input[name=password]").fill(PASSWORD)
        submit(page, page.locator("main form button[type=submit]"))
    secret = page.locator("#authenticator_secret").input_value()
    page.locator("input[name=code]").fill(totp_code_to_type(secret))
    submit(page, page.locator("main form button[type=submit]"))
    back = page.get_by_test_id("two-factor-return")
    expect(back).to_contain_text(portuguese("Continue where you were"))
    submit(page, back.get_by_role("link", name=portuguese("Continue where you were")))
    landed_on(page, "/pt/sell/apply/")

    form = page.locator("main form")
    form.locator("input[name=accept_terms]").check()
    submit(page, form.locator("button[name=submit]"))
    assert SellerApplication.objects.get(applicant=applicant).status == ApplicationStatus.SUBMITTED
    page.context.close()


def test_a_seller_sees_where_the_price_typed_would_stand(live_server, browser):
    base = live_server.url
    gpu = GpuModelFactory(name="H100 SXM", slug="h100-sxm")
    for price in ("2.20", "2.40", "2.60"):
        OfferFactory(server=ServerFactory(gpu_model=gpu), price_usd=Decimal(price))
    BidFactory(gpu_model=gpu, max_price_usd=Decimal("1.90"), state="open", time_in_force="bid")
    seller = SellerFactory(name="Lisboa GPU Lda")
    server = ServerFactory(seller=seller, gpu_model=gpu, gpu_count=8, status="active")
    owner = member(seller, mfa=False)
    ProfileFactory(user=owner, preferred_language="pt")
    page = new_page(browser, "pt")
    sign_in(page, base, owner)
    with_mfa(owner)  # after signing in, so that the sign-in does not ask for a code
    page.goto(f"{base}/pt/seller/servers/{server.pk}/")
    pricing = page.get_by_test_id("pricing-help")
    expect(pricing.get_by_test_id("pricing-best-ask")).to_have_text("US$\u00a02,20")
    expect(pricing.get_by_test_id("pricing-best-bid")).to_have_text("US$\u00a01,90")

    offer_form = page.locator("main form[action$='/offer/']")
    offer_form.locator("input[name=gpus]").fill("4")
    offer_form.locator("input[name=price_usd]").fill("2,50")
    expect(page.get_by_test_id("pricing-place")).to_contain_text("a oferta n.º 3 de 4")
    offer_form.locator("input[name=price_usd]").fill("2,10")
    expect(page.get_by_test_id("pricing-place")).to_contain_text("a mais barata de 4 ofertas")
    offer_form.locator("input[name=price_usd]").fill("dois euros")
    expect(page.get_by_test_id("pricing-errors")).to_be_visible()
    assert not Offer.objects.filter(server=server).exists()

    offer_form.locator("input[name=price_usd]").fill("2,10")
    submit(page, offer_form.locator("button[type=submit]"))
    offer = Offer.objects.get(server=server)
    assert (offer.gpus_offered, offer.price_usd) == (4, Decimal("2.10"))
    page.context.close()
