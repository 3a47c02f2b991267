"""The one reconnect backoff (`supervisor.core.backoff`): it doubles from its first delay to its
cap, jitter only ever shortens a delay, and each of its three users keeps its own figures."""

from __future__ import annotations

import random

import pytest

from supervisor.core.backoff import Backoff
from supervisor.hear.streams.stream import StreamSettings
from supervisor.record.store.listen import BACKOFF
from supervisor.tell.telegram.timing import Pacing


@pytest.mark.parametrize(
    ("backoff", "delays"),
    [
        (Backoff(base_s=1, cap_s=60, jitter=0), [1, 2, 4, 8, 16, 32, 60, 60]),
        (Backoff(base_s=0.2, cap_s=5, jitter=0), [0.2, 0.4, 0.8, 1.6, 3.2, 5, 5, 5]),
        (Backoff(base_s=2, cap_s=2, jitter=0), [2, 2, 2, 2, 2, 2, 2, 2]),
    ],
    ids=["doubles-to-60", "doubles-to-5", "constant"],
)
def test_without_jitter_it_doubles_to_its_cap(backoff: Backoff, delays: list[float]) -> None:
    assert [backoff.delay(n) for n in range(1, 9)] == pytest.approx(delays)


def test_jitter_only_shortens_up_to_its_fraction() -> None:
    jittered = Backoff(base_s=1, cap_s=60, jitter=0.5)
    rng = random.Random(7)
    at_cap = set()
    for attempt in range(1, 200):
        full = min(60.0, 2.0 ** (attempt - 1))
        delay = jittered.delay(attempt, rng)
        assert full / 2 <= delay <= full
        if full == 60.0:
            at_cap.add(delay)
    assert len(at_cap) > 1  # many lost at once do not come back in the same instant


@pytest.mark.parametrize(
    ("user", "backoff", "figures"),
    [
        ("host event streams", StreamSettings().backoff, (1.0, 60.0, 0.5)),
        ("store listener", BACKOFF, (0.2, 5.0, 0.5)),
        ("telegram sender", Pacing().retry, (1.0, 60.0, 0.5)),
    ],
)
def test_each_user_keeps_its_first_delay_and_cap(
    user: str, backoff: Backoff, figures: tuple[float, float, float]
) -> None:
    assert (backoff.base_s, backoff.cap_s, backoff.jitter) == figures
