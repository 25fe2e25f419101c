"""Shared test configuration: the server fixtures live in tests/fixtures/."""

pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.broker"]
