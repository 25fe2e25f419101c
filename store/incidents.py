"""The turns an incident list looks for, as SQL predicates over a `turns` row.

An operator asked about a conversation starts from the turns that went wrong or left the agent:
a hand-off to a person, a fallback, an error, a turn the plan check gated. The turn log names
each in its outcome lines (`outcomes`, jsonb), so each kind is a containment test on that
column. Each kind has a partial index of its own (`ix_turns_<kind>`, migration 0014; the
fallback's made again in 0015) holding only its turns, by (session_id, created_at): a list
filtered by one kind reads that index alone (its predicate is the query's, so no row is read
back to check it), however large the turn log. `INCIDENT`, their disjunction, is what a page
asks of one conversation's turns.

The strings are fixed SQL (no parameters), so the index predicates and the queries are the
same text; `store/schema.py` declares the indexes from `KINDS`.
"""

from __future__ import annotations

__all__ = ["INCIDENT", "KINDS"]

KINDS: dict[str, str] = {
    # A rule or the model's tool handed the conversation to a person (engine/lifecycle/
    # handoff.py): the turn's own line, with no run. A run's "handoff" line is a move to
    # another flow, not to a person.
    "handoff": """outcomes @> '[{"code": "handoff", "run_id": null}]'""",
    # The agent's fallback line went out: the speak call gave up (an agent with lifecycle
    # settings bills it as "not billed (fallback)"), or the model could not be reached and the
    # host answered without it (the turn's own "fallback" line, for every agent).
    "fallback": (
        """(outcomes @> '[{"code": "billed", "detail": "not billed (fallback)"}]' """
        """OR outcomes @> '[{"code": "fallback"}]')"""
    ),
    # An action failed, a reply was deferred, or the turn's own outcome was an error.
    "error": (
        """(outcomes @> '[{"code": "action-failed"}]' """
        """OR outcomes @> '[{"code": "deferred"}]' """
        """OR outcomes @> '[{"code": "billed", "detail": "not billed (error)"}]')"""
    ),
    # The host's plan check said the plan does not include the agent.
    "gated": """outcomes @> '[{"code": "gated"}]'""",
}

INCIDENT = "(" + " OR ".join(KINDS.values()) + ")"
