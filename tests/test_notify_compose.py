"""The composer's words and decisions (pure), texts split under 4096, and the token's sources."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from supervisor.config.sections import TelegramConfig
from supervisor.core.actor import Actor
from supervisor.judge.machine import HostState, State, Trigger
from supervisor.playbook.actions.base import ActionOutcome
from supervisor.record.store.outbox import OutboxDraft
from supervisor.record.store.records import IncidentRow, SubjectKind, TimelineRow
from supervisor.record.timeline.base import Record
from supervisor.record.timeline.decision import Decision, Outcome
from supervisor.record.timeline.parts import ProbeSample
from supervisor.record.timeline.repair import Diagnosis, Escalation, Verification
from supervisor.record.timeline.state import Transition
from supervisor.repair.records import step_entry
from supervisor.repair.steps import StepRun
from supervisor.tell.telegram.auth import NotifyError, allowed, load_token
from supervisor.tell.telegram.compose import compose, tick
from supervisor.tell.telegram.memory import Memory, Settings
from supervisor.tell.telegram.texts import split

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
        symptom="connection refused",
        resolution=None,
        last_state="down",
        entries=1,
    )


def _row(record: Record, *, at: timedelta = timedelta(0), subject: str = "ds4") -> TimelineRow:
    return TimelineRow.of(record, id=1, incident_id=7, at=T0 + at, subject=subject)


def _sample(
    check: str, reason: str = "", ttft_s: float | None = None, tok_s: float | None = None
) -> ProbeSample:
    outcome = "fail" if reason else "ok"
    return ProbeSample(
        at=T0, tier="deep", check=check, outcome=outcome, reason=reason, ttft_s=ttft_s, tok_s=tok_s
    )


def _moved(
    source: str,
    dest: str,
    note: str,
    trigger: str,
    *,
    at: timedelta = timedelta(0),
    subject: str = "ds4",
    **fields: Any,
) -> TimelineRow:
    """A transition as the worker (or, `of_host`, a host watcher) records it."""
    states: type[State] | type[HostState] = HostState if fields.get("of_host") else State
    record = Transition(
        source=states(source), dest=states(dest), note=note, trigger=Trigger(trigger), **fields
    )
    return _row(record, at=at, subject=subject)


PROBE = _sample("completion", ttft_s=0.41, tok_s=38.2)
DOWN = _moved(
    "healthy",
    "down",
    "2 failures confirmed",
    "confirm_down",
    probes=(),
    probe=_sample("health", "connection refused"),
)
UP = _moved("down", "healthy", "passed", "pass_check", at=timedelta(minutes=3), probe=PROBE)


@pytest.mark.parametrize(
    ("row", "memory", "kind", "text"),
    [
        (DOWN, Memory(), "opened", "🔴 <b>ds4</b> is down: connection refused\nincident #7"),
        (
            _row(Diagnosis(endpoint="ds4", state="down", rule="stale-listener", scopes=("<h>",))),
            Memory(downs=1),
            "diagnosis",
            "🔎 ds4 diagnosis: ds4 (down): stale-listener matched on &lt;h&gt;",
        ),
        (
            _row(
                Decision(
                    outcome=Outcome.DRY_RUN_PLAN,
                    rule="restart",
                    budget="1 of 3",
                    plan=("restart_units",),
                )
            ),
            Memory(downs=1),
            "plan",
            "📝 ds4: dry run: would apply restart (1 of 3): restart_units",
        ),
        (
            _row(Escalation(why="no rule matched", dry_run=True)),
            Memory(downs=1),
            "plan",
            "📝 ds4: dry run: would escalate: no rule matched",
        ),
        (
            _moved("down", "remediating", "applying r1 (1 of 3): restart", "remediate", rule="r1"),
            Memory(downs=1),
            "repairing",
            "🔧 repairing ds4: applying r1 (1 of 3): restart",
        ),
        (
            _row(Verification(rule="r1", ok=True, within_s=120)),
            Memory(downs=1),
            "repair",
            "✅ ds4 repair: verified: r1 healed it",
        ),
        (
            _row(Verification(rule="r1", ok=False, within_s=120)),
            Memory(downs=1),
            "repair",
            "❌ ds4 repair: r1: not verified within 2m",
        ),
        (
            _moved(
                "down",
                "escalated",
                "a person is needed: no rule matched",
                "escalate",
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
            Memory(downs=1),
            "resolved",
            "✅ <b>ds4</b> is healthy again after 3m: completion passed (ttft 0.41s, 38.2 tok/s)\n"
            "fixed by: nothing we did: it recovered by itself",
        ),
    ],
)
def test_each_incident_kind_has_its_words(
    row: TimelineRow, memory: Memory, kind: str, text: str
) -> None:
    drafts, _ = compose(row, _incident(), memory, SETTINGS)
    assert [(d.kind, d.text, d.incident_id) for d in drafts] == [(kind, text, 7)]


HEAD = "vllm-ds4-head.service@spark1"


def _step(number: int, action: str, ok: bool = True, *, dry_run: bool = False) -> TimelineRow:
    """A step's entry as the repair runner records it (`records.step_entry`)."""
    outcome = ActionOutcome(ok=ok, summary="done" if ok else "exit 1")
    run = StepRun(index=number - 1, action=action, target=HEAD, outcome=outcome)
    entry = step_entry(run, "ds4", T0 + timedelta(minutes=1), dry_run=dry_run)
    return TimelineRow.of(entry.record, id=1, incident_id=7, at=entry.at, subject=entry.subject)


