"""``Flow.step`` and ``Flow.index`` read the positions built when the flow was validated; they
answer as a scan of ``steps`` would, on the flow and on every kind of copy of it."""

from __future__ import annotations

import copy

from engine.config import Flow

STEPS = [{"id": "a", "say": "oi"}, {"id": "b", "wait": {"ms": 10}}, {"id": "c", "say": "fim"}]


def test_step_and_index_answer_as_a_scan_on_every_copy() -> None:
    flow = Flow.model_validate({"id": "f", "steps": STEPS})
    copies = [
        flow,
        flow.model_copy(),
        flow.model_copy(deep=True),
        copy.deepcopy(flow),
        Flow.model_validate(flow.model_dump(by_alias=True, exclude_none=True)),
    ]
    for each in copies:
        for i, step in enumerate(each.steps):
            assert each.step(step.id) is step
            assert each.index(step.id) == i
        assert each.step("zz") is None and each.index("zz") == -1


def test_a_duplicate_step_id_finds_its_first_step() -> None:
    flow = Flow.model_validate({"id": "f", "steps": [*STEPS, {"id": "a", "say": "de novo"}]})
    assert flow.index("a") == 0 and flow.step("a") is flow.steps[0]
