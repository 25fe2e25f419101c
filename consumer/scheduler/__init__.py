"""The scheduler service (``turnflow schedule``): timers from ``outbound.schedule`` kept in
PostgreSQL, and due timers sent back to ``inbound.turns`` as wake inputs.

``intake`` turns schedule records into timer rows; ``service`` runs the intake and the firing
loop. It shares the service plumbing of ``consumer`` (settings, metrics, health, the producer)
and imports nothing of the consume service itself.
"""
