"""The replay's report: a summary, each departing conversation with its diff, and the same in
JSON and JUnit XML for CI.

A change is *expected* when its conversation is listed, or when every aspect it changed is
listed (``--expect-changes messages`` accepts new wording but not a new route). Any other
change is unexpected, and a run with an unexpected change fails.
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
from replay.runner import ConversationReport

__all__ = ["Expectations", "ReplaySummary", "junit_xml", "report_json", "report_text"]


@dataclass(frozen=True)
class Expectations:
    """Which changes a run accepts: whole conversations, or changes limited to aspects."""

    sessions: frozenset[str] = frozenset()
    aspects: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, tokens: Iterable[str]) -> Expectations:
        """Aspect names (``messages``, ``schedule``, ...) and otherwise session ids."""
        sessions: set[str] = set()
        aspects: set[str] = set()
        for token in tokens:
            (aspects if token in ASPECTS else sessions).add(token)
        return cls(frozenset(sessions), frozenset(aspects))

    def expects(self, report: ConversationReport) -> bool:
        if report.departure is None:
            return True
        if report.session_id in self.sessions:
            return True
        return bool(self.aspects) and set(report.departure.aspects) <= self.aspects


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

    def counts(self) -> dict[str, Any]:
        return {
            "replayed": self.replayed,
            "identical": self.count("identical"),
            "changed": self.count("changed"),
            "unexpected": len(self.unexpected()),
            "skipped": self.count("skipped"),
            "turns": self.turns,
            "unrecorded_calls": self.unrecorded,
            "unrecorded_by_kind": dict(sorted(self.unrecorded_by_kind.items())),
        }


def _departure_lines(report: ConversationReport, expected: bool) -> list[str]:
    departure = report.departure
    assert departure is not None
    tag = "expected change" if expected else "CHANGED"
    out = [f"{tag}: {report.session_id} departs at turn {departure.turn} of {report.turns} "
           f"({departure.kind} at {departure.at})"]
    if departure.unrecorded:
        out.append(f"  {departure.unrecorded} model call(s) of this turn had no recorded reply")
    for difference in departure.differences:
        out.append(f"  {difference.aspect}:")
        out += [f"    {line}" for line in difference.diff()]
    return out


def report_text(summary: ReplaySummary) -> str:
    """The report for a terminal: each departing conversation, then the summary line."""
    lines: list[str] = []
    for report in summary.reports:
        if report.status == "changed":
            lines += _departure_lines(report, summary.expectations.expects(report))
            lines.append("")
        elif report.status == "skipped":
            lines.append(f"skipped: {report.session_id}: {report.skipped}")
    c = summary.counts()
    line = (f"replayed {c['replayed']} conversations ({c['turns']} turns): "
            f"{c['identical']} identical, {c['changed']} changed "
            f"({c['unexpected']} unexpected), {c['unrecorded_calls']} unrecorded model calls")
    if c["skipped"]:
        line += f", {c['skipped']} skipped"
    if c["unrecorded_by_kind"]:
        line += " (" + ", ".join(f"{k}: {n}" for k, n in c["unrecorded_by_kind"].items()) + ")"
    lines.append(line)
    return "\n".join(lines)


def _report_json(report: ConversationReport, expected: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "session_id": report.session_id,
        "status": report.status,
        "turns": report.turns,
        "replayed_turns": report.replayed,
        "unrecorded_calls": report.unrecorded,
    }
    if report.skipped is not None:
        out["skipped"] = report.skipped
    departure = report.departure
    if departure is not None:
        out["expected"] = expected
        out["departure"] = {
            "turn": departure.turn,
            "version": departure.version,
            "kind": departure.kind,
            "at": departure.at,
            "unrecorded_calls": departure.unrecorded,
            "differences": [
                {"aspect": d.aspect, "recorded": d.recorded, "replayed": d.replayed,
                 "diff": d.diff()}
                for d in departure.differences
            ],
        }
    return out


def report_json(summary: ReplaySummary, **extra: Any) -> str:
    """The whole run as JSON: the summary counts and one entry per conversation."""
    body = {
        "summary": summary.counts(),
        **extra,
        "conversations": [_report_json(r, summary.expectations.expects(r))
                          for r in summary.reports],
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
            body = "\n".join(_departure_lines(report, expected))
            if expected:
                ElementTree.SubElement(case, "system-out").text = _xml(body)
            else:
                assert report.departure is not None
                failure = ElementTree.SubElement(case, "failure", {
                    "message": f"departs at turn {report.departure.turn}: "
                    + ", ".join(report.departure.aspects),
                })
                failure.text = _xml(body)
    return ElementTree.tostring(suite, encoding="unicode", xml_declaration=True)
