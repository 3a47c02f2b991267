"""The loopback demo's closing claims come from what the store recorded: a repair is the
supervisor's only when one of its attempts healed the endpoint."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from fleet_lab.demo.summary import SceneResult, summary
from supervisor.record.store.records import AttemptRow

T0 = datetime(2026, 11, 25, 7, 0, tzinfo=UTC)


def _attempt(rule: str, outcome: str | None, incident: int = 1) -> AttemptRow:
    return AttemptRow(
        id=1,
        endpoint="ds4",
        rule_id=rule,
        incident_id=incident,
        started_at=T0,
        finished_at=T0,
        outcome=outcome,
    )


def _scene(
    incident: int | None, *attempts: AttemptRow, recovered: bool = True, endpoint: str = "ds4"
) -> SceneResult:
    return SceneResult(endpoint=endpoint, incident=incident, recovered=recovered, attempts=attempts)


DEMO_UNDID_2 = (
    "The demo undid each of its 2 faults itself; the supervisor then saw a real completion pass "
    "and closed each incident ({} of 2)."
)


@pytest.mark.parametrize(
    ("results", "dry_run", "expected"),
    [
        (
            [_scene(1), _scene(2, endpoint="kimi")],
            True,
            [
                "The supervisor detected 2 of 2 faults and opened an incident for each.",
                "The supervisor repaired none of them: it runs observe-only here "
                "(remediation.dry_run), recording what it would do.",
                DEMO_UNDID_2.format(2),
            ],
        ),
        (
            [_scene(1), _scene(None, recovered=False)],
            False,
            [
                "The supervisor detected 1 of 2 faults and opened an incident for each.",
                "The supervisor repaired none of them: it made no repair attempt.",
                DEMO_UNDID_2.format(1),
            ],
        ),
        (
            [_scene(1, _attempt("restart-ds4", "failed: step 1 exited 1")), _scene(2)],
            False,
            [
                "The supervisor detected 2 of 2 faults and opened an incident for each.",
                "The supervisor repaired none of them (1 repair attempt, none healed).",
                DEMO_UNDID_2.format(2),
            ],
        ),
        (
            [
                _scene(1, _attempt("restart-ds4", "healed")),
                _scene(2, _attempt("relaunch", None), recovered=False),
            ],
            False,
            [
                "The supervisor detected 2 of 2 faults and opened an incident for each.",
                "The supervisor repaired 1 of them (ds4: restart-ds4).",
                DEMO_UNDID_2.format(1),
            ],
        ),
    ],
)
def test_the_closing_lines_claim_only_what_the_store_recorded(
    results: list[SceneResult], dry_run: bool, expected: list[str]
) -> None:
    assert summary(results, dry_run=dry_run) == expected
