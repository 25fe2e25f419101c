"""The reply language: fixed, then response_language, then the latest message, in that order."""

from __future__ import annotations

from engine.lifecycle.language import Py3LangidDetector, choose_language, detect
from engine.lifecycle.settings import LanguageSettings


class ScriptedDetector:
    """Answers a fixed (code, confidence) and records what it was asked."""

    def __init__(self, code: str, confidence: float) -> None:
        self.answer = (code, confidence)
        self.asked: list[str] = []

    def detect(self, text: str) -> tuple[str, float]:
        self.asked.append(text)
        return self.answer


def test_fixed_wins_over_response_language_and_the_message() -> None:
    """strategy fixed answers in base_language even with response_language set."""
    settings = LanguageSettings(strategy="fixed", base_language="pt", response_language="es")
    detector = ScriptedDetector("en", 0.99)
    choice = choose_language(settings, "Hello there, how are you?", None, detector)
    assert (choice.code, choice.source) == ("pt", "fixed") and detector.asked == []


def test_response_language_wins_over_the_message() -> None:
    """With a response_language and no fixed strategy, the message is not even read."""
    settings = LanguageSettings(base_language="pt", response_language="es")
    detector = ScriptedDetector("en", 0.99)
    choice = choose_language(settings, "Hello there, how are you?", None, detector)
    assert (choice.code, choice.source) == ("es", "response_language") and detector.asked == []


def test_otherwise_the_latest_message_language_is_detected() -> None:
    """With neither set, the customer's latest message decides."""
    detector = ScriptedDetector("fr", 0.9)
    choice = choose_language(LanguageSettings(base_language="pt"), "Bonjour à tous", "pt", detector)
    assert (choice.code, choice.source) == ("fr", "detected")


def test_an_unsure_detection_keeps_the_earlier_language_then_the_base() -> None:
    """Below the confidence floor the earlier language stays; with none, base_language."""
    detector = ScriptedDetector("gl", 0.29)
    settings = LanguageSettings(base_language="en")
    assert choose_language(settings, "quero cancelar", "pt", detector).source == "previous"
    assert choose_language(settings, "quero cancelar", None, detector).code == "en"
    sure = ScriptedDetector("gl", 0.3)
    assert choose_language(settings, "quero cancelar", None, sure).code == "gl"


def test_a_message_too_short_to_tell_is_not_detected() -> None:
    """Three letters or fewer ("oi", "ok!") are never sent to the detector."""
    detector = ScriptedDetector("fi", 1.0)
    assert detect("oi!", detector) is None and detect("ok", detector) is None
    assert detector.asked == []
    assert detect("olaa", detector) == "fi"


def test_a_turn_without_a_message_keeps_the_earlier_language() -> None:
    """A wake or an event has no message: the earlier language is kept."""
    detector = ScriptedDetector("en", 1.0)
    choice = choose_language(LanguageSettings(base_language="de"), None, "pt", detector)
    assert (choice.code, choice.source) == ("pt", "previous") and detector.asked == []


def test_the_bundled_detector_tells_common_languages_apart_offline() -> None:
    """py3langid's shipped model recognises Portuguese, English, Spanish and French."""
    detector = Py3LangidDetector()
    samples = {
        "pt": "Olá, quero falar sobre o meu pedido que ainda não chegou",
        "en": "Hello, I would like to know where my order is",
        "es": "Hola, quisiera saber dónde está mi pedido, por favor",
        "fr": "Bonjour, je voudrais savoir où est ma commande",
    }
    for code, text in samples.items():
        assert detect(text, detector) == code


def test_detection_can_be_limited_to_some_languages() -> None:
    """detect_among restricts the detector to the listed languages."""
    settings = LanguageSettings(base_language="en", detect_among=["pt", "en"])
    choice = choose_language(settings, "Hola, quisiera saber dónde está mi pedido", None)
    assert choice.code in ("pt", "en")
