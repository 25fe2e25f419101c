"""A missing server skips a test on a developer's machine and fails it in CI."""

from __future__ import annotations

import pytest

from tests.fixtures.servers import servers_required, servers_unavailable


def test_missing_server_skips_when_not_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TURNFLOW_REQUIRE_SERVERS", raising=False)
    assert not servers_required()
    with pytest.raises(pytest.skip.Exception, match="no broker: refused"):
        servers_unavailable("no broker: refused")


def test_missing_server_fails_when_required(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TURNFLOW_REQUIRE_SERVERS", "1")
    assert servers_required()
    with pytest.raises(pytest.fail.Exception, match=r"no broker: refused \(TURNFLOW_REQUIRE"):
        servers_unavailable("no broker: refused")
