"""``turnflow dev`` pieces that need no server: chat lines, the per-turn footer, the observer."""

from __future__ import annotations

import pytest

from consumer.dev import ChatLine, ObservedAgent, ObservedTurn, format_outcomes, parse_chat_line


def test_plain_line_is_a_message() -> None:
    """A line that does not start with a slash is sent as the customer's message, trimmed."""
    assert parse_chat_line("  I want to book a repair \n") == ChatLine(
        "message", text="I want to book a repair"
    )


def test_blank_and_comment_lines_are_skipped() -> None:
    """Blank lines and lines starting with # are not sent, so scripts can carry comments."""
    assert parse_chat_line("   ").kind == "skip"
    assert parse_chat_line("# a comment").kind == "skip"


def test_wait_reads_seconds() -> None:
    """``/wait 5`` waits five seconds; fractions are allowed."""
    assert parse_chat_line("/wait 5") == ChatLine("wait", seconds=5.0)
    assert parse_chat_line("/wait 0.5").seconds == 0.5


@pytest.mark.parametrize("line", ["/wait", "/wait soon", "/wait -1"])
def test_wait_without_a_valid_number_is_refused(line: str) -> None:
    """A ``/wait`` with no number, or a negative one, is a clear error, not a silent zero."""
    with pytest.raises(ValueError, match="/wait"):
        parse_chat_line(line)


def test_event_with_payload() -> None:
    """``/event NAME JSON`` sends that event with the JSON object as payload."""
    assert parse_chat_line('/event paid {"amount": 45}') == ChatLine(
        "event", event="paid", payload={"amount": 45}
    )
    assert parse_chat_line("/event paid") == ChatLine("event", event="paid", payload={})


@pytest.mark.parametrize(
    ("line", "message"),
    [("/event", "needs a name"), ("/event paid {oops", "not JSON"), ("/event paid [1]", "object")],
)
def test_bad_event_lines_are_refused(line: str, message: str) -> None:
    """An event with no name or a payload that is not a JSON object is refused with the reason."""
    with pytest.raises(ValueError, match=message):
        parse_chat_line(line)


def test_quit_and_unknown_commands() -> None:
    """``/quit`` ends the chat; an unknown command is refused and the help names the real ones."""
    assert parse_chat_line("/quit").kind == "quit"
    with pytest.raises(ValueError, match="/event NAME"):
        parse_chat_line("/dance")


def test_footer_lists_llm_calls_and_outcomes() -> None:
    """The per-turn footer shows ``llm_calls`` and each outcome as flow/step code (detail)."""
    result = {
        "llm_calls": 2,
        "outcomes": [
            {"flow_id": "booking", "step_id": "what", "code": None, "status": "asking"},
            {"flow_id": "booking", "step_id": "breath", "code": "inline-delay",
             "detail": "1500ms"},
        ],
    }
    assert format_outcomes(result) == (
        "llm_calls=2 | booking/what asking; booking/breath inline-delay (1500ms)"
    )


def test_footer_of_an_empty_turn() -> None:
    """A turn with no outcome still shows its model-call count."""
    assert format_outcomes({"llm_calls": 0}) == "llm_calls=0 | nothing to report"


class _Agent:
    name = "Ana"

    async def turn(self, request: dict[str, object]) -> dict[str, object]:
        return {"llm_calls": 1, "echo": request["message"]}


async def test_observed_agent_reports_each_turn_and_delegates() -> None:
    """The wrapper returns the real result, reports request and result, keeps attributes."""
    seen: list[ObservedTurn] = []
    observed = ObservedAgent(_Agent(), seen.append)
    result = await observed.turn({"session_id": "s1", "message": "hi"})
    assert result == {"llm_calls": 1, "echo": "hi"}
    assert seen == [ObservedTurn({"session_id": "s1", "message": "hi"}, result)]
    assert observed.name == "Ana"


async def test_a_failing_observer_never_fails_the_turn() -> None:
    """An exception in the chat's observer is swallowed: the consumer still gets the result."""

    def broken(_: ObservedTurn) -> None:
        raise RuntimeError("display died")

    result = await ObservedAgent(_Agent(), broken).turn({"session_id": "s1", "message": "x"})
    assert result["llm_calls"] == 1