def _move(source: str, dest: str, note: str, trigger: str, **fields: Any) -> TimelineRow:
    """An endpoint's transition a minute in, `trigger` as the worker records it."""
    return _moved(source, dest, note, trigger, at=timedelta(minutes=1), **fields)


REMEDIATE = _move(
    "down", "remediating", "applying r1 (1 of 3): restart the head", "remediate", rule="r1"
)
VERIFY = _move(
    "remediating", "verifying", "r1 done: a real completion must pass within 2m", "verify"
)
VERIFIED = _row(Verification(rule="r1", ok=True, within_s=120), at=timedelta(minutes=3))
PASSED = "completion passed (ttft 0.41s, 38.2 tok/s)"


def _up(source: str) -> TimelineRow:
    return _moved(source, "healthy", "passed", "pass_check", at=timedelta(minutes=3), probe=PROBE)


@pytest.mark.parametrize(
    ("timeline", "fixed_by"),
    [
        pytest.param(
            [DOWN, REMEDIATE, _step(1, "stop_units"), _step(2, "restart_units"), VERIFY],
            f"r1 (stop_units on {HEAD}; restart_units on {HEAD})",
            id="healed by a repair",
        ),
        pytest.param([DOWN], "nothing we did: it recovered by itself", id="recovered by itself"),
        pytest.param(
            [
                DOWN,
                _step(1, "restart_units"),
                _move("down", "starting", "restarted by @op", "restarted", actor=Actor(who="@op")),
            ],
            f"/restart by @op (restart_units on {HEAD})",
            id="healed after a manual /restart",
        ),
        pytest.param(
            [DOWN, REMEDIATE, VERIFY],
            "nothing we did: it recovered by itself",
            id="a rule with no step (cold-start waits)",
        ),
        pytest.param(
            [
                DOWN,
                REMEDIATE,
                _step(1, "restart_units"),
                VERIFY,
                _move("verifying", "down", "r1: not verified within 2m", "verify_failed"),
            ],
            "nothing we did: it recovered by itself",
            id="a repair that was not verified",
        ),
        pytest.param(
            [
                DOWN,
                REMEDIATE,
                _step(1, "restart_units"),
                _step(2, "wait_healthy", ok=False),
                _move("remediating", "escalated", "a person is needed: step 2 failed", "escalate"),
            ],
            "nothing we did: it recovered by itself",
            id="a repair whose step failed",
        ),
        pytest.param(
            [DOWN, _step(1, "restart_units", dry_run=True)],
            "nothing we did: it recovered by itself",
            id="a dry run only planned",
        ),
        pytest.param(
            [
                DOWN,
                _step(1, "restart_units"),
                _move("down", "starting", "restarted (pid 4)", "restarted", reason="pid 4"),
            ],
            "nothing we did: it recovered by itself",
            id="a restart nobody here asked for",
        ),
    ],
)
def test_resolved_names_what_fixed_it(timeline: list[TimelineRow], fixed_by: str) -> None:
    """The repair's verification entry is written after the transition to healthy (the runner
    learns of the heal from it), so the words come from what the timeline held before."""
    moves = [r.record for r in timeline if isinstance(r.record, Transition)]
    source = moves[-1].dest  # where it was before healthy
    memory = Memory()
    for row in timeline:
        _, memory = compose(row, _incident(), memory, SETTINGS)
    drafts, memory = compose(_up(source), _incident(), memory, SETTINGS)
    assert [(d.kind, d.text) for d in drafts] == [
        ("resolved", f"✅ <b>ds4</b> is healthy again after 3m: {PASSED}\nfixed by: {fixed_by}")
    ]


