"""The language the reply is in, decided by code before the speak call.

The rows are checked in this order: ``strategy: "fixed"`` answers in ``base_language``;
``response_language``, when set, wins next; otherwise the language of the customer's latest
message. Detection uses ``py3langid`` (its model ships inside the wheel: offline, no download).
A message too short or too ambiguous to tell (confidence under ``MIN_CONFIDENCE``) keeps the
language detected earlier in the conversation, else ``base_language``. A turn with no message
(a wake, an event, a start) also keeps the earlier language.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, Protocol

from engine.lifecycle.settings import LanguageSettings

MIN_CONFIDENCE = 0.3
MIN_LETTERS = 4

LanguageSource = Literal["fixed", "response_language", "detected", "previous", "base_language"]


class LanguageDetector(Protocol):
    """``detect(text) -> (code, confidence 0..1)``."""

    def detect(self, text: str) -> tuple[str, float]: ...


class Py3LangidDetector:
    """``py3langid`` with normalised probabilities, optionally limited to some languages."""

    def __init__(self, among: tuple[str, ...] = ()) -> None:
        self._identifier = _identifier(tuple(sorted(among)))

    def detect(self, text: str) -> tuple[str, float]:
        code, confidence = self._identifier.classify(text)
        return str(code), float(confidence)


@lru_cache(maxsize=8)
def _identifier(among: tuple[str, ...]) -> Any:
    # Loading the model takes a moment; one identifier per language subset is kept.
    from py3langid.langid import MODEL_FILE, LanguageIdentifier

    identifier = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
    if among:
        identifier.set_languages(list(among))
    return identifier


@dataclass(frozen=True)
class LanguageChoice:
    """The reply language and which row of the order chose it."""

    code: str
    source: LanguageSource


def detect(text: str, detector: LanguageDetector) -> str | None:
    """The message's language, or None when it is too short or too unsure to tell."""
    if sum(ch.isalpha() for ch in text) < MIN_LETTERS:
        return None
    code, confidence = detector.detect(text)
    return code if confidence >= MIN_CONFIDENCE else None


def choose_language(
    settings: LanguageSettings,
    message: str | None,
    previous: str | None,
    detector: LanguageDetector | None = None,
) -> LanguageChoice:
    """Apply the order: fixed, response_language, the latest message's language."""
    if settings.strategy == "fixed":
        return LanguageChoice(settings.base_language, "fixed")
    if settings.response_language:
        return LanguageChoice(settings.response_language, "response_language")
    if message is not None:
        found = detect(message, detector or Py3LangidDetector(tuple(settings.detect_among)))
        if found is not None:
            return LanguageChoice(found, "detected")
    if previous:
        return LanguageChoice(previous, "previous")
    return LanguageChoice(settings.base_language, "base_language")
