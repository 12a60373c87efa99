"""Answers of the API in the shapes docs/api.md gives, for the fake exchange of the unit tests."""


def usd(amount: str) -> dict:
    return {"amount": amount, "currency": "USD"}


def eur(amount: str) -> dict:
    return {"amount": amount, "currency": "EUR"}


ME = {"email": "lea@example.com", "language": "fr", "token_name": "laptop", "token_prefix": "evx_tttttttt",
      "scopes": ["read", "trade"], "seller": None, "expires_at": None}

GPU_LIST = [
    {"slug": "h100-sxm", "name": "NVIDIA H100 SXM", "vendor": "NVIDIA", "memory_gb": 80, "bandwidth": 3350,
     "figures": {}, "fits": {"inference": 34}},
    {"slug": "l40s", "name": "NVIDIA L40S", "vendor": "NVIDIA", "memory_gb": 48, "bandwidth": 864,
     "figures": {}, "fits": {"inference": 20}},
]

MARKET_LIST = [
    {"gpu_model": "h100-sxm", "market_open": True, "best_bid": usd("2.70"), "best_ask": usd("2.88"),
     "last_trade": {"price": usd("2.85"), "gpus": 2, "time": "2026-12-01T20:00:00Z"}, "gpus_on_offer": 1008},
    {"gpu_model": "l40s", "market_open": True, "best_bid": None, "best_ask": None, "last_trade": None,
     "gpus_on_offer": 0},
]

# The public lists come page by page, as every list of the API.
GPUS = {"items": GPU_LIST, "next_cursor": None}
MARKETS = {"items": MARKET_LIST, "next_cursor": None}

def offer(gpus: int, reliability: str | None) -> dict:
    return {"gpus": gpus, "reliability": reliability, "reliability_uptime": reliability,
            "reliability_delivery": reliability}


BOOK = {"gpu_model": "h100-sxm", "min_reliability": None,
        "asks": [{"price": usd("2.88"), "gpus": 8, "offers": [offer(8, "0.995")], "more_offers": 0},
                 {"price": usd("3.10"), "gpus": 4, "offers": [offer(4, None)], "more_offers": 2}],
        "bids": [{"price": usd("2.70"), "gpus": 2}]}

QUOTE = {"gpu_model": "h100-sxm", "gpus": 2, "hours": 5, "price": usd("2.88"), "per_hour_usd": usd("5.76"),
         "total_usd": usd("28.80"), "per_hour": eur("5.30"), "total": eur("26.50"), "covers_first_hour": True}

BID_OPEN = {"id": 31, "gpu_model": "h100-sxm", "gpus": 1, "max_price": usd("2.50"), "hours": None,
            "region": "", "time_in_force": "bid", "state": "open", "cancel_reason": "",
            "expires_at": None, "created_at": "2026-12-01T21:00:00Z", "rental_id": None}

RENTAL_RUNNING = {
    "id": 7, "gpu_model": "h100-sxm", "gpus": 1, "price": usd("2.88"), "hours": 3, "state": "running",
    "started_at": "2026-12-01T21:00:00Z", "paid_through": "2026-12-01T22:00:00Z", "ended_at": None,
    "end_reason": "", "cost_so_far": eur("2.65"),
    "connection": {"host": "gpu1.example.com", "port": 22, "username": "evx7",
                   "ssh_command": "ssh -p 22 evx7@gpu1.example.com"},
}

RENTAL_STOPPED = {**RENTAL_RUNNING, "state": "ended", "ended_at": "2026-12-01T21:20:00Z",
                  "end_reason": "stopped_by_buyer", "connection": None}

BOUGHT = {"bid": {**BID_OPEN, "id": 30, "time_in_force": "buy_now", "state": "filled",
                  "max_price": usd("2.90"), "hours": 3, "rental_id": 7},
          "rental": RENTAL_RUNNING}

NOT_FILLED = {"bid": {**BID_OPEN, "id": 32, "time_in_force": "buy_now", "state": "cancelled",
                      "cancel_reason": "not_filled"},
              "rental": None}

WALLET = {"currency": "EUR", "balance": eur("97.35"), "burn_rate": eur("2.65"), "burn_rate_usd": usd("2.88"),
          "runway_hours": 36}

HISTORY = {"items": [
    {"id": 12, "time": "2026-12-01T21:00:00Z", "description": "Rental 7, hour 1", "amount": eur("-2.65"),
     "balance_after": eur("97.35")},
    {"id": 11, "time": "2026-12-01T20:00:00Z", "description": "Top-up", "amount": eur("100.00"),
     "balance_after": eur("100.00")},
], "next_cursor": "MTE"}

SERVERS = {"items": [
    {"id": 3, "name": "lisbon-1", "gpu_model": "h100-sxm", "gpu_count": 8, "gpus_rented": 2,
     "region": "europe", "status": "active", "host": "gpu1.example.com", "ssh_port": 22, "city": "Lisbon",
     "cpu_cores": 96, "ram_gb": 1024, "disk_gb": 8000, "network_gbps": 100},
], "next_cursor": None}

OFFER = {"id": 41, "server_id": 3, "gpu_model": "h100-sxm", "gpus_offered": 4, "price": usd("3.10"),
         "state": "active", "created_at": "2026-12-01T21:00:00Z",
         "book_place": {"best_ask": usd("2.88"), "gpus_cheaper": 12, "sells_now": False}}

EARNINGS = {
    "this_month": {"month": "2026-12", "gross": usd("902.67"), "fee": usd("90.27"), "net": usd("812.40")},
    "total": {"gross": usd("11371.73"), "fee": usd("1137.17"), "net": usd("10234.56")},
    "months": [{"month": "2026-12", "gross": usd("902.67"), "fee": usd("90.27"), "net": usd("812.40")}],
    "available": usd("1500.00"), "payout_minimum": usd("50.00"),
    "pending_payouts": {"count": 1, "total": usd("250.00")},
}
