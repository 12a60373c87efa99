"""Django's Redis cache, with one redis-py client per connection pool instead of a new one for
every cache operation: building a client (its table of response callbacks) cost more than the
round trip it makes, and every page hit, rate limit and heartbeat pays a few of those. A
redis-py client holds no state of its own between commands (its pool does), so one per pool
serves every thread of the process; after a fork the pool itself starts afresh."""

from django.core.cache.backends.redis import RedisCache as DjangoRedisCache
from django.core.cache.backends.redis import RedisCacheClient


class ReusedClientRedisCacheClient(RedisCacheClient):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._clients = {}

    def get_client(self, key=None, *, write=False):
        pool = self._get_connection_pool(write)
        client = self._clients.get(pool)
        if client is None:
            client = self._clients[pool] = self._client(connection_pool=pool)
        return client


class RedisCache(DjangoRedisCache):
    def __init__(self, server, params) -> None:
        super().__init__(server, params)
        self._class = ReusedClientRedisCacheClient
