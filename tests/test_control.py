"""The control API (silence, unsilence, pause, resume, ack, restart) against a real in-process
daemon and its real SQLite file, and over its real HTTP server on loopback. Every answer is
asserted word for word, and so is its row in the control journal."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from aiohttp.test_utils import make_mocked_request

from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.control import ControlApi
from supervisor.control.matchers import MatchError, select
from supervisor.control.model import Answer, Code
from supervisor.core.actor import Actor, Via
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State, Trigger
from supervisor.record.timeline.control import Silenced, Unsilenced
from supervisor.record.timeline.state import Transition
from tests.helpers import eventually, write_fleet
from tests.ports import free_port

ALICE = Actor(who="alice", via=Via.CLI)
HOSTS = {"ds4": ("spark1", "spark2"), "qwen": ("spark1",), "embed": ("forge",)}


@pytest.mark.parametrize(
    ("target", "found"),
    [
        ("ds4", ("ds4",)),
        ("all", ("ds4", "qwen", "embed")),
        ("*", ("ds4", "qwen", "embed")),
        ("q*", ("qwen",)),
        ("*e*", ("qwen", "embed")),
        ("host:spark1", ("ds4", "qwen")),
        ("host:spark2", ("ds4",)),
        ("host:idle", ()),
        ("nope", (Code.NOT_FOUND, "no endpoint 'nope' (endpoints: ds4, qwen, embed)")),
        ("x*", (Code.NOT_FOUND, "no endpoint matches 'x*' (endpoints: ds4, qwen, embed)")),
        ("host:mars", (Code.NOT_FOUND, "no host 'mars' (hosts: forge, spark1, spark2, idle)")),
        ("", (Code.BAD_REQUEST, "name an endpoint, a glob, host:NAME or all")),
    ],
)
def test_a_target_names_endpoints_or_says_why_not(target: str, found: tuple[Any, ...]) -> None:
    hosts = ["forge", "spark1", "spark2", "idle"]
    if found and isinstance(found[0], Code):
        with pytest.raises(MatchError) as caught:
            select(target, HOSTS, hosts)
        assert (caught.value.code, caught.value.text) == found
    else:
        assert select(target, HOSTS, hosts) == found


def _fleet(tmp_path: Path, *, http: bool = False) -> Path:
    down = f"http://127.0.0.1:{free_port()}"
    return write_fleet(
        tmp_path,
        {
            "ds4": {"kind": "openai", "url": down, "model": "m", "host": "spark1"},
            "qwen": {"kind": "openai", "url": down, "model": "m", "host": "spark1"},
            "embed": {"kind": "openai", "url": down, "model": "m", "host": "forge"},
        },
        hosts={"forge": {"local": True}, "spark1": {"local": True}},
        startup_grace="1h",  # they stay starting: nothing but the control API moves them
        http={"listen": "127.0.0.1:0"} if http else None,
    )


async def _started(path: Path) -> Supervisor:
    daemon = Supervisor(load_config(path))
    await daemon.start()
    workers = list(daemon.workers.values())
    await eventually(lambda: all(w.state is State.STARTING for w in workers), what="starting")
    return daemon


def _api(daemon: Supervisor) -> ControlApi:
    assert daemon.control is not None
    return daemon.control


Step = Callable[[ControlApi], Awaitable[Answer]]
PAST = datetime(2020, 1, 1, tzinfo=UTC)


def _silence(target: str, length: str = "2h", why: str = "") -> Step:
    hours = {"2h": timedelta(hours=2), "0s": timedelta(0)}[length]
    return lambda api: api.silence(target, actor=ALICE, length=hours, why=why)


def _unsilence(target: str) -> Step:
    return lambda api: api.unsilence(target, actor=ALICE)


CASES: list[tuple[str, list[Step], Code, str, tuple[str, ...]]] = [
    (
        "one endpoint",
        [_silence("ds4")],
        Code.DONE,
        "silenced ds4 for 2h: nothing is acted on until then",
        ("ds4",),
    ),
    (
        "a glob",
        [_silence("q*")],
        Code.DONE,
        "silenced qwen for 2h: nothing is acted on until then",
        ("qwen",),
    ),
    (
        "a host",
        [_silence("host:spark1")],
        Code.DONE,
        "silenced ds4, qwen for 2h: nothing is acted on until then",
        ("ds4", "qwen"),
    ),
    (
        "all",
        [_silence("all")],
        Code.DONE,
        "silenced ds4, qwen, embed for 2h: nothing is acted on until then",
        ("ds4", "qwen", "embed"),
    ),
    (
        "unknown endpoint",
        [_silence("nope")],
        Code.NOT_FOUND,
        "no endpoint 'nope' (endpoints: ds4, qwen, embed)",
        (),
    ),
    (
        "unknown host",
        [_silence("host:mars")],
        Code.NOT_FOUND,
        "no host 'mars' (hosts: forge, spark1)",
        (),
    ),
    (
        "no time",
        [_silence("ds4", "0s")],
        Code.BAD_REQUEST,
        "the silence must last longer than 0s",
        (),
    ),
    (
        "until in the past",
        [lambda api: api.silence("ds4", actor=ALICE, until=PAST)],
        Code.BAD_REQUEST,
        "the silence must end in the future, got 2020-01-01 00:00:00Z",
        (),
    ),
    (
        "twice",
        [_silence("ds4"), _silence("ds4")],
        Code.REFUSED,
        "ds4 is already silenced: /unsilence it first",
        ("ds4",),
    ),
    (
        "the host's silence ends for both",
        [_silence("host:spark1"), _unsilence("ds4")],
        Code.DONE,
        "unsilenced ds4, qwen: they are judged afresh",
        ("ds4", "qwen"),
    ),
    (
        "another silence still holds",
        [_silence("ds4"), _silence("q*"), _unsilence("ds4")],
        Code.DONE,
        "unsilenced ds4: it is judged afresh",
        ("ds4",),
    ),
    ("not silenced", [_unsilence("embed")], Code.REFUSED, "embed is not silenced", ("embed",)),
    (
        "pause one",
        [lambda api: api.pause(actor=ALICE, endpoint="ds4", why="swapping disks")],
        Code.DONE,
        "automatic action on ds4 is paused: /resume ds4 to resume",
        ("ds4",),
    ),
    (
        "pause unknown",
        [lambda api: api.pause(actor=ALICE, endpoint="nope")],
        Code.NOT_FOUND,
        "no endpoint 'nope' (endpoints: ds4, qwen, embed)",
        (),
    ),
    (
        "resume not paused",
        [lambda api: api.resume(actor=ALICE)],
        Code.REFUSED,
        "automatic action is not paused",
        (),
    ),
    (
        "resume",
        [lambda api: api.pause(actor=ALICE), lambda api: api.resume(actor=ALICE)],
        Code.DONE,
        "automatic action is on again",
        ("ds4", "qwen", "embed"),
    ),
    ("ack unknown", [lambda api: api.ack(99, actor=ALICE)], Code.NOT_FOUND, "no incident 99", ()),
    (
        "restart unknown",
        [lambda api: api.restart("nope", actor=ALICE)],
        Code.NOT_FOUND,
        "no endpoint 'nope' (endpoints: ds4, qwen, embed)",
        (),
    ),
    (
        "restart in its grace",
        [lambda api: api.restart("ds4", actor=ALICE)],
        Code.REFUSED,
        "not restarting ds4: it is inside its startup grace: let it load",
        ("ds4",),
    ),
]


@pytest.mark.parametrize(
    ("steps", "code", "text", "subjects"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
async def test_every_answer_is_said_and_journaled(
    tmp_path: Path, steps: list[Step], code: Code, text: str, subjects: tuple[str, ...]
) -> None:
    daemon = await _started(_fleet(tmp_path))
    try:
        api = _api(daemon)
        for step in steps:
            answer = await step(api)
        assert (answer.code, answer.text, answer.subjects) == (code, text, subjects)
        last = (await api.journal())[-1]
        assert (last.who, last.via, last.code, last.answer) == ("alice", "cli", code.value, text)
        assert len(await api.journal()) == len(steps)
        for name in subjects if code is Code.DONE and "silenced" in text else ():
            silenced = not text.startswith("unsilenced")
            assert (daemon.workers[name].state is State.MAINTENANCE) is silenced
    finally:
        await daemon.stop()


async def test_a_silence_of_a_healthy_endpoint_is_in_the_journal_with_who_why_until(
    tmp_path: Path,
) -> None:
    daemon = await _started(_fleet(tmp_path))
    try:
        api = _api(daemon)
        now = daemon.clock.now()
        await api.silence("host:spark1", actor=ALICE, length=timedelta(hours=2), why="disk swap")
        rows = await api.journal("qwen")  # named by its host, found by its own name
        silences = await api.silences()
        worker = daemon.workers["qwen"]
    finally:
        await daemon.stop()
    assert [(r.action, r.target, r.subjects, r.who, r.why) for r in rows] == [
        ("silence", "host:spark1", ("ds4", "qwen"), "alice", "disk swap")
    ]
    assert rows[0].until is not None
    assert timedelta(hours=2) <= rows[0].until - now < timedelta(hours=2, seconds=5)
    assert [(s.target, s.who, s.via, s.why, s.until) for s in silences] == [
        ("host:spark1", "alice", "cli", "disk swap", rows[0].until)
    ]
    assert worker.record.grace_until == rows[0].until


async def test_a_pause_is_what_the_repair_runner_reads(tmp_path: Path) -> None:
    daemon = await _started(_fleet(tmp_path))
    try:
        api = _api(daemon)
        assert daemon.remediator is not None
        await api.pause(actor=ALICE, endpoint="ds4")
        assert daemon.remediator.paused("ds4") == "automatic action on ds4 is paused"
        assert daemon.remediator.paused("qwen") == ""
        await api.pause(actor=ALICE)
        assert daemon.remediator.paused("qwen") == "automatic action is paused"
        await api.resume(actor=ALICE)
        assert daemon.remediator.paused("qwen") == ""
        assert [p.scope for p in api.pauses()] == ["ds4"]
    finally:
        await daemon.stop()


async def _post(client: httpx.AsyncClient, path: str, body: object, **headers: str) -> Any:
    response = await client.post(path, json=body, headers=headers)
    return response.status_code, response.json()


class _Peer:
    """The transport of a request from `address` (aiohttp reads the peer from it)."""

    def __init__(self, address: str) -> None:
        self.address = address

    def get_extra_info(self, name: str, default: object = None) -> object:
        return (self.address, 40000) if name == "peername" else default


async def test_the_http_routes_answer_json_with_who_from_a_header(tmp_path: Path) -> None:
    daemon = await _started(_fleet(tmp_path, http=True))
    try:
        server = daemon.ops.server
        assert server is not None
        async with httpx.AsyncClient(verify=default_tls(), base_url=server.url) as client:
            done = await _post(
                client,
                "/control/silence",
                {"target": "ds4", "for": "2h", "why": "x"},
                **{"X-Fleet-Who": "bob"},
            )
            assert done == (
                200,
                {
                    "ok": True,
                    "code": "done",
                    "text": "silenced ds4 for 2h: nothing is acted on until then",
                    "subjects": ["ds4"],
                },
            )
            again = await _post(client, "/control/silence", {"target": "ds4", "for": "2h"})
            assert again[0] == 409
            unknown = await _post(client, "/control/restart", {"endpoint": "nope"})
            assert unknown[0] == 404
            assert unknown[1]["text"] == "no endpoint 'nope' (endpoints: ds4, qwen, embed)"
            bad = await _post(client, "/control/ack", {"incident": "x"})
            assert bad == (
                400,
                {
                    "ok": False,
                    "code": "bad_request",
                    "text": "bad request: 'incident': expected an incident id (a number), got 'x'",
                    "subjects": [],
                },
            )
            naive = await _post(
                client, "/control/silence", {"target": "ds4", "until": "2030-01-01T00:00:00"}
            )
            assert naive[1]["text"] == (
                "bad request: 'until': give a time zone, e.g. 2026-01-31T18:00:00Z"
            )
            listing = (await client.get("/control/silences")).json()
            assert [(s["target"], s["who"], s["via"], s["why"]) for s in listing["silences"]] == [
                ("ds4", "bob", "http", "x")
            ]
            assert (await client.get("/control/pause")).status_code == 405
            assert (await client.post("/control/nothing")).status_code == 404
        far = await server.control(
            make_mocked_request("POST", "/control/pause", transport=_Peer("192.0.2.7"))
        )
        assert (far.status, far.text) == (
            403,
            "forbidden: the control API answers loopback peers only, not 192.0.2.7\n",
        )
        rows = await _api(daemon).journal("ds4")
    finally:
        await daemon.stop()
    assert [(r.action, r.who, r.via, r.code) for r in rows] == [
        ("silence", "bob", "http", "done"),
        ("silence", "http", "http", "refused"),
    ]  # a body the route cannot read never reaches the API: answered 400, not journaled


def test_control_routes_are_documented_with_their_statuses() -> None:
    """The HTTP reference's table names every control route."""
    reference = (Path(__file__).parents[1] / "docs" / "http.md").read_text()
    for route in ("silence", "unsilence", "pause", "resume", "ack", "restart", "silences"):
        assert f"/control/{route}" in reference


