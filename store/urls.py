"""Turning the operator's `DATABASE_URL` into what SQLAlchemy's asyncpg dialect accepts.

Operators write plain `postgresql://user@host:port/db` (libpq style, `sslmode=` included); the
driver is the code's business, so the conversion lives here and nowhere else.
"""

from __future__ import annotations

from sqlalchemy.engine import URL, make_url

_PLAIN_SCHEMES = {"postgres", "postgresql", "postgresql+asyncpg", "postgresql+psycopg2"}


def async_url(url: str | URL) -> URL:
    """Return `url` with the asyncpg driver, translating libpq's `sslmode` to asyncpg's `ssl`."""
    parsed = make_url(url) if isinstance(url, str) else url
    if parsed.drivername not in _PLAIN_SCHEMES:
        raise ValueError(f"not a PostgreSQL URL: scheme {parsed.drivername!r}")
    query = dict(parsed.query)
    if "sslmode" in query:
        query["ssl"] = query.pop("sslmode")
    return parsed.set(drivername="postgresql+asyncpg", query=query)


def plain_url(url: str | URL) -> str:
    """Return `url` as a libpq-style `postgresql://` string (for asyncpg, psql and pgbench)."""
    parsed = make_url(url) if isinstance(url, str) else url
    return parsed.set(drivername="postgresql").render_as_string(hide_password=False)
