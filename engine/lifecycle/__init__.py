"""The hosted conversational-agent lifecycle, on top of the turn pipeline.

Everything here is opt-in through ``Agent(lifecycle=...)``: an agent without it runs exactly
the engine's eight phases. The phases call into this package at fixed points (Ingest: hand-off
rules; Speak: prompt blocks, built-in tools, budgets, the reply check; Settle: hand-offs and
tasks; Return: outcome, memory and provenance), and nothing here is imported by the core
modules except through those calls. The settings live in ``settings``, the per-turn working
memory in ``turn``, the result carriers in ``results``.
"""
