"""Prometheus metrics of the consumer, the scheduler and the relay, defined in one registry.

Every name starts with ``turnflow_``. The Grafana dashboards under ``helm/`` may query only names
defined here (a test checks it), so renaming one means changing the dashboards in the same commit.
The engine does not import this module: the consumer feeds it from ``TurnResult`` values and from
the provider hooks.

Each process serves only its own families (``exports_for``): a scheduler that exported the
consumer's counters at 0 would make every dashboard sum count it twice and read as a consumer
that does nothing. Counters carry no ``_created`` series. Labelled counters whose label values
are known in advance (DLQ reasons, turn outcomes, input kinds, ...) get every series at 0 when
this module loads, so ``increase(...[5m]) > 0`` sees the first increment of each value instead
of a series that appears already at 1.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any, get_args

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
)
from prometheus_client.registry import RestrictedRegistry

from consumer.inputs import INPUT_KINDS, RejectReason

disable_created_metrics()  # type: ignore[no-untyped-call]  # prometheus_client leaves it unannotated

REGISTRY = CollectorRegistry(auto_describe=True)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)

# --- consumer -------------------------------------------------------------------------------
TURNS = Counter(
    "turnflow_turns_total", "Turns run, by input kind.", ["kind"], registry=REGISTRY
)
LLM_CALLS_PER_TURN = Histogram(
    "turnflow_llm_calls_per_turn",
    "Model calls spent by one turn.",
    buckets=(0, 1, 2, 3, 4),
    registry=REGISTRY,
)
INPUTS_PER_TURN = Histogram(
    "turnflow_inputs_per_turn",
    "Inputs one turn answered: 1, or the messages of a burst answered together.",
    buckets=(1, 2, 3, 4, 6, 8, 12, 20),
    registry=REGISTRY,
)
CUSTOMER_MESSAGES = Counter(
    "turnflow_customer_messages_total",
    "Customer messages answered by turns (each message of a burst counts).",
    registry=REGISTRY,
)
MESSAGE_TURN_LLM_CALLS = Counter(
    "turnflow_message_turn_llm_calls_total",
    "Model calls spent by turns that answered customer messages; divided by "
    "turnflow_customer_messages_total it is the model calls per customer message.",
    registry=REGISTRY,
)
LLM_CALLS = Counter(
    "turnflow_llm_calls_total",
    "Model calls, by call kind (understand, speak, compact).",
    ["call"],
    registry=REGISTRY,
)
OUTCOMES = Counter(
    "turnflow_outcomes_total", "Outcome lines, by outcome code.", ["code"], registry=REGISTRY
)
TURN_OUTCOMES = Counter(
    "turnflow_turn_outcomes_total",
    "Turn-level outcomes (answered, goal_completed, task_completed, handoff, fallback, error, "
    "gated).",
    ["outcome"],
    registry=REGISTRY,
)
AGENT_VERSION_ROUTES = Counter(
    "turnflow_agent_version_routes_total",
    "Registry agent turns by the version they ran on: live (the live version), canary (the "
    "agent's canary version), pinned (an older version the conversation's runs started on), "
    "pin_lost (the pinned version was deleted or no longer builds: the runs were ended).",
    ["route"],
    registry=REGISTRY,
)
AGENT_VERSION_OUTCOMES = Counter(
    "turnflow_agent_version_outcomes_total",
    "Registry agent turn outcomes by the role of the version that ran them (live, canary, "
    "pinned, pin_lost): a canary compared with live. Roles, not version numbers or agents, so "
    "the series stay bounded.",
    ["route", "outcome"],
    registry=REGISTRY,
)
AGENT_VERSION_CREDITS = Counter(
    "turnflow_agent_version_credits_total",
    "AI credits billed by registry agent turns, by the role of the version that ran them.",
    ["route"],
    registry=REGISTRY,
)
AI_CREDITS = Counter(
    "turnflow_ai_credits_total",
    "AI credits billed by lifecycle agents' turns, by turn outcome.",
    ["outcome"],
    registry=REGISTRY,
)
TURN_DURATION = Histogram(
    "turnflow_turn_duration_seconds",
    "Wall time of one input: load, turn, save and publish.",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_CALL_DURATION = Histogram(
    "turnflow_model_call_duration_seconds",
    "Wall time of one model call, by call kind and provider.",
    ["call", "provider"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
MODEL_TOKENS = Counter(
    "turnflow_model_tokens_total",
    "Tokens reported by the model API, by call kind and direction (input, output).",
    ["call", "direction"],
    registry=REGISTRY,
)
MODEL_ERRORS = Counter(
    "turnflow_model_errors_total",
    "Failed model calls, by call kind and error kind (retryable, fatal).",
    ["call", "kind"],
    registry=REGISTRY,
)
VERSION_CONFLICTS = Counter(
    "turnflow_version_conflicts_total",
    "Saves that lost an optimistic version race and were rerun.",
    registry=REGISTRY,
)
HISTORY_LOADS = Counter(
    "turnflow_history_loads_total",
    "Turns of conversations with history, by where the history came from: held (the window "
    "this consumer kept since the conversation's last turn; the load left it out) or loaded "
    "(read from the turn log: the first turn here since start-up, a rebalance or an eviction, "
    "or the conversation moved on elsewhere).",
    ["history"],
    registry=REGISTRY,
)
HISTORY_WINDOWS = Gauge(
    "turnflow_history_windows",
    "Conversations whose history window this consumer keeps (at most HISTORY_CACHE_SESSIONS).",
    registry=REGISTRY,
)
DLQ = Counter(
    "turnflow_dlq_total", "Records sent to the dead-letter topic, by reason.", ["reason"],
    registry=REGISTRY,
)
REPLAYS_SKIPPED = Counter(
    "turnflow_replays_skipped_total",
    "Records already in the turn log, skipped after re-flushing the session's outbox.",
    registry=REGISTRY,
)
INPUTS_OFF_PARTITION = Counter(
    "turnflow_inputs_off_partition_total",
    "Inputs that arrived on another partition than the one their session id hashes to "
    "(murmur2, as the scheduler's wakes): a producer with another partitioner or key.",
    registry=REGISTRY,
)
INPUT_RETRIES = Counter(
    "turnflow_input_retries_total",
    "Inputs retried after a retryable failure (the model's, or an unexpected one).",
    registry=REGISTRY,
)
MODEL_WAITING = Gauge(
    "turnflow_model_waiting_conversations",
    "Conversations holding an input that is being retried because the model could not answer it.",
    registry=REGISTRY,
)
MODEL_FALLBACKS = Counter(
    "turnflow_model_fallbacks_total",
    "Messages answered with the fallback message because the model could not answer them, by "
    "reason (model-unavailable, unusable-reply).",
    ["reason"],
    registry=REGISTRY,
)
IN_FLIGHT = Gauge(
    "turnflow_in_flight_sessions",
    "Engine turns running (their model calls; not the load before or the save after).",
    registry=REGISTRY,
)
CONSUMER_LAG = Gauge(
    "turnflow_consumer_lag",
    "Records between the committed offset and the partition's end, by partition.",
    ["topic", "partition"],
    registry=REGISTRY,
)
PAUSED_PARTITIONS = Gauge(
    "turnflow_consumer_paused_partitions",
    "Owned partitions not being fetched because their unfinished records reached their share.",
    registry=REGISTRY,
)
LOOKAHEAD_RECORDS = Gauge(
    "turnflow_lookahead_records",
    "Fetched records not yet finished (queued, waiting for a turn slot, or running), the "
    "look-ahead bounded by MAX_BUFFERED_RECORDS.",
    registry=REGISTRY,
)
LOOKAHEAD_BYTES = Gauge(
    "turnflow_lookahead_bytes",
    "Key and value bytes of the fetched records not yet finished, bounded by "
    "MAX_BUFFERED_BYTES.",
    registry=REGISTRY,
)
PASSED_OVER_RECORDS = Gauge(
    "turnflow_lookahead_passed_over_records",
    "Records of full partitions passed over (not held, read again once there is room), "
    "bounded by MAX_PASSED_OVER; the partitions' commits wait at the lowest of them.",
    registry=REGISTRY,
)
PASSED_OVER_AGE = Gauge(
    "turnflow_lookahead_passed_over_age_seconds",
    "Age (by its record's timestamp) of the oldest record passed over, 0 with none.",
    registry=REGISTRY,
)
REREAD_RECORDS = Counter(
    "turnflow_lookahead_reread_records_total",
    "Records read again while reading what was passed over that had been held before: the "
    "broker reads passing over costs.",
    registry=REGISTRY,
)
TURNS_WAITING = Gauge(
    "turnflow_turns_waiting_for_slot",
    "Loaded turns waiting for a turn slot, by their workspace's plan (plans named in "
    "PLAN_WEIGHTS or PLAN_MAX_IN_FLIGHT, default, other, none).",
    ["plan"],
    registry=REGISTRY,
)
SLOT_WAIT = Histogram(
    "turnflow_turn_slot_wait_seconds",
    "How long a loaded turn waited for its turn slot, by its workspace's plan.",
    ["plan"],
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)
PLAN_CAP_WAITS = Counter(
    "turnflow_plan_cap_waits_total",
    "Turns that waited because their workspace already ran its plan's PLAN_MAX_IN_FLIGHT "
    "turns in this consumer, by plan.",
    ["plan"],
    registry=REGISTRY,
)
PLAN_MINUTE_WAITS = Counter(
    "turnflow_plan_minute_waits_total",
    "Turns that waited for the next minute because their workspace had run its plan's "
    "PLAN_MODEL_TURNS_PER_MINUTE across all consumers, by plan.",
    ["plan"],
    registry=REGISTRY,
)
MODEL_BACKOFF_ACTIVE = Gauge(
    "turnflow_model_backoff_active",
    "1 while the consumer holds every turn back because the model provider answered 429 or "
    "asked to retry later (one shared back-off), else 0.",
    registry=REGISTRY,
)
MODEL_BACKOFFS = Counter(
    "turnflow_model_backoffs_total",
    "Times a rate-limit answer of the model provider started or lengthened the shared back-off.",
    registry=REGISTRY,
)
OUTBOX_BACKLOG = Gauge(
    "turnflow_outbox_backlog", "Outbox rows committed but not yet published.", registry=REGISTRY
)
OUTBOX_PUBLISHED = Counter(
    "turnflow_outbox_published_total",
    "Outbox rows published, by topic.",
    ["topic"],
    registry=REGISTRY,
)
INPUT_TO_OUTBOUND = Histogram(
    "turnflow_input_to_outbound_seconds",
    "From the inbound record's timestamp to its replies' publish ack.",
    buckets=_LATENCY_BUCKETS,
    registry=REGISTRY,
)

BUILD_INFO = Gauge(
    "turnflow_build_info",
    "1 per process: the turnflow version, the agent it runs (empty for the scheduler and the "
    "relay) and which command it is.",
    ["version", "agent", "process"],
    registry=REGISTRY,
)

GC_SECONDS = Counter(
    "turnflow_gc_seconds_total",
    "Time spent in the garbage collector's collections, by generation (0 youngest, 2 full).",
    ["generation"],
    registry=REGISTRY,
)

# --- the consumer's database -------------------------------------------------------------------
DATABASE_TIMELINE = Gauge(
    "turnflow_database_timeline",
    "The PostgreSQL timeline the consumer's connections are bound to (a promoted standby starts "
    "a new one: it changes at a failover, and the consumer restarts onto it).",
    registry=REGISTRY,
)
DATABASE_READ_ONLY = Counter(
    "turnflow_database_read_only_total",
    "Inputs retried because the database refused a write as read-only (SQLSTATE 25006: a "
    "standby, or a primary being switched over).",
    registry=REGISTRY,
)
POSITIONS_REREAD = Counter(
    "turnflow_positions_reread_records_total",
    "Records read again at an assignment because the database's position for the partition was "
    "behind Kafka's committed offset (a failover lost the last commits; those inputs run "
    "again, their replies under the same keys).",
    registry=REGISTRY,
)
DATABASE_POOL_SIZE = Gauge(
    "turnflow_database_pool_size",
    "Connections the consumer's database pool holds at most.",
    registry=REGISTRY,
)
DATABASE_POOL_IN_USE = Gauge(
    "turnflow_database_pool_in_use",
    "Connections of the consumer's database pool checked out now (at the size: turns wait for "
    "one).",
    registry=REGISTRY,
)

# --- scheduler ------------------------------------------------------------------------------
TIMERS_PENDING = Gauge(
    "turnflow_timers_pending", "Timers stored and not yet fired.", registry=REGISTRY
)
TIMER_FIRE_DELAY = Histogram(
    "turnflow_timer_fire_delay_seconds",
    "How late a timer fired, measured against the database clock.",
    buckets=(0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300),
    registry=REGISTRY,
)
WAKES_EMITTED = Counter(
    "turnflow_wakes_emitted_total", "Wake inputs produced to inbound.turns.", registry=REGISTRY
)
TIMERS_SCHEDULED = Counter(
    "turnflow_timers_scheduled_total",
    "Schedule entries stored, by action (upsert, replace).",
    ["action"],
    registry=REGISTRY,
)

SCHEDULE_REFUSED = Counter(
    "turnflow_schedule_refused_total",
    "Schedule records refused (skipped, their offsets committed), by reason.",
    ["reason"],
    registry=REGISTRY,
)


# --- which process serves what, and the label values known in advance ------------------------

_SHARED = (BUILD_INFO, GC_SECONDS)
_OUTBOX = (OUTBOX_BACKLOG, OUTBOX_PUBLISHED)
_CONSUMER = (
    TURNS, LLM_CALLS_PER_TURN, INPUTS_PER_TURN, CUSTOMER_MESSAGES, MESSAGE_TURN_LLM_CALLS,
    LLM_CALLS, OUTCOMES, TURN_OUTCOMES, AI_CREDITS, TURN_DURATION,
    MODEL_CALL_DURATION, MODEL_TOKENS, MODEL_ERRORS, VERSION_CONFLICTS, DLQ, REPLAYS_SKIPPED,
    INPUT_RETRIES, IN_FLIGHT, CONSUMER_LAG, PAUSED_PARTITIONS, INPUT_TO_OUTBOUND,
    MODEL_WAITING, MODEL_FALLBACKS, INPUTS_OFF_PARTITION, HISTORY_LOADS, HISTORY_WINDOWS,
    LOOKAHEAD_RECORDS, LOOKAHEAD_BYTES, PASSED_OVER_RECORDS, PASSED_OVER_AGE, REREAD_RECORDS,
    TURNS_WAITING, SLOT_WAIT, PLAN_CAP_WAITS,
    PLAN_MINUTE_WAITS, MODEL_BACKOFF_ACTIVE, MODEL_BACKOFFS,
    AGENT_VERSION_ROUTES, AGENT_VERSION_OUTCOMES, AGENT_VERSION_CREDITS,
    DATABASE_TIMELINE, DATABASE_READ_ONLY, POSITIONS_REREAD, DATABASE_POOL_SIZE,
    DATABASE_POOL_IN_USE,
)
_SCHEDULER = (TIMERS_PENDING, TIMER_FIRE_DELAY, WAKES_EMITTED, TIMERS_SCHEDULED, SCHEDULE_REFUSED)
PROCESS_FAMILIES: dict[str, tuple[Any, ...]] = {
    "consume": _SHARED + _CONSUMER + _OUTBOX,  # the consumer runs an outbox relay too
    "schedule": _SHARED + _SCHEDULER,
    "relay": _SHARED + _OUTBOX,
}

TURN_OUTCOME_VALUES = (
    "answered", "goal_completed", "task_completed", "handoff", "fallback", "error", "gated"
)
MODEL_CALLS = ("understand", "speak", "compact", "skills", "vision")
# The reasons consumer/turns/decisions.py dead-letters with, beside the parser's refusals.
DECISION_DLQ_REASONS = (
    "invalid-request", "provider-fatal", "retries-exhausted", "version-conflicts", "turn-failed",
)
DLQ_REASONS = tuple(get_args(RejectReason)) + DECISION_DLQ_REASONS
FALLBACK_REASONS = ("model-unavailable", "unusable-reply", "budget-spent")
HISTORY_SOURCES = ("held", "loaded")
AGENT_VERSION_ROUTE_VALUES = ("live", "canary", "pinned", "pin_lost")
# The reason codes ScheduleRecordError documents for a malformed schedule record.
SCHEDULE_REFUSED_REASONS = ("empty", "not-json", "not-an-object", "invalid-text", "invalid-field")


def _precreate() -> None:
    for outcome in TURN_OUTCOME_VALUES:
        TURN_OUTCOMES.labels(outcome=outcome)
        AI_CREDITS.labels(outcome=outcome)
    for reason in SCHEDULE_REFUSED_REASONS:
        SCHEDULE_REFUSED.labels(reason=reason)
    for reason in DLQ_REASONS:
        DLQ.labels(reason=reason)
    for kind in INPUT_KINDS:
        TURNS.labels(kind=kind)
    for reason in FALLBACK_REASONS:
        MODEL_FALLBACKS.labels(reason=reason)
    for call in MODEL_CALLS:
        LLM_CALLS.labels(call=call)
        for error_kind in ("retryable", "fatal"):
            MODEL_ERRORS.labels(call=call, kind=error_kind)
        for direction in ("input", "output"):
            MODEL_TOKENS.labels(call=call, direction=direction)
    for action in ("upsert", "replace"):
        TIMERS_SCHEDULED.labels(action=action)
    for generation in ("0", "1", "2"):
        GC_SECONDS.labels(generation=generation)
    for source in HISTORY_SOURCES:
        HISTORY_LOADS.labels(history=source)
    for route in AGENT_VERSION_ROUTE_VALUES:
        AGENT_VERSION_ROUTES.labels(route=route)
        AGENT_VERSION_CREDITS.labels(route=route)
        for outcome in TURN_OUTCOME_VALUES:
            AGENT_VERSION_OUTCOMES.labels(route=route, outcome=outcome)


_precreate()


def precreate_topics(topics: Iterable[str]) -> None:
    """Series at 0 for the topics this process publishes to, known once settings are read."""
    for topic in topics:
        OUTBOX_PUBLISHED.labels(topic=topic)


def set_build_info(process: str, agent: str = "") -> None:
    """``turnflow_build_info{version, agent, process} 1`` for this process."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        current = version("turnflow")
    except PackageNotFoundError:  # pragma: no cover - run from a tree that is not installed
        current = "unknown"
    BUILD_INFO.labels(version=current, agent=agent, process=process).set(1)


