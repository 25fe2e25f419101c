"""Turning the operator's `DATABASE_URL` into what SQLAlchemy's asyncpg dialect accepts.

Operators write plain `postgresql://user@host:port/db` (libpq style, `sslmode=` included); the
driver is the code's business, so the conversion lives here and nowhere else.

A highly available database is named the libpq way, several hosts in one URL with
`target_session_attrs` choosing the primary:
`postgresql://user@db-a:5432,db-b:5432/db?target_session_attrs=read-write`. SQLAlchemy's URL
parser reads one host only; its asyncpg dialect takes several as repeated `host=` query
parameters instead, so `async_url` moves the host list there, and `plain_url` moves it back
for asyncpg's own `connect`, psql and pgbench, which read the libpq form. asyncpg tries the
hosts in order and keeps the first that matches `target_session_attrs` (`read-write` or
`primary`: the one that accepts writes), so after a failover a new connection reaches the
promoted server without any configuration change.
"""

from __future__ import annotations

from urllib.parse import quote, unquote

from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError

_PLAIN_SCHEMES = {"postgres", "postgresql", "postgresql+asyncpg", "postgresql+psycopg2"}


def _parse(url: str | URL) -> URL:
    """`url` as SQLAlchemy's URL, the hosts of a libpq multi-host URL as `host=` parameters.
    Raises ValueError with a one-line reason for anything that is not a PostgreSQL URL."""
    if isinstance(url, URL):
        parsed = url
    else:
        try:
            parsed = make_url(_hosts_to_query(url))
        except (ArgumentError, ValueError) as exc:
            raise ValueError(f"not a usable database URL: {exc}") from None
    if parsed.drivername not in _PLAIN_SCHEMES:
        raise ValueError(f"not a PostgreSQL URL: scheme {parsed.drivername!r}")
    return parsed


def _hosts_to_query(url: str) -> str:
    """A libpq URL with a comma-separated host list, rewritten with the hosts as repeated
    `host=` query parameters (the form SQLAlchemy's asyncpg dialect reads); any other string
    unchanged."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    cut = min((i for i in (rest.find("/"), rest.find("?")) if i >= 0), default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    userinfo, at, hostlist = authority.rpartition("@")
    if "," not in hostlist:
        return url
    hosts = hostlist.split(",")
    if any(not host for host in hosts):
        raise ValueError("not a usable database URL: an empty host in the host list")
    path, _, query = tail.partition("?")
    extra = "&".join(f"host={quote(host, safe=':[]')}" for host in hosts)
    query = f"{extra}&{query}" if query else extra
    return f"{scheme}://{userinfo}{at}{path or '/'}?{query}"


def async_url(url: str | URL) -> URL:
    """Return `url` with the asyncpg driver, translating libpq's `sslmode` to asyncpg's `ssl`
    and a multi-host list to the dialect's `host=` parameters."""
    parsed = _parse(url)
    query = dict(parsed.query)
    if "sslmode" in query:
        query["ssl"] = query.pop("sslmode")
    return parsed.set(drivername="postgresql+asyncpg", query=query)


def hosts(url: str | URL) -> list[str]:
    """The `host[:port]` entries `url` names, in the order a connection tries them."""
    parsed = _parse(url)
    listed = parsed.query.get("host")
    if listed is None:
        if parsed.host is None:
            return []
        return [parsed.host if parsed.port is None else f"{parsed.host}:{parsed.port}"]
    return [listed] if isinstance(listed, str) else list(listed)


def plain_url(url: str | URL) -> str:
    """Return `url` as a libpq-style `postgresql://` string (for asyncpg, psql and pgbench),
    several hosts as libpq's comma-separated list."""
    parsed = _parse(url).set(drivername="postgresql")
    listed = parsed.query.get("host")
    if listed is None:
        return parsed.render_as_string(hide_password=False)
    entries = [listed] if isinstance(listed, str) else list(listed)
    query = {k: v for k, v in parsed.query.items() if k != "host"}
    bare = parsed.set(host=None, port=None, query=query).render_as_string(hide_password=False)
    # bare: postgresql://[user[:password]@]/db[?query]; the host list goes before the path.
    scheme, _, rest = bare.partition("://")
    authority, slash, path = rest.partition("/")
    hostlist = ",".join(unquote(entry) for entry in entries)
    return f"{scheme}://{authority}{hostlist}{slash}{path}"
