"""Every state the page shows has its tone and colour in one table (`states.py`), the tab takes
the worst, and the tab's icon is a real PNG (and ICO) of that colour."""

from __future__ import annotations

import struct
import zlib

from supervisor.judge.machine import HostState, State
from supervisor.tell.web.page.icon import SIZE, ico, png
from supervisor.tell.web.page.states import STATES, TONES, stylesheet, tone_of, worst


def test_every_endpoint_and_host_state_has_its_tone() -> None:
    assert set(State) | {HostState.REACHABLE, HostState.UNREACHABLE, HostState.UNKNOWN} <= set(
        STATES
    )
    assert set(STATES.values()) <= set(TONES)
    assert tone_of("unknown") == "muted"  # the local host: grey, never green
    assert tone_of("no-such-state") == "muted"
    assert [tone_of(s) for s in ("healthy", "down", "maintenance", "busy", "starting")] == [
        "good",
        "bad",
        "maint",
        "busy",
        "warn",
    ]


def test_the_worst_state_wins_and_no_state_is_good() -> None:
    assert worst(["healthy", "maintenance", "down", "starting"]).name == "bad"
    assert worst(["healthy", "unknown"]).name == "muted"
    assert worst([]).name == "good"


def test_the_stylesheet_colours_each_tone_from_the_table() -> None:
    css = stylesheet()
    for tone in TONES.values():
        assert f".state.{tone.name}, .pill.{tone.name}" in css
        assert f"background: {tone.colour}; color: #fff;" in css


def test_the_icon_is_a_disc_of_the_tone_colour() -> None:
    image = png(TONES["bad"].colour)
    assert image[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", image[16:24])
    assert (width, height) == (SIZE, SIZE)
    (length,) = struct.unpack(">I", image[33:37])
    pixels = zlib.decompress(image[41 : 41 + length])
    row = SIZE * 4 + 1
    centre = pixels[row * (SIZE // 2) + 1 + (SIZE // 2) * 4 :][:4]
    corner = pixels[1:5]
    assert centre == bytes((0xC6, 0x28, 0x28, 255))
    assert corner[3] == 0  # transparent outside the disc
    assert ico(TONES["bad"].colour)[22:] == image
