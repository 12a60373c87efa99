from django.urls import path

from . import views, views_trade

app_name = "exchange"

urlpatterns = [
    path("trade/<slug:slug>/", views_trade.trade, name="trade"),
    path("trade/<slug:slug>/book/", views_trade.trade_book, name="trade-book"),
    path("trade/<slug:slug>/preview/", views_trade.trade_preview, name="trade-preview"),
    path("trade/<slug:slug>/buy/", views_trade.trade_buy, name="trade-buy"),
    path("trade/<slug:slug>/bid/", views_trade.trade_bid, name="trade-bid"),
    path("account/orders/", views.orders, name="orders"),
    path("account/orders/<int:pk>/cancel/", views.order_cancel, name="order-cancel"),
    path("account/rentals/", views.rentals, name="rentals"),
    path("account/rentals/<int:pk>/", views.rental_detail, name="rental"),
    path("account/rentals/<int:pk>/stop/", views.rental_stop_view, name="rental-stop"),
    path("account/rentals/<int:pk>/token/", views.rental_service_token_view, name="rental-token"),
    path("account/ssh-keys/", views.ssh_keys, name="ssh-keys"),
    path("account/ssh-keys/<int:pk>/delete/", views.ssh_key_delete_view, name="ssh-key-delete"),
    path("account/price-alerts/", views.price_alerts, name="price-alerts"),
    path("account/price-alerts/<int:pk>/stop/", views.price_alert_stop_view, name="price-alert-stop"),
    path("price-alerts/stop/<str:token>/", views.price_alert_unsubscribe, name="price-alert-unsubscribe"),
    path("market-rules/", views.market_rules, name="market-rules"),
]
