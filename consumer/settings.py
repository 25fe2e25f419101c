"""Configuration of the services, read from the environment (pydantic-settings).

Every field maps to the upper-case environment variable of the same name (``max_in_flight`` ->
``MAX_IN_FLIGHT``); the README's configuration table is generated from ``env_table()`` so the two
never drift. Secrets are ``SecretStr``: they never reach reprs, logs or exceptions. A secret may
also come from a mounted file: ``KAFKA_SASL_PASSWORD_FILE`` names a file whose content is used.
"""

from __future__ import annotations

import ssl
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, ValidationInfo, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

__all__ = [
    "DEFAULT_METRICS_PORTS", "MAX_RETENTION_DAYS", "Settings", "env_table", "plan_numbers",
]

DEFAULT_METRICS_PORTS = {"consume": 9100, "schedule": 9200, "relay": 9300}
"""Each long-running command's metrics port when ``METRICS_PORT`` is unset: distinct, so a
consumer, a scheduler and a relay started on one machine do not fight over one port. The
consumer's workers (``--workers N``) take 9100 to 9100+N-1, well below the scheduler's."""

MAX_RETENTION_DAYS = 36_500
"""The longest retention a setting or ``turnflow prune`` takes (a hundred years): far past any
real policy, and well inside what ``timedelta`` and PostgreSQL intervals hold, so ``1e10`` or
``inf`` is refused as a bad value instead of overflowing when the relay starts."""

LogLevel = Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"]