def test_the_verification_after_the_heal_is_still_told() -> None:
    memory = Memory()
    for row in (DOWN, REMEDIATE, _step(1, "restart_units"), VERIFY, _up("verifying")):
        _, memory = compose(row, _incident(), memory, SETTINGS)
    drafts, _ = compose(VERIFIED, _incident(), memory, SETTINGS)
    assert [d.text for d in drafts] == ["✅ ds4 repair: verified: r1 healed it"]


def test_a_fix_is_not_carried_into_the_next_recovery() -> None:
    """Healed by r1, down again, up by itself: the held "resolved" does not credit r1."""
    memory = Memory()
    timeline = [DOWN, REMEDIATE, _step(1, "restart_units"), VERIFY, _up("verifying"), DOWN]
    for row in [*timeline, _up("down")]:
        drafts, memory = compose(row, _incident(), memory, SETTINGS)
    assert drafts == []  # held: it went down twice
    assert memory.held.endswith("\nfixed by: nothing we did: it recovered by itself")


SPARK1 = _incident(SubjectKind.HOST, "spark1")
GSP_WHY = (
    "ds4: a host serving it no longer answers SSH (the host's incident names it). If it is a GB10 "
    "box mid MoE init, power-cycle every node of the pair; nothing is retried."
)
RUNBOOK = "# A Spark stopped answering: GPU firmware hang\n\nA host serving the endpoint <...>"


def _escalated(endpoint: str, why: str, rule: str) -> TimelineRow:
    return _moved(
        "unreachable",
        "escalated",
        f"a person is needed: {why}",
        "escalate",
        at=timedelta(minutes=2),
        subject=endpoint,
        why=why,
        rule=rule,
        runbook=RUNBOOK,
    )


def _host(source: str, dest: str, note: str, at: timedelta = timedelta(0)) -> TimelineRow:
    trigger = "host_back" if dest == "reachable" else "host_lost"
    return _moved(source, dest, note, trigger, at=at, subject="spark1", of_host=True)


