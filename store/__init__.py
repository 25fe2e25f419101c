"""Persistence of sessions, the turn log, the outbox and timers (PostgreSQL)."""
