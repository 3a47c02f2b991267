"""The composer's words and decisions (pure), texts split under 4096, and the token's sources."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from supervisor.config.models import TelegramConfig
from supervisor.notify.auth import NotifyError, allowed, load_token
from supervisor.notify.compose import Memory, Settings, compose, tick
from supervisor.notify.texts import split
from supervisor.store import EntryKind, IncidentRow, JSONValue, SubjectKind, TimelineRow

T0 = datetime(2026, 11, 23, 3, 0, 0, tzinfo=UTC)
SETTINGS = Settings(
    remind_every=timedelta(minutes=30),
    flap_every=timedelta(minutes=5),
    settle=timedelta(minutes=10),
    host_endpoints={"spark1": ("ds4", "emb")},
)


def _incident(kind: SubjectKind = SubjectKind.ENDPOINT, subject: str = "ds4") -> IncidentRow:
    return IncidentRow(
        id=7,
        subject_kind=kind,
        subject=subject,
        opened_at=T0,
        closed_at=None,
        cause="connection refused",
        resolution=None,
        last_state="down",
        entries=1,
    )


def _row(
    kind: EntryKind,
    summary: str,
    *,
    at: timedelta = timedelta(0),
    subject: str = "ds4",
    **data: JSONValue,
) -> TimelineRow:
    return TimelineRow(
        id=1, incident_id=7, at=T0 + at, kind=kind, subject=subject, summary=summary, data=data
    )


PROBE: dict[str, JSONValue] = {"check": "completion", "reason": "", "ttft_s": 0.41, "tok_s": 38.2}
DOWN = _row(
    EntryKind.TRANSITION,
    "healthy -> down: 2 failures confirmed",
    trigger="confirm_down",
    probes=[],
    probe={"check": "health", "reason": "connection refused"},
)
UP = _row(
    EntryKind.TRANSITION,
    "down -> healthy: passed",
    at=timedelta(minutes=3),
    trigger="pass_check",
    probe=PROBE,
)


@pytest.mark.parametrize(
    ("row", "memory", "kind", "text"),
    [
        (DOWN, Memory(), "opened", "🔴 <b>ds4</b> is down: connection refused\nincident #7"),
        (
            _row(EntryKind.DIAGNOSIS, "matched stale-listener: port 29501 <held>"),
            Memory(downs=1),
            "diagnosis",
            "🔎 ds4 diagnosis: matched stale-listener: port 29501 &lt;held&gt;",
        ),
        (
            _row(EntryKind.DECISION, "dry run: would apply restart (1 of 3): restart_units"),
            Memory(downs=1),
            "plan",
            "📝 ds4: dry run: would apply restart (1 of 3): restart_units",
        ),
        (
            _row(
                EntryKind.TRANSITION,
                "down -> remediating: applying r1 (1 of 3): restart",
                trigger="remediate",
            ),
            Memory(downs=1),
            "repairing",
            "🔧 repairing ds4: applying r1 (1 of 3): restart",
        ),
        (
            _row(EntryKind.VERIFICATION, "verified: r1 healed it"),
            Memory(downs=1),
            "repair",
            "✅ ds4 repair: verified: r1 healed it",
        ),
        (
            _row(
                EntryKind.TRANSITION,
                "down -> escalated: a person is needed: no rule matched",
                trigger="escalate",
                why="no rule matched: a person must look",
                runbook="# Cold start\nvLLM takes 9 min to load",
            ),
            Memory(downs=1),
            "escalated",
            "🆘 <b>a person is needed</b> on ds4: no rule matched: a person must look\nrunbook:\n"
            "# Cold start\nvLLM takes 9 min to load\n/ack 7 stops the reminders",
        ),
        (
            UP,
            Memory(downs=1, fixed_by="r1 healed it"),
            "resolved",
            "✅ <b>ds4</b> is healthy again after 3m: completion passed (ttft 0.41s, 38.2 tok/s)\n"
            "fixed by: r1 healed it",
        ),
    ],
)
def test_each_incident_kind_has_its_words(
    row: TimelineRow, memory: Memory, kind: str, text: str
) -> None:
    drafts, _ = compose(row, _incident(), memory, SETTINGS)
    assert [(d.kind, d.text, d.incident_id) for d in drafts] == [(kind, text, 7)]


def test_a_host_speaks_once_for_its_endpoints() -> None:
    host = _incident(SubjectKind.HOST, "spark1")
    lost = _row(EntryKind.TRANSITION, "host reachable -> unreachable: timed out", subject="spark1")
    drafts, memory = compose(lost, host, Memory(), SETTINGS)
    assert [d.text for d in drafts] == [
        "🔴 host <b>spark1</b> does not answer: timed out\n"
        "its endpoints are unreachable until it answers: ds4, emb (no alert per endpoint)\n"
        "incident #7"
    ]
    copied = _row(EntryKind.TRANSITION, "healthy -> unreachable: host spark1 does not answer")
    assert compose(copied, host, memory, SETTINGS)[0] == []
    back = _row(
        EntryKind.TRANSITION,
        "host unreachable -> reachable: answers again",
        at=timedelta(seconds=90),
        subject="spark1",
    )
    assert [d.text for d in compose(back, host, memory, SETTINGS)[0]] == [
        "✅ host <b>spark1</b> answers again after 1m30s"
    ]


def test_the_same_diagnosis_is_said_once_per_incident() -> None:
    row = _row(EntryKind.DIAGNOSIS, "no rule matched")
    first, memory = compose(row, _incident(), Memory(downs=1), SETTINGS)
    again, _ = compose(row, _incident(), memory, SETTINGS)
    assert (len(first), again) == (1, [])


def test_a_flapping_incident_is_coalesced() -> None:
    incident = _incident()
    memory = Memory()
    kinds: list[str] = []
    for i in range(12):  # down/up every 10 s for 2 minutes
        down = _row(
            EntryKind.TRANSITION,
            "healthy -> down: x",
            at=timedelta(seconds=10 * i),
            trigger="confirm_down",
            probes=[],
            probe={"reason": "connection refused"},
        )
        up = _row(
            EntryKind.TRANSITION,
            "down -> healthy: x",
            at=timedelta(seconds=10 * i + 5),
            trigger="pass_check",
            probe=PROBE,
        )
        for row in (down, up):
            drafts, memory = compose(row, incident, memory, SETTINGS)
            kinds += [d.kind for d in drafts]
    assert kinds == ["opened", "resolved", "flapping"]
    closed = IncidentRow(**{**incident.__dict__, "closed_at": T0 + timedelta(seconds=115)})
    assert tick(closed, memory, T0 + timedelta(minutes=5), SETTINGS)[0] == []
    drafts, memory = tick(closed, memory, T0 + timedelta(minutes=12), SETTINGS)
    assert [d.text.split(":")[0] for d in drafts] == [
        "✅ <b>ds4</b> is healthy again after 1m55s (it went down 12 times)"
    ]
    assert not memory.active


def test_reminders_until_acknowledged() -> None:
    memory = Memory(downs=1, escalated_at=T0, why="no rule matched")
    incident = _incident()
    assert tick(incident, memory, T0 + timedelta(minutes=29), SETTINGS)[0] == []
    drafts, memory = tick(incident, memory, T0 + timedelta(minutes=30), SETTINGS)
    assert [d.text for d in drafts] == [
        "⏰ still needs a person: ds4 (incident #7, escalated 30m ago): no rule matched\n"
        "/ack 7 stops these reminders"
    ]
    assert tick(incident, memory, T0 + timedelta(minutes=45), SETTINGS)[0] == []
    acked = Memory.from_json({**memory.to_json(), "acked_by": "@op"})
    assert tick(incident, acked, T0 + timedelta(hours=5), SETTINGS)[0] == []
    assert not acked.active


@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("short", ["short"]),
        ("a" * 4096, ["a" * 4096]),
        ("a" * 4000 + "\n" + "b" * 200, ["a" * 4000, "b" * 200]),
        ("x" * 4094 + "&amp;y", ["x" * 4094, "&amp;y"]),
        ("x" * 4094 + "<b>y</b>", ["x" * 4094, "<b>y</b>"]),
    ],
)
def test_texts_split_under_4096(text: str, parts: list[str]) -> None:
    assert split(text) == parts


def test_a_long_text_splits_into_parts_that_rejoin() -> None:
    text = "\n".join(f"line {i} " + "z" * 90 for i in range(200))
    parts = split(text)
    assert all(len(p) <= 4096 for p in parts)
    assert len(parts) > 4
    assert "\n".join(parts) == text


@pytest.mark.parametrize(
    ("setup", "message"),
    [
        (
            "missing-file",
            "cannot read the Telegram token file {dir}/nope: No such file or directory",
        ),
        ("empty-file", "the Telegram token file {dir}/token is empty"),
        ("no-env", "no Telegram token: set notify.telegram.token_file or $FLEET_TOKEN"),
    ],
)
def test_token_errors_are_one_plain_line(tmp_path: Path, setup: str, message: str) -> None:
    (tmp_path / "token").write_text("\n")
    path = {"missing-file": tmp_path / "nope", "empty-file": tmp_path / "token"}.get(setup)
    config = TelegramConfig(token_file=path, token_env="FLEET_TOKEN")
    with pytest.raises(NotifyError) as caught:
        load_token(config, {})
    assert str(caught.value) == message.format(dir=tmp_path)


def test_token_from_file_then_env(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("123:abc\n")
    assert load_token(TelegramConfig(token_file=tmp_path / "token"), {}) == "123:abc"
    assert load_token(TelegramConfig(token_env="T"), {"T": " 9:z "}) == "9:z"


@pytest.mark.parametrize(
    ("user", "chat", "ok"),
    [(1, -100, True), (2, -100, False), (1, -200, False), (None, -100, False), (1, None, False)],
)
def test_only_listed_users_in_listed_chats(user: int | None, chat: int | None, ok: bool) -> None:
    config = TelegramConfig(user_ids=(1,), chat_ids=(-100,))
    assert allowed(config, user_id=user, chat_id=chat) is ok