def test_an_endpoint_escalated_inside_its_hosts_incident_calls_a_person() -> None:
    """spark1 stops answering: one message for the host, then one 🆘 in its thread for the
    power-cycle (not one per endpoint), reminders until /ack, and the host's recovery."""
    timeline = [
        _host("reachable", "unreachable", "ssh timed out"),
        _moved("healthy", "unreachable", "host spark1 does not answer", "host_lost"),
        _moved("healthy", "unreachable", "host spark1 does not answer", "host_lost", subject="emb"),
        _row(
            Diagnosis(
                endpoint="ds4", state="unreachable", rule="gsp-firmware-hang", scopes=("ds4",)
            )
        ),
        _row(Escalation(why=GSP_WHY, runbook="runbooks/gsp-firmware-hang.md")),
        _escalated("ds4", GSP_WHY, "gsp-firmware-hang"),
        _escalated("emb", GSP_WHY.replace("ds4:", "emb:"), "gsp-firmware-hang"),
        _escalated("emb", "no rule matched: a person must look", ""),
    ]
    memory = Memory()
    drafts: list[OutboxDraft] = []
    for row in timeline:
        made, memory = compose(row, SPARK1, memory, SETTINGS)
        drafts += made
    assert [(d.kind, d.text, d.incident_id) for d in drafts] == [
        (
            "opened",
            "🔴 host <b>spark1</b> does not answer: ssh timed out\n"
            "its endpoints are unreachable until it answers: ds4, emb (no alert per endpoint)\n"
            "incident #7",
            7,
        ),
        (
            "escalated",
            "🆘 <b>a person is needed</b> on ds4 (host spark1): ds4: a host serving it no longer "
            "answers SSH (the host's incident names it). If it is a GB10 box mid MoE init, "
            "power-cycle every node of the pair; nothing is retried.\nrunbook:\n"
            "# A Spark stopped answering: GPU firmware hang\n\n"
            "A host serving the endpoint &lt;...&gt;\n/ack 7 stops the reminders",
            7,
        ),
        (
            "escalated",
            "🆘 <b>a person is needed</b> on emb (host spark1): no rule matched: a person must look"
            "\nrunbook:\n# A Spark stopped answering: GPU firmware hang\n\n"
            "A host serving the endpoint &lt;...&gt;\n/ack 7 stops the reminders",
            7,
        ),
    ]
    reminders, memory = tick(SPARK1, memory, T0 + timedelta(minutes=32), SETTINGS)
    assert [d.text for d in reminders] == [
        "⏰ still needs a person: spark1 (incident #7, escalated 30m ago): no rule matched: a "
        "person must look\n/ack 7 stops these reminders"
    ]
    back = _host("unreachable", "reachable", "answers again", timedelta(minutes=40))
    drafts, memory = compose(back, SPARK1, memory, SETTINGS)
    assert [d.text for d in drafts] == ["✅ host <b>spark1</b> answers again after 40m"]
    assert not memory.active


def test_an_endpoints_escalation_is_not_told_in_another_endpoints_incident() -> None:
    """Only a host's incident speaks for other subjects' entries."""
    assert compose(_escalated("emb", GSP_WHY, "r"), _incident(), Memory(downs=1), SETTINGS)[0] == []


def test_a_host_speaks_once_for_its_endpoints() -> None:
    host = _incident(SubjectKind.HOST, "spark1")
    lost = _host("reachable", "unreachable", "timed out")
    drafts, memory = compose(lost, host, Memory(), SETTINGS)
    assert [d.text for d in drafts] == [
        "🔴 host <b>spark1</b> does not answer: timed out\n"
        "its endpoints are unreachable until it answers: ds4, emb (no alert per endpoint)\n"
        "incident #7"
    ]
    copied = _moved("healthy", "unreachable", "host spark1 does not answer", "host_lost")
    assert compose(copied, host, memory, SETTINGS)[0] == []
    back = _host("unreachable", "reachable", "answers again", timedelta(seconds=90))
    assert [d.text for d in compose(back, host, memory, SETTINGS)[0]] == [
        "✅ host <b>spark1</b> answers again after 1m30s"
    ]


def test_the_same_diagnosis_is_said_once_per_incident() -> None:
    row = _row(Diagnosis(endpoint="ds4", state="down"))
    first, memory = compose(row, _incident(), Memory(downs=1), SETTINGS)
    again, _ = compose(row, _incident(), memory, SETTINGS)
    assert (len(first), again) == (1, [])