def watch_database(store: Any) -> None:
    """The consumer's database gauges, read from ``store`` at each scrape: the timeline its
    connections are bound to (``Store.timeline``, hexadecimal; NaN before one is known) and
    its pool's size and connections in use (the consumer's pool has no overflow, so its size is
    its cap). A store without them (a test's double) sets nothing."""
    def timeline() -> float:
        bound = getattr(store, "timeline", None)
        return float(int(bound, 16)) if isinstance(bound, str) and bound else float("nan")

    DATABASE_TIMELINE.set_function(timeline)
    engine = getattr(store, "engine", None)
    pool = getattr(getattr(engine, "sync_engine", None), "pool", None)
    if hasattr(pool, "size") and hasattr(pool, "checkedout"):
        DATABASE_POOL_SIZE.set_function(lambda: float(pool.size()))
        DATABASE_POOL_IN_USE.set_function(lambda: float(pool.checkedout()))


def _sample_names(family: Any) -> set[str]:
    name = family._name
    kind = family._type
    if kind == "counter":
        return {f"{name}_total"}
    if kind == "histogram":
        return {f"{name}{suffix}" for suffix in ("_bucket", "_sum", "_count")}
    return {name}


def exports_for(*processes: str) -> RestrictedRegistry:
    """The view of ``REGISTRY`` a process serves: only the families of ``processes``."""
    names: set[str] = set()
    for process in processes:
        for family in PROCESS_FAMILIES[process]:
            names |= _sample_names(family)
    return REGISTRY.restricted_registry(names)


def exported_names() -> set[str]:
    """Every sample name some process can expose (with _total/_bucket/... suffixes)."""
    names: set[str] = set()
    for metric in REGISTRY.collect():
        names.add(metric.name)
        if metric.type == "counter":
            names.add(f"{metric.name}_total")
        elif metric.type == "histogram":
            names.update(f"{metric.name}{s}" for s in ("_bucket", "_sum", "_count"))
    return names


@functools.lru_cache(maxsize=1024)
def child(metric: Any, *values: str) -> Any:
    """``metric.labels(*values)``, kept per values: the consumer counts by kind, outcome and
    model call on every turn, and a label lookup costs more than the count. Only for metrics
    whose children are never removed (the lag gauge's are) and whose label values come from a
    small set (kinds, outcome codes, schema and provider names)."""
    return metric.labels(*values)
