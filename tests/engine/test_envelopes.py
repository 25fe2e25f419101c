"""The JSON schemas of the understand and speak calls, pinned by snapshots.

The snapshots under ``tests/engine/snapshots/`` are the envelopes the model sees for one fixed
agent. A change to them changes what every provider is asked to return, so it must show up in
review: regenerate with ``TURNFLOW_UPDATE_SNAPSHOTS=1`` and read the diff against seed 000.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from engine import Agent, FakeClock, MockProvider

SNAPSHOTS = Path(__file__).parent / "snapshots"

FIELDS: dict[str, Any] = {
    "nome": {"type": "string", "ask": "Pergunte o nome."},
    "idade": {"type": "integer", "ask": "Pergunte a idade."},
    "valor": {"type": "number", "ask": "Pergunte o orçamento."},
    "confirmado": {"type": "boolean", "ask": "Confirme o agendamento."},
    "email": {"type": "email", "ask": "Pergunte o e-mail."},
    "dia": {"type": "date", "ask": "Pergunte o dia."},
    "plano": {"type": "string", "enum": ["basic", "pro"], "extract": "anywhere"},
    "empresa": {"type": "string", "extract": "anywhere", "description": "Empresa da pessoa."},
}

FLOWS: list[dict[str, Any]] = [
    {
        "id": "cadastro",
        "name": "Cadastro",
        "on": [{"message": ["quero me cadastrar"]}],
        "steps": [
            {
                "id": "dados",
                "collect": ["nome", "idade", "valor", "confirmado", "email", "dia"],
                "branches": [
                    {"when": "a pessoa quer falar com um humano?", "then": "humano"},
                    {"when": "a pessoa quer cancelar?", "then": "end"},
                ],
            },
            {"id": "plano", "collect": ["plano", "empresa"]},
            {"id": "humano", "say": "Chamando alguém."},
        ],
    },
    {
        "id": "suporte",
        "on": [{"message": ["tenho um problema"]}],
        "steps": [{"id": "s", "say": "Ok"}],
    },
    {
        "id": "preco",
        "on": [
            {
                "mention": ["preço", "quanto custa"],
                "extract": {"item": {"type": "string", "enum": ["basic", "pro"]}},
            }
        ],
        "steps": [{"id": "p", "say": "Custa 10."}],
    },
]

UNDERSTAND_REPLY = {
    "flows": {"cadastro": 50, "suporte": 0},
    "mentions": {"preco": False},
    "extract": {"preco": {"item": None}},
    "branches": {"q1": False, "q2": None},
    "fields": {"plano": None, "empresa": "ACME"},
}


async def recorded_calls() -> list[Any]:
    """Turn one starts the registration (a speak call); turn two judges everything at once."""
    provider = MockProvider(
        [
            {
                "message": "Me conta seus dados?",
                **{f: None for f in FIELDS if f not in ("plano", "empresa")},
            },
            UNDERSTAND_REPLY,
            {"message": "E a idade?", **{f: None for f in FIELDS if f not in ("plano", "empresa")}},
        ]
    )
    agent = Agent(
        name="Ana",
        provider=provider,
        clock=FakeClock("2026-01-05T09:00:00Z"),
        fields=FIELDS,
        flows=FLOWS,
    )
    first = await agent.turn({"session_id": "s1", "start": {"flow": "cadastro", "key": "k0"}})
    await agent.turn(
        {"session_id": "s1", "message": "quanto custa?", "id": "m1", "session": first.session}
    )
    return provider.calls


def check_snapshot(name: str, schema: dict[str, Any]) -> None:
    path = SNAPSHOTS / f"{name}.json"
    if os.environ.get("TURNFLOW_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(json.dumps(schema, indent=2, ensure_ascii=False, sort_keys=True) + "\n")
    assert path.exists(), f"no snapshot {path.name}; run with TURNFLOW_UPDATE_SNAPSHOTS=1"
    assert schema == json.loads(path.read_text())


@pytest.fixture
async def calls() -> list[Any]:
    return await recorded_calls()


async def test_understand_schema_matches_its_snapshot(calls: list[Any]) -> None:
    """The understand envelope for the fixed agent is exactly the reviewed snapshot."""
    understand = calls[1]
    assert understand.schema_name == "understand"
    check_snapshot("understand", understand.json_schema)


async def test_speak_schema_matches_its_snapshot(calls: list[Any]) -> None:
    """The speak envelope for the fixed agent's collect step is exactly the reviewed snapshot."""
    speak = calls[0]
    assert speak.schema_name == "speak"
    check_snapshot("speak", speak.json_schema)


async def test_understand_schema_accepts_a_full_reply_and_rejects_a_partial_one(
    calls: list[Any],
) -> None:
    """Inside a section every property is required and nullable, so the model must answer each one."""  # noqa: E501  # the seed sentence, quoted whole
    validator = Draft202012Validator(calls[1].json_schema)
    assert validator.is_valid(UNDERSTAND_REPLY)
    all_null = {
        section: {key: None for key in answers} for section, answers in UNDERSTAND_REPLY.items()
    }
    assert validator.is_valid(all_null)
    for section, answers in UNDERSTAND_REPLY.items():
        for key in answers:
            partial = {**UNDERSTAND_REPLY, section: {k: v for k, v in answers.items() if k != key}}
            assert not validator.is_valid(partial), f"{section}.{key} is not required"
        assert not validator.is_valid({k: v for k, v in UNDERSTAND_REPLY.items() if k != section})


async def test_understand_schema_types_each_section(calls: list[Any]) -> None:
    """Scores are 0-100 numbers, mentions and branches booleans, fields typed by their spec."""
    validator = Draft202012Validator(calls[1].json_schema)
    wrong = [
        {"flows": {"cadastro": "alto", "suporte": 0}},
        {"mentions": {"preco": "sim"}},
        {"extract": {"preco": {"item": "gold"}}},
        {"branches": {"q1": "talvez", "q2": None}},
        {"fields": {"plano": "gold", "empresa": None}},
    ]
    for patch in wrong:
        assert not validator.is_valid({**UNDERSTAND_REPLY, **patch}), patch


async def test_speak_schema_is_message_plus_every_pending_field(calls: list[Any]) -> None:
    """The envelope is { message, ...pending fields of this step }, every property required and nullable."""  # noqa: E501  # the seed sentence, quoted whole
    schema = calls[0].json_schema
    pending = ["nome", "idade", "valor", "confirmado", "email", "dia"]
    assert set(schema["properties"]) == {"message", *pending}
    validator = Draft202012Validator(schema)
    full = {
        "message": "Oi",
        "nome": "Maria",
        "idade": 30,
        "valor": 12.5,
        "confirmado": True,
        "email": "m@acme.com",
        "dia": "2026-01-06",
    }
    assert validator.is_valid(full)
    assert validator.is_valid({key: None for key in full})
    for key in full:
        assert not validator.is_valid({k: v for k, v in full.items() if k != key}), key
    assert not validator.is_valid({**full, "idade": "trinta"})
    assert not validator.is_valid({**full, "confirmado": "sim"})
