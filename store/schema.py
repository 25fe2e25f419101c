"""The tables, as SQLAlchemy Core metadata. The migrations in `migrations/` create them.

Invariants the store relies on:
- `sessions.version` only grows, by one per saved turn; `turns (session_id, version)` is unique,
  so the turn log has exactly one row per saved version.
- `turns (source_topic, source_partition, source_offset)` is unique where present: an input
  record is applied at most once, which makes replays exact.
- `turns (session_id, input_id)` is unique where present: an input the conversation already
  had (the same message id, event or start key, re-produced at any later offset) is answered
  once, however long ago (`store.input_ids` says how ids are kept).
- The turn log is partitioned by month on `created_at` (store/partitions.py), and a unique
  index of a partitioned table must hold the partition key, so these three are kept by the
  save statement rather than by an index: it writes a turn only when the session is at the
  expected version and no turn has its source record or (in its session) its input id. A
  session's saves are serialized by its version check, and a source record belongs to one
  session (records are keyed by session id), so no two saves can both pass.
- `turn_sources` holds the other records a burst turn consumed (several messages answered as
  one turn; the turn's own columns hold its last): its source and input id are unique like the
  turn's. Uniqueness across the two tables needs no index: a session's turns are saved one at
  a time under its version check, and the load before each save looks in both.
- `dead_lettered_sources (source_topic, source_partition, source_offset)` is unique: a record
  the consumer dead-lettered counts as applied for the replay check, like one in the turn log.
- `credit_ledger (session_id, charge_key)` is unique: a turn's charge is keyed by its input (the
  input id, else its source record), and written in the turn's own save statement, so a retried
  or replayed turn is never billed twice and a saved turn is never unbilled.
- `outbox.id` comes from a sequence and a session's rows are written while its row is locked,
  so ordering by id is ordering in time within a session.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    Date,
    DateTime,
    ForeignKey,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    func,
    text,
)
from sqlalchemy.dialects.postgresql import JSONB, TSVECTOR

from store.history import GIVES_ENTRIES
from store.incidents import KINDS as INCIDENT_KINDS

metadata = MetaData()

sessions = Table(
    "sessions",
    metadata,
    Column("id", Text, primary_key=True),
    Column("version", BigInteger, nullable=False),
    Column("state", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # No turn of the session is older: the earliest turn time its saves gave it (migration
    # 0023; NULL for sessions begun before). Bounds its history read to the turn log's
    # partitions from that month on (store/history.py).
    Column("turns_since", DateTime(timezone=True)),
)
# The inspector's conversation list: a keyset page by last activity (consumer/inspect).
Index("ix_sessions_updated", sessions.c.updated_at, sessions.c.id)
# The inspector's search has a trigram index on each table's searchable text
# (store/search_text.py: `INDEXES`, made by migration 0015). They are not declared here:
# alembic compares an expression index by the text PostgreSQL prints back, which differs from
# the text written, so autogenerate would report them changed on every run.

turns = Table(
    "turns",
    metadata,
    Column("id", BigInteger, Identity(always=True), nullable=False),
    Column("session_id", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("input", JSONB, nullable=False),
    Column("messages", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("schedule", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("outcomes", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("started", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("ended", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("skipped", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("llm_calls", Integer, nullable=False, server_default=text("0")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("source_topic", Text),
    Column("source_partition", Integer),
    Column("source_offset", BigInteger),
    # What a replay needs beyond the input: the engine's clock for the turn and, on rows saved
    # before migration 0022, the model's side of it (since then in `turn_recordings`).
    Column("clock_at", DateTime(timezone=True)),
    Column("model_calls", JSONB),
    Column("input_id", Text),
    # The history entries this turn gives, as the save built them (store/history.py); NULL on
    # rows saved before migration 0011, whose entries a load builds from input and messages.
    Column("history", JSONB),
    # The agent and its version that ran the turn (NULL for an agent loaded from ``AGENT``
    # that has no registry version, and on rows saved before migration 0013).
    Column("agent_id", Text),
    Column("agent_version", Integer),
    # The turn's trace (32 hex digits) when tracing was on; NULL otherwise (migration 0018).
    Column("trace_id", Text),
    # Partitioned by month on created_at (migration 0023, store/partitions.py): no index can be
    # unique across partitions unless it holds created_at, so (session_id, version), a source
    # record and a session's input id are kept unique by the save statement (store/saving.py),
    # under the session's version check, and these indexes only find them.
    postgresql_partition_by="RANGE (created_at)",
)
Index("uq_turns_id", turns.c.id, turns.c.created_at, unique=True)
Index("ix_turns_session_version", turns.c.session_id, turns.c.version)
Index("ix_turns_created_at", turns.c.created_at)
# The turns an incident list looks for (store/incidents.py), one index per kind: a hand-off,
# fallback, error or gated turn. Few turns are any of them, so a list filtered by one reads
# only those.
for _kind, _predicate in INCIDENT_KINDS.items():
    Index(
        f"ix_turns_{_kind}",
        turns.c.session_id,
        turns.c.created_at,
        postgresql_where=text(_predicate),
    )
# The turns a load's history reads (store/history.py): those that hold a message or sent one,
# so the read does not pass over the turns in between that did neither.
Index(
    "ix_turns_history",
    turns.c.session_id,
    turns.c.version,
    postgresql_where=text(GIVES_ENTRIES),
)
Index(
    "ix_turns_recorded",
    turns.c.created_at,
    postgresql_where=turns.c.model_calls.isnot(None),
)
Index(
    "ix_turns_source",
    turns.c.source_topic,
    turns.c.source_partition,
    turns.c.source_offset,
    postgresql_where=turns.c.source_topic.isnot(None),
)
Index(
    "ix_turns_input",
    turns.c.session_id,
    turns.c.input_id,
    postgresql_where=turns.c.input_id.isnot(None),
)

# The model's side of a turn (engine/recording.py), for replays, in its own row so that pruning
# it after MODEL_RECORDING_RETENTION_DAYS deletes here and rewrites no turn (migration 0022).
# Keyed like the turn; `created_at` is the turn's. Turns saved before 0022 keep theirs in
# `turns.model_calls`, which readers fall back to.
turn_recordings = Table(
    "turn_recordings",
    metadata,
    Column("session_id", Text, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("model_calls", JSONB, nullable=False),
    PrimaryKeyConstraint("session_id", "version", name="turn_recordings_pkey"),
)
Index("ix_turn_recordings_created", turn_recordings.c.created_at)

turn_sources = Table(
    "turn_sources",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    # The turn's id (no foreign key: the partitioned turn log cannot be referenced by id alone;
    # a burst turn's sources are written in its save statement and deleted with it by erase, and
    # after its month is dropped by retention, store/partitions.py).
    Column("turn_id", BigInteger, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("source_topic", Text),
    Column("source_partition", Integer),
    Column("source_offset", BigInteger),
    Column("input_id", Text),
)
Index("ix_turn_sources_turn", turn_sources.c.turn_id)
Index(
    "uq_turn_sources_source",
    turn_sources.c.source_topic,
    turn_sources.c.source_partition,
    turn_sources.c.source_offset,
    unique=True,
    postgresql_where=turn_sources.c.source_topic.isnot(None),
)
Index(
    "uq_turn_sources_input",
    turn_sources.c.session_id,
    turn_sources.c.input_id,
    unique=True,
    postgresql_where=turn_sources.c.input_id.isnot(None),
)

outbox = Table(
    "outbox",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("key", Text),
    Column("payload", JSONB, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("published_at", DateTime(timezone=True)),
    # The W3C trace context of the turn that wrote the row, sent with it whoever sends it;
    # NULL when tracing was off (migration 0018).
    Column("traceparent", Text),
    Column("tracestate", Text),
)
Index(
    "ix_outbox_unpublished",
    outbox.c.session_id,
    outbox.c.id,
    postgresql_where=outbox.c.published_at.is_(None),
)
Index("ix_outbox_unpublished_id", outbox.c.id, postgresql_where=outbox.c.published_at.is_(None))
# Deleting rows published before the retention reads only those (store/outbox.py).
Index(
    "ix_outbox_published",
    outbox.c.published_at,
    postgresql_where=outbox.c.published_at.isnot(None),
)

timers = Table(
    "timers",
    metadata,
    Column("key", Text, nullable=False),
    Column("session_id", Text, nullable=False),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # The trace context of the turn that set the timer (its schedule record's headers), which
    # the wake links to; NULL when that record carried none (migration 0018).
    Column("traceparent", Text),
    Column("tracestate", Text),
    # A timer belongs to the conversation that set it: equal keys of two sessions are two rows.
    PrimaryKeyConstraint("session_id", "key", name="timers_pkey"),
)
# In the claim's order (store/timers.py): a batch of timers due at the same instant is read
# from the index, not sorted out of all of them.
Index("ix_timers_due", timers.c.at, timers.c.session_id, timers.c.key)

# The agent's knowledge, cut into excerpts, for full-text search (store/knowledge.py).
knowledge_excerpts = Table(
    "knowledge_excerpts",
    metadata,
    Column("agent", Text, primary_key=True),
    Column("document_id", Text, primary_key=True),
    Column("position", Integer, primary_key=True),
    Column("source", Text, nullable=False),
    Column("type", Text, nullable=False),
    Column("title", Text, nullable=False),
    Column("url", Text),
    Column("text", Text, nullable=False),
    Column("search", Text, nullable=False),
    Column("tsv", TSVECTOR, Computed("to_tsvector('simple', search)", persisted=True)),
    CheckConstraint("type IN ('faq', 'kb')", name="ck_knowledge_excerpts_type"),
)
Index("ix_knowledge_excerpts_tsv", knowledge_excerpts.c.tsv, postgresql_using="gin")

# What the DLQ topic cannot carry whole (a record near the broker's size limit, which the added
# headers push past it) and outbox rows the broker can never take: kept here in full, and the
# dead letter on the topic names the row (store/dead_letters.py).
dead_letters = Table(
    "dead_letters",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("source", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("reason", Text, nullable=False),
    Column("detail", Text, nullable=False),
    Column("key", LargeBinary),
    Column("value", LargeBinary),
    Column("headers", JSONB, nullable=False, server_default=text("'[]'::jsonb")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    UniqueConstraint("source", name="uq_dead_letters_source"),
)

# The inputs of a conversation the consumer sent to the dead-letter topic, by source record,
# and the records the parser refused (`session_id` '': they may name none). A record that ran
# no turn leaves nothing in the turn log, so without this a replay after a crash (before its
# offset was committed) or a reread under a new group would run it again: answered late, after
# the inputs behind it, or dead-lettered twice. Only the source is kept, not the input id: a
# re-drive of the same input from the DLQ comes at a new offset and must run.
dead_lettered_sources = Table(
    "dead_lettered_sources",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("session_id", Text, nullable=False),
    Column("source_topic", Text, nullable=False),
    Column("source_partition", Integer, nullable=False),
    Column("source_offset", BigInteger, nullable=False),
    Column("reason", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # What the record said about its customer, bounded and escaped (consumer/turns/refused_words.py)
    Column("message", Text),
    Column("input_id", Text),
    Column("record_key", Text),
    Column("detail", Text),
)
Index(
    "uq_dead_lettered_sources_source",
    dead_lettered_sources.c.source_topic,
    dead_lettered_sources.c.source_partition,
    dead_lettered_sources.c.source_offset,
    unique=True,
)
Index(
    "ix_dead_lettered_sources_session",
    dead_lettered_sources.c.session_id,
    dead_lettered_sources.c.created_at,
)

# -- hosting: workspaces, agents as versioned data, quotas, the credit ledger (store/hosting.py)

workspaces = Table(
    "workspaces",
    metadata,
    Column("id", Text, primary_key=True),
    Column("plan", Text, nullable=False, server_default=text("'default'")),
    # Whether the plan includes the agents (the engine's plan check reads it).
    Column("agents_enabled", Boolean, nullable=False, server_default=text("true")),
    # Web searches the workspace's agents may make per UTC day; NULL: no daily limit.
    Column("web_searches_per_day", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint(
        "web_searches_per_day IS NULL OR web_searches_per_day >= 0",
        name="ck_workspaces_web_searches_per_day",
    ),
)

agents = Table(
    "agents",
    metadata,
    Column("agent_id", Text, primary_key=True),
    Column("workspace_id", Text, ForeignKey("workspaces.id"), nullable=False),
    Column("live_version", Integer),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    # A canary (consumer/canary.py): this share of new conversations runs canary_version.
    Column("canary_version", Integer),
    Column("canary_percent", SmallInteger),
    # A run map given with an activation (agents activate --migrate): see consumer/hosting.
    Column("migrate_to", Integer),
    Column("migrate_map", JSONB),
    CheckConstraint(
        "canary_percent IS NULL OR (canary_percent >= 1 AND canary_percent <= 99)",
        name="ck_agents_canary_percent",
    ),
)
Index("ix_agents_workspace", agents.c.workspace_id, agents.c.agent_id)

agent_versions = Table(
    "agent_versions",
    metadata,
    Column("agent_id", Text, ForeignKey("agents.agent_id"), nullable=False),
    Column("version", Integer, nullable=False),
    Column("document", JSONB, nullable=False),
    Column("digest", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("agent_id", "version", name="pk_agent_versions"),
)

web_search_usage = Table(
    "web_search_usage",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("day", Date, nullable=False),
    Column("searches", Integer, nullable=False),
    PrimaryKeyConstraint("workspace_id", "day", name="pk_web_search_usage"),
)

# Model turns per workspace per minute, against a plan's per-minute cap (store/model_budget.py).
workspace_model_minutes = Table(
    "workspace_model_minutes",
    metadata,
    Column("workspace_id", Text, nullable=False),
    Column("minute", DateTime(timezone=True), nullable=False),
    Column("turns", Integer, nullable=False),
    PrimaryKeyConstraint("workspace_id", "minute", name="pk_workspace_model_minutes"),
)

# One row per billed turn, written by the turn's save statement (store/saving.py).
credit_ledger = Table(
    "credit_ledger",
    metadata,
    Column("id", BigInteger, Identity(always=True), primary_key=True),
    Column("workspace_id", Text),
    Column("agent_id", Text),
    Column("agent_version", Integer),
    Column("session_id", Text, nullable=False),
    Column("turn_id", BigInteger, nullable=False),
    Column("charge_key", Text, nullable=False),
    Column("credits", Integer, nullable=False),
    Column("day", Date, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("credits > 0", name="ck_credit_ledger_credits"),
)
Index(
    "uq_credit_ledger_charge", credit_ledger.c.session_id, credit_ledger.c.charge_key, unique=True
)
Index("ix_credit_ledger_day", credit_ledger.c.workspace_id, credit_ledger.c.day)

# Which releases may run on this schema: written by every migration run (migrations/env.py,
# migrations/compatibility.py), read by an older `turnflow migrate` facing this schema. One row.
schema_compatibility = Table(
    "schema_compatibility",
    metadata,
    Column("singleton", Boolean, primary_key=True, server_default=text("true")),
    Column("revision", Text, nullable=False),
    Column("oldest_compatible", Text, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    CheckConstraint("singleton", name="ck_schema_compatibility_singleton"),
)

# Where each consumer group is in each inbound partition (store/positions.py): the next
# offset to read, everything below it done. Written after the work it covers was committed, so
# it never claims more than the database holds, even on a standby promoted after a failover.
source_positions = Table(
    "source_positions",
    metadata,
    Column("consumer_group", Text, nullable=False),
    Column("topic", Text, nullable=False),
    Column("partition", Integer, nullable=False),
    Column("next_offset", BigInteger, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("consumer_group", "topic", "partition", name="pk_source_positions"),
)

# One row per erased session id (store/erasure.py): the SHA-256 of the id, never the id, so the
# inspector and replays can say "erased" rather than "no such conversation".
erased_sessions = Table(
    "erased_sessions",
    metadata,
    Column("digest", LargeBinary, nullable=False),
    Column("erased_at", DateTime(timezone=True), nullable=False, server_default=func.now()),
    PrimaryKeyConstraint("digest", name="erased_sessions_pkey"),
)

# The service's data tables (the tests empty them between tests); not schema_compatibility,
# which describes the schema rather than holding data.
TABLE_NAMES = (
    "sessions", "turns", "turn_sources", "outbox", "timers", "knowledge_excerpts", "dead_letters",
    "dead_lettered_sources", "workspaces", "agents", "agent_versions", "web_search_usage",
    "credit_ledger", "workspace_model_minutes", "source_positions", "erased_sessions",
    "turn_recordings",
)
