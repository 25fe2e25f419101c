"""Engine benchmark: microseconds per turn, and what the engine adds around each model call.

Run: ``python -m bench.engine_bench`` (or ``make bench-engine``). Prints one table; every figure
comes from the same process and run, so the ratios side by side are comparable. The turns are
timed in rounds (a few of each row, then the next row), so a host whose speed drifts during
the run slows every row alike.

What is measured, all in-process with a ``FakeClock`` and no I/O:

- a code-only turn: a fresh session, one message, a 10-step flow of say/do/if/wait steps;
- the same kind of turn against sessions with 10, 100 and 1,000 data fields and with 1, 10 and
  50 live runs parked on event waits (the deep copy and every phase scale with the session),
  the 50 runs passed both as a ``Session`` and as the JSON dict a host stores;
- a model turn (understand + speak) against a zero-latency provider, so the figure is the
  engine's own cost, the same turn given a 50-entry history (the consumer's default history
  limit), and turns spending only an understand or only a speak call;
- the engine's own work per call kind in isolation: building the prompt, building the JSON
  schema, parsing the reply.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import statistics
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from bench.harness.percentiles import percentile
from engine import Agent, FakeClock, ModelRequest, ModelResponse

Turn = Callable[[], Awaitable[Any]]


class InstantProvider:
    """A zero-latency provider answering each call kind with a fixed envelope."""

    def __init__(self, replies: dict[str, dict[str, Any]]) -> None:
        self.replies = {kind: ModelResponse(json=reply) for kind, reply in replies.items()}
        self.calls = 0

    async def generate(self, request: ModelRequest) -> ModelResponse:
        self.calls += 1
        return self.replies[request.schema_name]


MAX_LIVE_RUNS = 50
HISTORY_ENTRIES = 50  # the consumer's default HISTORY_LIMIT


def notify(ctx: Any) -> dict[str, Any]:
    return {"ok": True}


TEN_STEPS: list[dict[str, Any]] = [
    {"id": "s1", "say": "Olá {{nome}}!"},
    {"id": "s2", "do": "notify", "with": {"who": "{{nome}}"}},
    {"id": "s3", "if": {"known": "nome"}, "then": "s4", "else": "s5"},
    {"id": "s4", "say": "Que bom te ver de novo."},
    {"id": "s5", "wait": {"ms": 2000}},
    {"id": "s6", "say": "Separei uma oferta."},
    {"id": "s7", "do": "notify"},
    {"id": "s8", "if": {"equals": {"plano": "pro"}}, "then": "s9", "else": "s9"},
    {"id": "s9", "say": "O plano {{plano}} está com desconto."},
    {"id": "s10", "wait": {"ms": 3_600_000}},
]

FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "plano": {"type": "string", "enum": ["basic", "pro"], "extract": "anywhere"},
    "email": {"type": "email", "ask": "Pergunte o e-mail."},
}


def code_only_agent() -> Agent:
    return Agent(
        name="Ana",
        provider=InstantProvider({}),
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields=FIELDS,
        actions={"notify": notify},
        events={"pago": {}},
        idle="silent",
        flows=[
            {"id": "oferta", "on": [{"message": []}], "steps": TEN_STEPS},
            *(
                {
                    "id": f"espera_{i}",
                    "on": [{"event": "pago"}],
                    "steps": [
                        {"id": "e1", "wait": {"event": "pago"}},
                        {"id": "e2", "say": "Pago!"},
                    ],
                }
                for i in range(MAX_LIVE_RUNS)
            ),
        ],
    )


def model_agent(provider: InstantProvider) -> Agent:
    return Agent(
        name="Ana",
        persona="Atendente cordial de uma loja de software.",
        goal="Qualificar leads e agendar demonstrações.",
        knowledge=["O plano pro custa 10 por mês.", "O plano basic é gratuito."],
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields=FIELDS,
        instructions=[{"must": "Responda em português."}],
        idle="silent",
        flows=[
            {
                "id": "cadastro",
                "name": "Cadastro",
                "description": "Coleta nome e e-mail.",
                "on": [{"message": ["quero me cadastrar"]}],
                "steps": [
                    {"id": "dados", "prompt": "Colete os dados.", "collect": ["nome", "email"]}
                ],
            },
            {
                "id": "suporte",
                "on": [{"message": ["tenho um problema"]}],
                "steps": [{"id": "ajuda", "say": "Vou te ajudar."}],
            },
        ],
    )


def grown_session(data_fields: int) -> dict[str, Any]:
    data = {f"campo_{i:04d}": f"valor {i}" for i in range(data_fields)}
    data["nome"] = "Maria"
    return {
        "id": "s1",
        "v": 4,
        "version": 0,
        "data": data,
        "runs": [],
        "claims": {},
        "inputs": [],
        "metadata": {},
    }


async def session_with_runs(agent: Agent, runs: int) -> Any:
    """A session holding ``runs`` live runs, each parked on an event wait."""
    session: Any = grown_session(10)
    for i in range(runs):
        start = {
            "session_id": "s1",
            "start": {"flow": f"espera_{i}", "key": f"k{i}"},
            "session": session,
        }
        session = (await agent.turn(start)).session
    assert len(session.runs) == runs, len(session.runs)
    return session


def measure(
    turns: list[tuple[str, Turn]], iterations: int, batch: int = 10
) -> dict[str, list[float]]:
    """Microseconds per call of each turn, after a warm-up, taken in rounds: each round times
    ``batch`` calls of every turn in turn. On a shared host whose speed drifts during the run,
    a row measured after another in one block could land on a faster or slower minute than its
    base; in rounds, every row sees the same minutes and the ratios stay comparable."""

    async def loop() -> dict[str, list[float]]:
        for _, turn in turns:
            for _ in range(max(iterations // 10, 5)):
                await turn()
        samples: dict[str, list[float]] = {label: [] for label, _ in turns}
        taken = 0
        while taken < iterations:
            n = min(batch, iterations - taken)
            for label, turn in turns:
                row = samples[label]
                for _ in range(n):
                    begin = time.perf_counter_ns()
                    await turn()
                    row.append((time.perf_counter_ns() - begin) / 1000)
            taken += n
        return samples

    return asyncio.run(loop())


def summary(samples: list[float]) -> tuple[float, float]:
    return statistics.median(samples), percentile(samples, 0.99)


def rows(iterations: int) -> list[tuple[str, float, float]]:
    turns: list[tuple[str, Turn]] = []

    def add(label: str, turn: Turn) -> None:
        turns.append((label, turn))

    agent = code_only_agent()

    async def ten_steps() -> Any:
        result = await agent.turn({"session_id": "s1", "message": "oi", "id": "m1"})
        assert result.llm_calls == 0 and len(result.messages) == 3
        return result

    add("code-only turn, 10-step flow, fresh session", ten_steps)

    for size in (10, 100, 1000):
        session = grown_session(size)

        async def with_data(session: Any = session) -> Any:
            request = {"session_id": "s1", "message": "oi", "id": "m1", "session": session}
            return await agent.turn(request)

        add(f"code-only turn, {size:,} data fields", with_data)

    for count in (1, 10, 50):
        session = asyncio.run(session_with_runs(agent, count))

        async def with_runs(session: Any = session) -> Any:
            request = {"session_id": "s1", "message": "oi", "id": "m1", "session": session}
            return await agent.turn(request)

        add(f"code-only turn, {count} live runs", with_runs)

    # The service's path: the consumer passes the session as it is stored, a JSON dict.
    stored = asyncio.run(session_with_runs(agent, MAX_LIVE_RUNS)).model_dump(mode="json")

    async def with_stored_runs() -> Any:
        request = {"session_id": "s1", "message": "oi", "id": "m1", "session": stored}
        return await agent.turn(request)

    add(f"code-only turn, {MAX_LIVE_RUNS} live runs, session as stored JSON", with_stored_runs)

    envelope = {"message": "Prazer! Qual o seu e-mail?", "nome": "Maria", "email": None}
    provider = InstantProvider(
        {"understand": {"flows": {"cadastro": 90, "suporte": 0}}, "speak": envelope}
    )
    model = model_agent(provider)

    async def model_turn() -> Any:
        result = await model.turn({"session_id": "s1", "message": "quero me cadastrar", "id": "m1"})
        assert result.llm_calls == 2
        return result

    async def understand_only() -> Any:
        request = {"session_id": "s1", "message": "tenho um problema", "id": "m1"}
        return await support.turn(request)

    async def speak_only() -> Any:
        request = {"session_id": "s1", "start": {"flow": "cadastro", "key": "k1"}}
        result = await model.turn(request)
        assert result.llm_calls == 1
        return result

    support = model_agent(
        InstantProvider({"understand": {"flows": {"cadastro": 0, "suporte": 90}}})
    )
    # The history a host passes with every turn (the consumer loads up to 50 entries by
    # default): entries as the store gives them, dicts with an aware datetime.
    history = [
        {
            "role": "user" if i % 2 == 0 else "assistant",
            "text": f"mensagem {i} da conversa, com algumas palavras a mais",
            "at": datetime(2026, 1, 5, 8, 0, tzinfo=UTC) + timedelta(seconds=30 * i),
        }
        for i in range(HISTORY_ENTRIES)
    ]

    async def model_turn_with_history() -> Any:
        request = {
            "session_id": "s1", "message": "quero me cadastrar", "id": "m1",
            "history": [dict(entry) for entry in history],
        }
        result = await model.turn(request)
        assert result.llm_calls == 2
        return result

    add("model turn (understand + speak), zero-latency mock", model_turn)
    add(f"model turn, {HISTORY_ENTRIES} history entries", model_turn_with_history)
    add("understand-only turn, zero-latency mock", understand_only)
    add("speak-only turn (start input), zero-latency mock", speak_only)
    samples = measure(turns, iterations)
    results = [(label, *summary(samples[label])) for label, _ in turns]
    results.extend(call_part_rows(model_turn, iterations * 5))
    return results


# The engine's own work around each call kind, captured from a real turn and replayed alone.
CALL_PARTS = [
    ("understand: build prompt", "engine.phases.understand", "build_understand"),
    ("understand: build schema", "engine.phases.understand", "understand_schema"),
    ("understand: parse reply", "engine.phases.understand", "parse_understand"),
    ("speak: build prompt", "engine.phases.speak", "build_speak"),
    ("speak: build schema", "engine.phases.speak", "speak_schema"),
    ("speak: parse reply", "engine.phases.speak", "parse_speak"),
]


def captured_calls(
    turn: Turn,
) -> dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]]:
    """Run ``turn`` once with the engine's prompt, schema and parse functions recorded."""
    captured: dict[str, tuple[Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = {}
    patched = []
    for label, module_name, name in CALL_PARTS:
        module = importlib.import_module(module_name)
        original = getattr(module, name)

        def recorder(*args: Any, _label: str = label, _fn: Any = original, **kwargs: Any) -> Any:
            captured.setdefault(_label, (_fn, args, kwargs))
            return _fn(*args, **kwargs)

        setattr(module, name, recorder)
        patched.append((module, name, original))
    try:
        asyncio.run(turn())
    finally:
        for module, name, original in patched:
            setattr(module, name, original)
    return captured


def call_part_rows(turn: Turn, iterations: int) -> list[tuple[str, float, float]]:
    results = []
    for label, (fn, args, kwargs) in captured_calls(turn).items():
        samples = []
        for _ in range(iterations):
            begin = time.perf_counter_ns()
            fn(*args, **kwargs)
            samples.append((time.perf_counter_ns() - begin) / 1000)
        median, p99 = summary(samples)
        results.append((label, median, p99))
    order = [label for label, _, _ in CALL_PARTS]
    return sorted(results, key=lambda row: order.index(row[0]))


def table(results: list[tuple[str, float, float]]) -> str:
    base = results[0][1]
    width = max(len(label) for label, _, _ in results)
    lines = [
        f"{'measure':<{width}}  {'median us':>10}  {'p99 us':>10}  {'x base':>7}",
        f"{'-' * width}  {'-' * 10}  {'-' * 10}  {'-' * 7}",
    ]
    for label, median, p99 in results:
        lines.append(f"{label:<{width}}  {median:>10.1f}  {p99:>10.1f}  {median / base:>7.2f}")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", "--iterations", type=int, default=2000)
    args = parser.parse_args()
    print(table(rows(args.iterations)))


if __name__ == "__main__":
    main()