async def test_a_stored_glob_silence_covers_an_endpoint_added_before_a_restart(
    tmp_path: Path,
) -> None:
    path = _fleet(tmp_path)
    daemon = await _started(path)
    try:
        answer = await _api(daemon).silence("q*", actor=ALICE, length=timedelta(hours=2))
        assert answer.text == "silenced qwen for 2h: nothing is acted on until then"
    finally:
        await daemon.stop()
    document = yaml.safe_load(path.read_text())
    document["endpoints"]["qwen2"] = dict(document["endpoints"]["qwen"])
    path.write_text(yaml.safe_dump(document))
    daemon = Supervisor(load_config(path))
    await daemon.start()
    try:
        states = {name: w.state for name, w in daemon.workers.items()}
        rows = await _api(daemon).silences()
        qwen2 = daemon.workers["qwen2"].record.grace_until
    finally:
        await daemon.stop()
    assert states["qwen"] is State.MAINTENANCE
    assert states["qwen2"] is State.MAINTENANCE
    assert states["ds4"] is not State.MAINTENANCE
    assert [(r.id, r.target) for r in rows] == [(1, "q*")]
    assert qwen2 == rows[0].until


async def test_a_silence_and_its_end_are_in_the_incident_with_who_target_until_why(
    tmp_path: Path,
) -> None:
    down = f"http://127.0.0.1:{free_port()}"
    spec = {"kind": "openai", "url": down, "model": "m", "host": "forge"}
    daemon = Supervisor(load_config(write_fleet(tmp_path, {"ds4": spec})))
    await daemon.start()
    try:
        worker = daemon.workers["ds4"]
        await eventually(lambda: worker.record.incident_id is not None, what="an open incident")
        incident = worker.record.incident_id
        assert incident is not None
        api = _api(daemon)
        bob = Actor(who="bob", via=Via.WEB)
        said = await api.silence("ds*", actor=bob, length=timedelta(hours=1), why="driver swap")
        assert said.subjects == ("ds4",)
        assert (await api.unsilence("ds4", actor=ALICE, why="done")).subjects == ("ds4",)
        assert daemon.store is not None
        rows = await daemon.store.timeline(incident)
    finally:
        await daemon.stop()
    silenced = [r.record for r in rows if isinstance(r.record, Silenced)]
    unsilenced = [r.record for r in rows if isinstance(r.record, Unsilenced)]
    assert [(s.actor, s.target, s.why, s.silence) for s in silenced] == [
        (bob, "ds*", "driver swap", 1)
    ]
    assert [(u.actor, u.target, u.why, u.silences) for u in unsilenced] == [
        (ALICE, "ds4", "done", (1,))
    ]
    into = next(
        r.record
        for r in rows
        if isinstance(r.record, Transition) and r.record.trigger is Trigger.SILENCE
    )
    assert (into.actor, into.until) == (bob, silenced[0].until)
