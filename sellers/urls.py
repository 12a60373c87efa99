from django.urls import path

from . import views, views_agent, views_money, views_payouts

app_name = "sellers"

urlpatterns = [
    path("sell/", views.sell, name="sell"),
    path("sell/terms/", views.terms, name="terms"),
    path("sell/apply/", views.apply, name="apply"),
    path("sell/two-factor/", views.two_factor, name="two-factor"),
    path("seller/", views.portal_dashboard, name="portal"),
    path("seller/servers/", views.portal_servers, name="portal-servers"),
    path("seller/servers/new/", views.portal_server_register, name="portal-server-register"),
    path("seller/servers/<int:server_id>/", views.portal_server, name="portal-server"),
    path("seller/servers/<int:server_id>/edit/", views.portal_server_edit, name="portal-server-edit"),
    path("seller/servers/<int:server_id>/retire/", views.portal_server_retire, name="portal-server-retire"),
    path(
        "seller/servers/<int:server_id>/failure/", views.portal_server_failure, name="portal-server-failure"
    ),
    path(
        "seller/servers/<int:server_id>/agent/", views_agent.portal_server_agent, name="portal-server-agent"
    ),
    path(
        "seller/servers/<int:server_id>/agent/token/", views_agent.portal_agent_token,
        name="portal-agent-token",
    ),
    path(
        "seller/servers/<int:server_id>/agent/token/revoke/", views_agent.portal_agent_token_revoke,
        name="portal-agent-token-revoke",
    ),
    path("seller/servers/<int:server_id>/offer/", views.portal_offer_post, name="portal-offer-post"),
    path(
        "seller/servers/<int:server_id>/pricing/", views.portal_pricing_help, name="portal-pricing-help"
    ),
    path("seller/offers/<int:offer_id>/", views.portal_offer_update, name="portal-offer-update"),
    path("seller/offers/<int:offer_id>/withdraw/", views.portal_offer_withdraw, name="portal-offer-withdraw"),
    path("seller/rentals/", views.portal_rentals, name="portal-rentals"),
    path("seller/members/", views.portal_members, name="portal-members"),
    path("seller/invitations/<int:invitation_id>/", views.invitation, name="invitation"),
    path("seller/payouts/", views_payouts.portal_payouts, name="portal-payouts"),
    path("seller/payouts/request/", views_payouts.portal_payout_request, name="portal-payout-request"),
    path("seller/payout-details/", views_money.portal_payout_details, name="portal-payout-details"),
    path("seller/earnings/", views_money.portal_earnings, name="portal-earnings"),
]
