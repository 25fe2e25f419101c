"""Alembic environment and versions for the turnflow schema; run through `store.migrate`."""
