"""Availability from a real store built by the spec (a SQLite file, then PostgreSQL): known
up, down, silenced and unsupervised intervals give exactly the seconds and ratios expected
(silences and the time nobody supervised counted apart, never as down); incidents per day with
their causes; the mean time to repair per endpoint and per rule."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from supervisor.judge.machine import State, Trigger
from supervisor.record.availability import Repair, availability, days, repairs
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.store.target import StoreTarget
from supervisor.record.timeline.repair import Diagnosis
from supervisor.record.timeline.state import Transition

T0 = datetime(2026, 11, 1, tzinfo=UTC)
H = timedelta(hours=1)
EP = SubjectKind.ENDPOINT


@pytest.fixture
async def store(store_target: StoreTarget) -> AsyncIterator[Store]:
    opened = await Store.open(store_target)
    try:
        yield opened
    finally:
        await opened.close()


async def enter(
    store: Store, name: str, source: str, dest: str, at: datetime, *, cause: str | None = None
) -> int | None:
    record = Transition(source=State(source), dest=State(dest), trigger=Trigger.PASS, note="spec")
    return await store.transition(
        snapshot=Snapshot(kind=EP, name=name, state=dest, since=at, updated_at=at),
        entry=TimelineEntry(at=at, subject=name, record=record),
        open_cause=cause,
        close_resolution="passes again" if dest == "healthy" and source != "maintenance" else None,
    )


async def test_up_down_silenced_and_unsupervised_time_add_up_per_window(store: Store) -> None:
    # run 1 from T0: a healthy; down 10h-12h (repaired), silenced 20h-22h, daemon gone 30h-34h
    await store.supervising(T0, [(EP, "a", "healthy")])
    await enter(store, "a", "healthy", "down", T0 + 10 * H, cause="connection refused")
    await enter(store, "a", "down", "remediating", T0 + 11 * H)
    await enter(store, "a", "remediating", "healthy", T0 + 12 * H)
    await enter(store, "a", "healthy", "maintenance", T0 + 20 * H)
    await enter(store, "a", "maintenance", "healthy", T0 + 22 * H)
    await store.supervised(T0, T0 + 30 * H)
    await store.supervising(T0 + 34 * H, [(EP, "a", "healthy")])  # run 2

    found = await availability(store, [(EP, "a"), (EP, "never")], now=T0 + 48 * H)
    day = found[(EP, "a")]["24h"]  # 24h..48h: serving 24h-30h and 34h-48h, unsupervised 4h
    assert (day.serving_s, day.down_s, day.silenced_s, day.unsupervised_s) == (
        20 * 3600,
        0,
        0,
        4 * 3600,
    )
    assert day.ratio == 1.0
    week = found[(EP, "a")]["7d"]  # before T0: nobody knew it
    assert week.down_s == 2 * 3600
    assert week.silenced_s == 2 * 3600
    assert week.serving_s == (10 + 8 + 8 + 14) * 3600
    assert week.unsupervised_s == 7 * 24 * 3600 - 44 * 3600
    assert week.ratio == 40 / 42
    assert week.percent == "95.24%"
    assert found[(EP, "never")]["30d"].ratio is None
    assert found[(EP, "never")]["30d"].percent == "–"


async def test_a_window_opening_inside_a_down_span_counts_only_its_part(store: Store) -> None:
    await store.supervising(T0, [(EP, "a", "healthy")])
    await enter(store, "a", "healthy", "down", T0 + 2 * H, cause="connection refused")
    await store.supervised(T0, T0 + 30 * H)
    found = await availability(store, [(EP, "a")], now=T0 + 26 * H)
    day = found[(EP, "a")]["24h"]  # 2h..26h: down all along
    assert (day.serving_s, day.down_s, day.ratio) == (0, 24 * 3600, 0.0)
    assert found[(EP, "a")]["7d"].serving_s == 2 * 3600


async def test_incidents_per_day_with_causes_and_the_time_to_repair(store: Store) -> None:
    await store.supervising(T0, [(EP, "a", "healthy"), (EP, "b", "healthy")])
    first = await enter(store, "a", "healthy", "down", T0 + 1 * H, cause="connection refused")
    assert first is not None
    await store.append(
        first,
        TimelineEntry(
            at=T0 + 1 * H,
            subject="a",
            record=Diagnosis(endpoint="a", state="down", rule="restart-llm", title="refuses"),
        ),
    )
    await enter(store, "a", "down", "healthy", T0 + 3 * H)
    second = await enter(store, "a", "healthy", "down", T0 + 27 * H, cause="HTTP 500")
    await enter(store, "a", "down", "healthy", T0 + 28 * H)
    await enter(store, "b", "healthy", "down", T0 + 29 * H, cause="timed out")

    bar = await days(store, "a", now=T0 + 30 * H, count=3)
    assert [(d.day.isoformat(), d.causes) for d in bar] == [
        ("2026-10-31", ""),
        ("2026-11-01", f"#{first} restart-llm: refuses"),
        ("2026-11-02", f"#{second} HTTP 500"),
    ]
    # the day before supervision began is neither up nor down: nobody watched it
    assert [(d.status, d.watched_s) for d in bar] == [
        ("not supervised", 0),
        ("incidents", 24 * 3600),
        ("incidents", 6 * 3600),
    ]
    found = await repairs(store, now=T0 + 30 * H)
    assert found.by_subject == {
        "a": Repair(count=2, total_s=3 * 3600),
        "b": Repair(still_open=1),
    }
    assert found.by_subject["a"].mean_s == 1.5 * 3600
    assert found.by_rule == {
        "(no rule matched)": Repair(count=1, total_s=3600, still_open=1),
        "restart-llm": Repair(count=1, total_s=2 * 3600),
    }


async def test_days_nobody_watched_are_not_supervised_not_up(store: Store) -> None:
    # supervised from T0 + 1d 12h for 12 h, then the daemon off until T0 + 4d 6h
    await store.supervising(T0 + 36 * H, [(EP, "a", "healthy")])
    await store.supervised(T0 + 36 * H, T0 + 48 * H)
    await store.supervising(T0 + 102 * H, [(EP, "a", "healthy")])
    bar = await days(store, "a", now=T0 + 108 * H, count=6)
    assert [(d.day.isoformat(), d.status, d.watched_s) for d in bar] == [
        ("2026-10-31", "not supervised", 0),  # before the store has anything of it
        ("2026-11-01", "not supervised", 0),
        ("2026-11-02", "no incident", 12 * 3600),  # supervision began at noon
        ("2026-11-03", "not supervised", 0),  # the daemon was off all day
        ("2026-11-04", "not supervised", 0),
        ("2026-11-05", "no incident", 6 * 3600),  # running again since 06:00
    ]
