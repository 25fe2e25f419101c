"""Startup failures of the embedded broker are reported, not hung on."""

from __future__ import annotations

import pytest

from consumer.devchat.embedded_broker import EmbeddedBroker, free_port
from consumer.errors import EmbeddedBrokerError


def test_missing_binary_is_an_embedded_broker_error() -> None:
    """A binary path that does not exist raises EmbeddedBrokerError, not OSError."""
    with pytest.raises(EmbeddedBrokerError, match="cannot run"):
        EmbeddedBroker(binary="/nonexistent/tansu").start()


def test_binary_that_exits_at_once_is_reported() -> None:
    """A broker process that exits during startup raises instead of waiting out the timeout."""
    broker = EmbeddedBroker(binary="/bin/false", startup_timeout=10)
    with pytest.raises(EmbeddedBrokerError, match="exited during startup"):
        broker.start()
    assert not broker.running


def test_free_port_is_bindable() -> None:
    """free_port returns a port in the unprivileged range."""
    assert 1024 <= free_port() <= 65535


def test_broker_whose_storage_is_unreachable_is_reported() -> None:
    """A broker that answers ApiVersions but cannot read its storage (an S3 endpoint nobody
    serves) is not taken as started: Metadata must answer too."""
    broker = EmbeddedBroker(
        startup_timeout=4,
        storage="s3://tansu/",
        env={
            "AWS_ACCESS_KEY_ID": "x",
            "AWS_SECRET_ACCESS_KEY": "y",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT": f"http://127.0.0.1:{free_port()}",
            "AWS_ALLOW_HTTP": "true",
        },
    )
    with pytest.raises(EmbeddedBrokerError, match=r"did not answer .* \(s3 storage\)"):
        broker.start()
    assert not broker.running