class Settings(BaseSettings):
    """Everything ``turnflow consume``, ``relay``, ``migrate`` and ``topics`` read from the env."""

    model_config = SettingsConfigDict(env_prefix="", case_sensitive=False, extra="ignore")

    database_url: str | None = Field(
        None,
        description=(
            "PostgreSQL URL; a plain `postgresql://user@host:port/db` works, several hosts too "
            "(`postgresql://user@a:5432,b:5432/db?target_session_attrs=read-write`: the one "
            "accepting writes)."
        ),
    )
    database_pooler: Literal["none", "transaction"] = Field(
        "none",
        description="`transaction` when `DATABASE_URL` reaches PostgreSQL through a pooler in "
        "transaction mode (PgBouncer's `pool_mode = transaction`): no prepared statement is "
        "named or cached, each is parsed again in the exchange that runs it "
        "(docs/production.md, \"Behind PgBouncer\"); `none`: a direct connection or a pooler "
        "in session mode.",
    )
    migrate_database_url: str | None = Field(
        None,
        description="PostgreSQL URL `turnflow migrate` uses instead of `DATABASE_URL`: a direct "
        "connection, when `DATABASE_URL` goes through a transaction-mode pooler (migrations are "
        "not run through one). Required by `migrate` when `DATABASE_POOLER=transaction`.",
    )
    kafka_bootstrap_servers: str | None = Field(
        None, description="Kafka bootstrap servers, comma-separated `host:port`."
    )
    inbound_topic: str = Field("inbound.turns", description="Topic of customer inputs.")
    messages_topic: str = Field("outbound.messages", description="Topic of replies.")
    schedule_topic: str = Field("outbound.schedule", description="Topic of timers.")
    dlq_topic: str = Field("inbound.turns.dlq", description="Dead-letter topic of inputs.")
    topic_partitions: int = Field(
        12, ge=1, description="Partitions `turnflow topics` creates each topic with."
    )
    topic_replication_factor: int = Field(
        1, ge=1, description="Replication factor `turnflow topics` creates topics with; it "
        "refuses one larger than the number of brokers."
    )
    topic_min_insync_replicas: int | None = Field(
        None, ge=1, description="`min.insync.replicas` `turnflow topics` creates topics with: "
        "replicas that must have a record before it is acknowledged (the producers use "
        "`acks=all`). Unset: 2 when `TOPIC_REPLICATION_FACTOR` is 3 or more, else 1."
    )
    group_id: str = Field("turnflow", description="Consumer group of `turnflow consume`.")
    agent: str | None = Field(
        None, description="`module:attribute` of the `engine.Agent` the consumer runs."
    )
    agent_registry: bool = Field(
        False,
        description="Serve the agents stored with `turnflow agents` (a record names its "
        "`agent_id`); `AGENT`, when also set, answers conversations that name none.",
    )
    packs: str | None = Field(
        None,
        description="Comma-separated `module:attribute` of the `engine.packs.Pack`s (the code) "
        "the registry's agents name.",
    )
    agent_cache_size: int = Field(
        256, ge=1, description="Built registry agents one consumer keeps (least recently used "
        "dropped first)."
    )
    agent_refresh_ms: int = Field(
        1000, ge=0, description="How often a consumer polls the registry for activated versions "
        "and plan changes: a newly activated version answers within this."
    )
    max_in_flight: int = Field(
        64,
        ge=1,
        description="Engine turns (their model calls) one consumer runs at once (an input's "
        "load runs before it takes one, the turn's save and publish after it gave it back). "
        "An HTTP model provider opens up to this many connections to its server (100 when "
        "this is smaller) and keeps them alive.",
    )
    consume_workers: int = Field(
        0,
        ge=0,
        description="Consumer processes `turnflow consume` runs and keeps alive (0: one per "
        "available core; `--workers` overrides).",
    )
    max_buffered_records: int = Field(
        10000,
        ge=1,
        description=(
            "Fetched records held unfinished (the look-ahead), shared by the owned partitions; a"
            " partition at its share passes over the records of workspaces past their part of"
            " it (`MAX_PASSED_OVER`) and pauses alone at twice its share (back-pressure). The"
            " turn slots go fairly among the records held: see docs/production.md for sizing."
        ),
    )
    max_passed_over: int = Field(
        200_000,
        ge=0,
        description="Records a consumer may pass over at most: a partition at its share of "
        "the look-ahead keeps being read, holding the records of workspaces under their part "
        "of it and passing over the others' (read again once there is room), so a flood never "
        "hides what follows it; 0 pauses a full partition instead. About 250 bytes each.",
    )
    max_buffered_bytes: int = Field(
        64 << 20,
        ge=1,
        description="Bytes of fetched records (key and value) held unfinished, shared by the "
        "owned partitions as `MAX_BUFFERED_RECORDS` is: whichever share a partition reaches "
        "first pauses it.",
    )
    plan_weights: str = Field(
        "",
        description="Each plan's share of the turn slots while workspaces' turns wait for one, "
        "as `plan=weight,...` (`free=1,pro=4`); a plan not listed weighs 1.",
    )
    plan_max_in_flight: str = Field(
        "",
        description="Most engine turns one workspace of a plan runs at once in one consumer, "
        "as `plan=turns,...` (`free=4`); a plan not listed has no cap beyond `MAX_IN_FLIGHT`.",
    )
    plan_model_turns_per_minute: str = Field(
        "",
        description="Most model turns one workspace of a plan runs per minute across all "
        "consumers (counted in PostgreSQL), as `plan=turns,...` (`free=120`); a turn past it "
        "waits for the next minute. A plan not listed has no such cap.",
    )
    merge_bursts: bool = Field(
        True,
        description="Answer a session's messages that already wait behind the one taken as one"
        " turn (a burst).",
    )
    burst_window_ms: int = Field(
        0,
        ge=0,
        le=10000,
        description="Quiet period before a session's message turn runs, for more of its messages"
        " to join the burst (0: merge only what already waits; wakes and events never wait).",
    )
    burst_max_messages: int = Field(
        20, ge=1, description="Most messages one burst turn answers; the rest make the next."
    )
    max_record_bytes: int = Field(
        65536, ge=1, description="Inbound records larger than this go to the DLQ unread."
    )
    history_limit: int = Field(
        50, ge=0, description="Transcript entries loaded with the session for each turn."
    )
    history_cache_sessions: int = Field(
        2000, ge=0, description="Conversations whose last `HISTORY_LIMIT` entries one consumer"
        " keeps between their turns, so a turn loads no history (least recently served dropped"
        " first; about 30-50 KB each at 50 entries; 0: every turn loads it).",
    )
    max_version_conflicts: int = Field(
        5, ge=0, description="Reruns of a turn after losing a version race, before backing off."
    )
    max_retries: int = Field(
        5, ge=0, description="Retries of an unexpected failure before the input goes to DLQ, "
        "and of a model reply with nothing usable in it before the fallback message answers.",
    )
    retry_backoff_ms: int = Field(
        500, ge=0, description="First retry delay; doubles each attempt."
    )
    retry_backoff_max_ms: int = Field(
        30000, ge=0,
        description="Ceiling of the retry delay, a model server's Retry-After included.",
    )
    retry_jitter: float = Field(
        0.5, ge=0, le=1, description="Share of each retry delay taken away at random, so "
        "conversations that failed together do not retry together.",
    )
    model_outage_max_ms: int = Field(
        600000, ge=0, description="How long a message is retried while the model cannot be "
        "reached (its conversation's later inputs wait behind it, others go on) before the "
        "fallback message answers it.",
    )
    model_fallback_message: str = Field(
        "Sorry, I can't answer right now. Please write again in a few minutes.",
        min_length=1, description="Sent when the model could not answer a message and the agent "
        "has no `fallback_message` of its own.",
    )
    drain_timeout_ms: int = Field(
        10000, ge=0, description="On rebalance or SIGTERM, how long in-flight turns may finish."
    )
    session_timeout_ms: int = Field(
        10000, ge=1000, description="Kafka group session timeout: how fast a dead consumer's "
        "partitions move."
    )
    heartbeat_interval_ms: int = Field(
        1000, ge=100, description="Kafka group heartbeat interval."
    )
    relay_interval_ms: int = Field(
        2000, ge=10, description="How often the outbox relay looks for unpublished rows."
    )
    relay_grace_ms: int = Field(
        10000, ge=0,
        description="Rows younger than this (by the database clock) are left to the consumer "
        "that wrote them: the relay neither sends nor locks them.",
    )
    model_recording: Literal["off", "envelopes", "prompts"] = Field(
        "envelopes", description="What the turn log keeps of each model call, for replays: "
        "`off`, `envelopes` (kind, parsed reply, tokens, latency, fields written) or "
        "`prompts` (also the prompt sent; with tracing on, also the only level that puts "
        "prompts and replies on the model-call spans). See docs/replay.md for what it holds of "
        "personal data."
    )
    model_recording_retention_days: float = Field(
        30, ge=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False,
        description="Model recordings older than this are dropped by the relay "
        "(and by `turnflow prune`); 0 keeps them until pruned by hand. At most 36500."
    )
    outbox_retention_days: float = Field(
        7, ge=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False,
        description="Outbox rows published longer ago than this are deleted by the relay "
        "(and by `turnflow prune`); 0 keeps them until deleted by hand. The turn log keeps what "
        "was said; a published row only shows when it went out. At most 36500."
    )
    dead_letter_retention_days: float = Field(
        30, ge=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False,
        description="Records kept in the `dead_letters` table, and the sources of records sent "
        "to the DLQ, stored longer ago than this are deleted by the relay (and by `turnflow "
        "prune`); 0 keeps them until deleted by hand. Keep it longer than the inbound topic's "
        "retention: a reread finds a refused record's source and does not send it again. At "
        "most 36500."
    )
    turn_retention_days: float = Field(
        0, ge=0, le=MAX_RETENTION_DAYS, allow_inf_nan=False,
        description="Partitions of the turn log (months, or days: `TURN_PARTITION`) wholly "
        "older than this are dropped by the relay (and by `turnflow prune`), one `DROP TABLE` "
        "each, with the sessions nothing is then left of (no turn, no run in progress, no "
        "timer, no unsent reply); 0 keeps the turn log. Whole partitions: a turn goes at most "
        "one partition's span after this. At most 36500."
    )
    turn_partition: Literal["month", "day"] = Field(
        "month",
        description="The span of one turn log partition: `month` or `day`. The relay (and "
        "`turnflow prune`) makes them ahead (two months, fourteen days) and retention drops "
        "them whole; at millions of turns a day, `day` keeps each partition small. A change "
        "takes effect from the next period: partitions not yet started and empty are made "
        "again in the new span."
    )
    metrics_port: int | None = Field(
        None, ge=0, le=65535, description="Port of `/metrics`, `/healthz`, `/readyz` (0: off). "
        "Unset: 9100 for `consume` (worker i of `--workers`: 9100+i), 9200 for `schedule`, 9300 "
        "for `relay`, so they run side by side on one host; `dev` takes a free port and prints it."
    )
    metrics_host: str = Field("0.0.0.0", description="Address the metrics port binds to "
                              "(`dev`: 127.0.0.1 unless set).")
    log_level: LogLevel = Field(
        "INFO", description="Log level of the JSON logs: DEBUG, INFO, WARNING, ERROR or "
        "CRITICAL (any case)."
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        "PLAINTEXT", description="Kafka security protocol."
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] = Field(
        "PLAIN", description="SASL mechanism when the protocol is SASL_*."
    )
    kafka_sasl_username: str | None = Field(None, description="SASL username.")
    kafka_sasl_password: SecretStr | None = Field(
        None, description="SASL password (or `KAFKA_SASL_PASSWORD_FILE`, a mounted file)."
    )
    kafka_sasl_password_file: Path | None = Field(
        None, description="File holding the SASL password."
    )
    kafka_idempotent_producer: bool = Field(
        True, description="Idempotent producer (exactly-once per partition on retries). The "
        "embedded broker lacks producer ids; `turnflow dev` turns it off there."
    )
    kafka_fetch_max_wait_ms: int = Field(
        500, ge=0, description="Longest the broker may hold a fetch that has no records yet. "
        "Kafka answers as soon as records arrive; the embedded broker waits the whole time, so "
        "`turnflow dev` and `turnflow bench` set 10 there."
    )
    kafka_ssl_cafile: Path | None = Field(None, description="CA bundle for Kafka TLS.")

    @field_validator("log_level", mode="before")
    @classmethod
    def _level_in_any_case(cls, value: Any) -> Any:
        """``info`` works as ``INFO`` does (``logging`` takes either); the rest is refused
        here, as a bad setting, not by ``configure_logging`` once the service starts."""
        return value.strip().upper() if isinstance(value, str) else value

    @field_validator("plan_weights", "plan_max_in_flight", "plan_model_turns_per_minute")
    @classmethod
    def _plan_numbers_readable(cls, value: str, info: ValidationInfo) -> str:
        """Refused here, named as a bad setting, rather than when the first turn waits."""
        whole = info.field_name != "plan_weights"
        plan_numbers(value, whole=whole)
        return value

    def plan_weight_map(self) -> dict[str, float]:
        """``PLAN_WEIGHTS`` read: plan -> weight."""
        return plan_numbers(self.plan_weights, whole=False)

    def plan_per_minute_map(self) -> dict[str, int]:
        """``PLAN_MODEL_TURNS_PER_MINUTE`` read: plan -> turns a minute."""
        caps = plan_numbers(self.plan_model_turns_per_minute, whole=True)
        return {plan: int(turns) for plan, turns in caps.items()}

    def plan_cap_map(self) -> dict[str, int]:
        """``PLAN_MAX_IN_FLIGHT`` read: plan -> turns."""
        caps = plan_numbers(self.plan_max_in_flight, whole=True)
        return {plan: int(turns) for plan, turns in caps.items()}

    @field_validator("kafka_sasl_password_file")
    @classmethod
    def _password_file_readable(cls, path: Path | None, info: ValidationInfo) -> Path | None:
        """A file that cannot be read is a bad value of this setting (named as such), not an
        ``OSError`` from deep inside the settings. Unchecked when the password itself is set,
        since the file is then not read."""
        if path is not None and info.data.get("kafka_sasl_password") is None:
            _read_secret(path)
        return path

    @model_validator(mode="after")
    def _password_from_file(self) -> Settings:
        if self.kafka_sasl_password is None and self.kafka_sasl_password_file is not None:
            self.kafka_sasl_password = SecretStr(_read_secret(self.kafka_sasl_password_file))
        return self

    def min_insync_replicas(self) -> int:
        """``TOPIC_MIN_INSYNC_REPLICAS``, or when unset 2 with three replicas or more (one
        broker may be down and every acknowledged record is still on two), else 1 (with two
        replicas, 2 would stop every write while either broker is down)."""
        if self.topic_min_insync_replicas is not None:
            return self.topic_min_insync_replicas
        return 2 if self.topic_replication_factor >= 3 else 1

    def metrics_port_for(self, process: str) -> int:
        """``METRICS_PORT`` when set, else the process's own default port (0: off)."""
        if self.metrics_port is not None:
            return self.metrics_port
        return DEFAULT_METRICS_PORTS[process]

    def require_servers(self, *, database: bool = True) -> None:
        """``ValueError`` naming the first server a long-running service needs and lacks;
        ``database=False`` when the caller brings its own store."""
        if not self.kafka_bootstrap_servers:
            raise ValueError("KAFKA_BOOTSTRAP_SERVERS is not set")
        if database and not self.database_url:
            raise ValueError("DATABASE_URL is not set")

    def recording_retention(self) -> timedelta | None:
        """How long model recordings are kept; None when they are kept until pruned by hand."""
        days = self.model_recording_retention_days
        return timedelta(days=days) if days > 0 else None

    def outbox_retention(self) -> timedelta | None:
        """How long published outbox rows are kept; None when they are kept until deleted."""
        days = self.outbox_retention_days
        return timedelta(days=days) if days > 0 else None

    def dead_letter_retention(self) -> timedelta | None:
        """How long dead letters and dead-lettered sources are kept; None: until deleted."""
        days = self.dead_letter_retention_days
        return timedelta(days=days) if days > 0 else None

    def turn_retention(self) -> timedelta | None:
        """How long the turn log is kept; None when it is kept until dropped by hand."""
        days = self.turn_retention_days
        return timedelta(days=days) if days > 0 else None

    def kafka_client_options(self) -> dict[str, Any]:
        """Security keyword arguments shared by every aiokafka client we create."""
        options: dict[str, Any] = {"security_protocol": self.kafka_security_protocol}
        if self.kafka_security_protocol in ("SSL", "SASL_SSL"):
            options["ssl_context"] = ssl.create_default_context(
                cafile=str(self.kafka_ssl_cafile) if self.kafka_ssl_cafile else None
            )
        if self.kafka_security_protocol.startswith("SASL"):
            options["sasl_mechanism"] = self.kafka_sasl_mechanism
            options["sasl_plain_username"] = self.kafka_sasl_username
            options["sasl_plain_password"] = (
                self.kafka_sasl_password.get_secret_value() if self.kafka_sasl_password else None
            )
        return options


