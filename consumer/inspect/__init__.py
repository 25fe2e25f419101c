"""Seeing inside conversations: the read side behind ``turnflow inspect``, ``turnflow ui`` and
``turnflow graph``.

``reading`` holds the queries (read-only transactions, paged), ``view`` the turn-by-turn view
model built from their rows; the terminal (``terminal``), the JSON of ``--json`` and the web
pages (``web``) are views of that one model, so they cannot disagree. ``diagram`` draws an
agent's flows with the path a conversation took.
"""
