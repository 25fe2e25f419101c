"""The replay's report: a summary, each departing conversation with its diff, and the same in
JSON and JUnit XML for CI.

A change is *expected* when its conversation is listed, or when every aspect it changed is
listed (``--expect-changes messages`` accepts new wording but not a new route). A conversation
is expected when every one of its departing turns is. Any other change is unexpected, and a run
with an unexpected change fails. A conversation whose comparison had to stop after a departure
(the state differed, so later turns could not be compared) is *undecidable* past that turn:
it fails the run too, unless the run allows it (``--allow-undecidable``) or lists the
conversation.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from xml.etree import ElementTree

from replay.compare import ASPECTS
from replay.runner import ConversationReport, Departure

__all__ = ["Expectations", "ReplaySummary", "junit_xml", "report_json", "report_text"]


@dataclass(frozen=True)
class Expectations:
    """Which changes a run accepts: whole conversations, or changes limited to aspects."""

    sessions: frozenset[str] = frozenset()
    aspects: frozenset[str] = frozenset()
    allow_undecidable: bool = False

    @classmethod
    def parse(cls, tokens: Iterable[str], *, allow_undecidable: bool = False) -> Expectations:
        """Aspect names (``messages``, ``schedule``, ...) and otherwise session ids."""
        sessions: set[str] = set()
        aspects: set[str] = set()
        for token in tokens:
            (aspects if token in ASPECTS else sessions).add(token)
        return cls(frozenset(sessions), frozenset(aspects), allow_undecidable)

    def accepts(self, departure: Departure) -> bool:
        """Whether this one departing turn is an accepted change (by its aspects)."""
        return bool(self.aspects) and set(departure.aspects) <= self.aspects

    def expects(self, report: ConversationReport) -> bool:
        if not report.departures:
            return True
        if report.session_id in self.sessions:
            return True
        if not all(self.accepts(d) for d in report.departures):
            return False
        return report.undecidable_after is None or self.allow_undecidable


@dataclass
class ReplaySummary:
    """Counts over every conversation of a run, and the reports themselves."""

    reports: list[ConversationReport] = field(default_factory=list)
    expectations: Expectations = field(default_factory=Expectations)
    unrecorded_by_kind: Counter[str] = field(default_factory=Counter)

    def add(self, report: ConversationReport) -> None:
        self.reports.append(report)

    def count(self, status: str) -> int:
        return sum(1 for r in self.reports if r.status == status)

    @property
    def replayed(self) -> int:
        return sum(1 for r in self.reports if r.status != "skipped")

    @property
    def turns(self) -> int:
        return sum(r.replayed for r in self.reports)

    @property
    def unrecorded(self) -> int:
        return sum(r.unrecorded for r in self.reports)

    def unexpected(self) -> list[ConversationReport]:
        return [r for r in self.reports if r.status == "changed"
                and not self.expectations.expects(r)]

    @property
    def ok(self) -> bool:
        return not self.unexpected()

    def undecidable(self) -> list[ConversationReport]:
        return [r for r in self.reports if r.undecidable_after is not None]

    def counts(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "identical": self.count("identical"),
            "changed": self.count("changed"),
            "unexpected": len(self.unexpected()),
            "undecidable": len(self.undecidable()),
            "skipped": self.count("skipped"),
            "turns": self.turns,
            "unrecorded_calls": self.unrecorded,
            "unrecorded_by_kind": dict(sorted(self.unrecorded_by_kind.items())),
        }


def _departure_lines(report: ConversationReport, expectations: Expectations) -> list[str]:
    """Every departing turn of the conversation with its diff, then where the comparison
    stopped, if it had to."""
    listed = report.session_id in expectations.sessions
    out: list[str] = []
    for departure in report.departures:
        expected = listed or expectations.accepts(departure)
        tag = "expected change" if expected else "CHANGED"
        out.append(f"{tag}: {report.session_id} departs at turn {departure.turn} of "
                   f"{report.turns} ({departure.kind} at {departure.at})")
        if report.agents:
            out.append(f"  replayed against {', '.join(report.agents)}")
        if departure.unrecorded:
            out.append(f"  {departure.unrecorded} model call(s) of this turn had no recorded "
                       "reply")
        for difference in departure.differences:
            out.append(f"  {difference.aspect}:")
            out += [f"    {line}" for line in difference.diff()]
    if report.undecidable_after is not None:
        tag = "undecidable" if listed or expectations.allow_undecidable else "UNDECIDABLE"
        out.append(f"{tag}: {report.session_id} past turn {report.undecidable_after} of "
                   f"{report.turns}: {report.undecidable_reason}, so the later turns cannot "
                   "be compared")
    return out


def report_text(summary: ReplaySummary) -> str:
    """The report for a terminal: each departing conversation, then the summary line."""
    lines: list[str] = []
    for report in summary.reports:
        if report.status == "changed":
            lines += _departure_lines(report, summary.expectations)
            lines.append("")
        elif report.status == "skipped":
            lines.append(f"skipped: {report.session_id}: {report.skipped}")
    c = summary.counts()
    line = (f"replayed {c['replayed']} conversations ({c['turns']} turns): "
            f"{c['identical']} identical, {c['changed']} changed "
            f"({c['unexpected']} unexpected), {c['unrecorded_calls']} unrecorded model calls")
    if c["undecidable"]:
        line += f", {c['undecidable']} undecidable"
    if c["skipped"]:
        line += f", {c['skipped']} skipped"
    if c["unrecorded_by_kind"]:
        line += " (" + ", ".join(f"{k}: {n}" for k, n in c["unrecorded_by_kind"].items()) + ")"
    lines.append(line)
    return "\n".join(lines)


def _departure_json(departure: Departure, expected: bool) -> dict[str, Any]:
    return {
        "turn": departure.turn,
        "version": departure.version,
        "kind": departure.kind,
        "at": departure.at,
        "expected": expected,
        "unrecorded_calls": departure.unrecorded,
        "differences": [
            {"aspect": d.aspect, "recorded": d.recorded, "replayed": d.replayed,
             "diff": d.diff()}
            for d in departure.differences
        ],
    }


def _report_json(report: ConversationReport, expectations: Expectations) -> dict[str, Any]:
    out: dict[str, Any] = {
        "session_id": report.session_id,
        "status": report.status,
        "turns": report.turns,
        "replayed_turns": report.replayed,
        "unrecorded_calls": report.unrecorded,
    }
    if report.skipped is not None:
        out["skipped"] = report.skipped
    if report.agents:
        out["agents"] = report.agents
    if report.departures:
        listed = report.session_id in expectations.sessions
        out["expected"] = expectations.expects(report)
        departures = [_departure_json(d, listed or expectations.accepts(d))
                      for d in report.departures]
        out["departure"] = departures[0]  # the first, as before
        out["departures"] = departures
    if report.undecidable_after is not None:
        out["undecidable_after"] = report.undecidable_after
        out["undecidable_reason"] = report.undecidable_reason
    return out


def report_json(summary: ReplaySummary, **extra: Any) -> str:
    """The whole run as JSON: the summary counts and one entry per conversation."""
    body = {
        "summary": summary.counts(),
        **extra,
        "conversations": [_report_json(r, summary.expectations) for r in summary.reports],
    }
    return json.dumps(body, indent=2, ensure_ascii=False)


# Characters XML 1.0 cannot carry at all (a customer's message may hold any of them).
_NOT_XML = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _xml(text: str) -> str:
    return _NOT_XML.sub("\ufffd", text)


def junit_xml(summary: ReplaySummary, *, name: str = "turnflow replay") -> str:
    """One test case per conversation; an unexpected change is a failure with its diff."""
    suite = ElementTree.Element("testsuite", {
        "name": name,
        "tests": str(len(summary.reports)),
        "failures": str(len(summary.unexpected())),
        "skipped": str(summary.count("skipped")),
        "errors": "0",
    })
    for report in summary.reports:
        case = ElementTree.SubElement(
            suite, "testcase", {"classname": "replay", "name": _xml(report.session_id)})
        if report.status == "skipped":
            ElementTree.SubElement(case, "skipped", {"message": _xml(report.skipped or "")})
        elif report.status == "changed":
            expected = summary.expectations.expects(report)
            body = "\n".join(_departure_lines(report, summary.expectations))
            if expected:
                ElementTree.SubElement(case, "system-out").text = _xml(body)
            else:
                message = "; ".join(
                    f"departs at turn {d.turn}: " + ", ".join(d.aspects)
                    for d in report.departures)
                if report.undecidable_after is not None:
                    message += f"; undecidable past turn {report.undecidable_after}"
                failure = ElementTree.SubElement(case, "failure", {"message": message})
                failure.text = _xml(body)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)
