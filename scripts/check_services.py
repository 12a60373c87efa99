"""Fail early, and clearly, when the PostgreSQL or Redis that the tests need does not answer."""

import os
import sys

import psycopg
import redis

DATABASE = os.environ.get("TEST_DATABASE_URL", "postgres://postgres@127.0.0.1:5432/everxcloud")
REDIS = os.environ.get("TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


def main() -> int:
    failures = []
    maintenance = DATABASE.rsplit("/", 1)[0] + "/postgres"
    try:
        with psycopg.connect(maintenance, connect_timeout=5) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            print(f"PostgreSQL {version} answers.")
    except psycopg.Error as error:
        failures.append(f"PostgreSQL does not answer at {maintenance}: {error}")
    try:
        client = redis.Redis.from_url(REDIS, socket_connect_timeout=5)
        client.ping()
        print(f"Redis {client.info('server')['redis_version']} answers.")
    except redis.RedisError as error:
        failures.append(f"Redis does not answer at {REDIS}: {error}")
    for failure in failures:
        print(failure, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