def test_a_flapping_incident_is_coalesced() -> None:
    incident = _incident()
    memory = Memory()
    kinds: list[str] = []
    for i in range(12):  # down/up every 10 s for 2 minutes
        down = _moved(
            "healthy",
            "down",
            "x",
            "confirm_down",
            at=timedelta(seconds=10 * i),
            probes=(),
            probe=_sample("health", "connection refused"),
        )
        up = _moved(
            "down", "healthy", "x", "pass_check", at=timedelta(seconds=10 * i + 5), probe=PROBE
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


BUSY_CAUSE = "busy: 48 running, 20 waiting, 940 tok/s generated"


def _busy_incident(closed: bool = False) -> IncidentRow:
    return IncidentRow(
        **{
            **_incident().__dict__,
            "symptom": BUSY_CAUSE,
            "last_state": "busy",
            "closed_at": T0 + timedelta(minutes=20) if closed else None,
        }
    )


def _went_busy() -> TimelineRow:
    return _moved(
        "healthy",
        "busy",
        BUSY_CAUSE,
        "confirm_busy",
        probes=(),
        probe=_sample("completion", "timed out after 30s"),
    )


def test_busy_is_told_once_when_it_lasts_and_again_when_it_ends() -> None:
    incident = _busy_incident()
    drafts, memory = compose(_went_busy(), incident, Memory(), SETTINGS)
    assert drafts == []
    assert memory.active  # waiting on time
    assert tick(incident, memory, T0 + timedelta(minutes=14), SETTINGS)[0] == []
    drafts, memory = tick(incident, memory, T0 + timedelta(minutes=15), SETTINGS)
    assert [d.text for d in drafts] == [
        f"🟡 <b>ds4</b> has been busy for 15m: {BUSY_CAUSE}\n"
        "not restarted: a saturated server is load, not a fault (add capacity or shed load)\n"
        "incident #7"
    ]
    assert [d.kind for d in drafts] == ["busy"]
    assert tick(incident, memory, T0 + timedelta(hours=2), SETTINGS)[0] == []
    assert not memory.active
    over = _moved(
        "busy", "healthy", "real check passed", "pass_check", at=timedelta(minutes=20), probe=PROBE
    )
    drafts, memory = compose(over, _busy_incident(closed=True), memory, SETTINGS)
    assert [d.text for d in drafts] == ["🟢 ds4 is no longer busy (it was for 20m)"]


def test_a_short_busy_spell_says_nothing() -> None:
    incident = _busy_incident()
    _, memory = compose(_went_busy(), incident, Memory(), SETTINGS)
    over = _moved(
        "busy", "healthy", "real check passed", "pass_check", at=timedelta(minutes=3), probe=PROBE
    )
    drafts, memory = compose(over, incident, memory, SETTINGS)
    assert drafts == []
    assert tick(incident, memory, T0 + timedelta(hours=1), SETTINGS)[0] == []


def test_busy_then_hung_is_a_problem_told_at_once() -> None:
    incident = _busy_incident()
    _, memory = compose(_went_busy(), incident, Memory(), SETTINGS)
    hung = _moved(
        "busy",
        "down",
        "hung: 3 running, 0 waiting, generation_tokens_total frozen at 412 for 5.0s",
        "confirm_down",
        at=timedelta(minutes=1),
        probes=(),
        probe=_sample("completion", "timed out after 30s"),
    )
    drafts, memory = compose(hung, incident, memory, SETTINGS)
    assert [d.kind for d in drafts] == ["opened"]
    assert memory.busy_since is None


def test_each_repair_attempt_is_told_even_in_the_same_words() -> None:
    """The composer knows a record by its identity (here the row: a new attempt), not by the
    line it renders: a second attempt worded like the first is told; the same row read again
    (the composer's cursor replayed after a restart) is not."""
    record = REMEDIATE.record
    first = TimelineRow.of(record, id=11, incident_id=7, at=T0, subject="ds4")
    second = TimelineRow.of(record, id=15, incident_id=7, at=T0, subject="ds4")
    told, memory = compose(first, _incident(), Memory(downs=1), SETTINGS)
    replayed, memory = compose(first, _incident(), memory, SETTINGS)
    again, _ = compose(second, _incident(), memory, SETTINGS)
    assert [d.kind for d in told + replayed + again] == ["repairing", "repairing"]


def test_a_backend_s_opening_names_the_routes_it_blocks() -> None:
    """The one incident of a backend behind a router says which routes wait on it (they are
    blocked, with no alert of their own)."""
    settings = replace(SETTINGS, routes_behind={"ds4": ("ds4-via-door", "ds4-via-swap")})
    drafts, _ = compose(DOWN, _incident(), Memory(), settings)
    assert [d.text for d in drafts] == [
        "🔴 <b>ds4</b> is down: connection refused\nblocked by it while it fails: "
        "ds4-via-door, ds4-via-swap (no alert per route)\nincident #7"
    ]