def plan_numbers(text: str, *, whole: bool) -> dict[str, float]:
    """``free=1, pro=4`` as ``{"free": 1.0, "pro": 4.0}``; ``ValueError`` naming the first item
    that is not ``plan=number`` with a finite number > 0 (an integer when ``whole``), or a plan
    given twice. An empty text is no entries."""
    found: dict[str, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        plan, equals, written = item.partition("=")
        plan, written = plan.strip(), written.strip()
        if not equals or not plan or not written:
            raise ValueError(f"{item.strip()!r} is not plan=number")
        if plan in found:
            raise ValueError(f"plan {plan!r} given twice")
        try:
            number = int(written) if whole else float(written)
        except ValueError:
            kind = "a whole number" if whole else "a number"
            raise ValueError(f"plan {plan!r}: {written!r} is not {kind}") from None
        if not (0 < number < float("inf")):
            raise ValueError(f"plan {plan!r}: must be > 0 and finite, got {written!r}")
        found[plan] = float(number)
    return found


def _read_secret(path: Path) -> str:
    """The file's content, stripped; ``ValueError`` (which pydantic reports as a bad setting)
    saying why it cannot be read, never the content."""
    try:
        return path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else type(exc).__name__
        raise ValueError(f"cannot read {path}: {reason}") from None


def env_table() -> str:
    """The README's configuration table, in Markdown, from the field descriptions."""
    lines = ["| variable | default | meaning |", "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.default
        shown = "" if default is None else f"`{default}`"
        lines.append(f"| `{name.upper()}` | {shown} | {field.description or ''} |")
    return "\n".join(lines)
