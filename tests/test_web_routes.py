"""The fleet page's routes over real HTTP on loopback, from a live in-process daemon (a vLLM-shaped
server, a real SQLite store): read-only by default, sign-in and actions with loopback actions on,
the restart's confirmation, the live feed's frames, the incident filters, the rules page."""

from __future__ import annotations

import html
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import httpx
import pytest

from fleet_lab.vllm_sim.server import VllmSim
from supervisor.app.root import Supervisor
from supervisor.config.loader import load_config
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State
from supervisor.record.timeline.control import Acked
from supervisor.tell.web.page.actions import NEEDS_A_REASON
from supervisor.tell.web.page.reads import entries_after
from tests.helpers import eventually, write_fleet


async def _daemon(
    tmp_path: Path,
    sim: VllmSim,
    http: Mapping[str, Any],
    playbook: Path | None = None,
    remediation: Mapping[str, Any] | None = None,
) -> Supervisor:
    if playbook is None:
        playbook = tmp_path / "playbooks"
        playbook.mkdir()
    config = write_fleet(
        tmp_path,
        {
            "llm": {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"},
            "web": {"kind": "health", "url": "http://127.0.0.1:1/health", "host": "forge"},
        },
        http={"listen": "127.0.0.1:0", **http},
        playbook=str(playbook),
        remediation=remediation,
    )
    daemon = Supervisor(load_config(config))
    await daemon.start()
    await eventually(lambda: daemon.workers["llm"].state is State.HEALTHY, what="llm healthy")
    await eventually(
        lambda: daemon.workers["web"].record.incident_id is not None, what="web's incident"
    )
    return daemon


@pytest.fixture
async def open_daemon(tmp_path: Path, sim: VllmSim) -> AsyncIterator[Supervisor]:
    daemon = await _daemon(tmp_path, sim, {"loopback_actions": True})
    try:
        yield daemon
    finally:
        await daemon.stop()


def _client(daemon: Supervisor) -> httpx.AsyncClient:
    assert daemon.ops.server is not None
    url = daemon.ops.server.url
    return httpx.AsyncClient(verify=default_tls(), base_url=url, headers={"Origin": url})


async def _sign_in(client: httpx.AsyncClient, who: str) -> str:
    """Sign in (no token needed from loopback here); the session's CSRF token."""
    response = await client.post("/login", data={"who": who, "token": ""})
    assert response.status_code == 303
    page = (await client.get("/endpoints/llm")).text
    marker = 'name="csrf" value="'
    return page.split(marker, 1)[1].split('"', 1)[0]


def _answer(page: str) -> str:
    return html.unescape(page.split('<p id="answer"', 1)[1].split(">", 1)[1].split("</p>", 1)[0])


async def test_the_page_is_read_only_without_a_token_file(tmp_path: Path, sim: VllmSim) -> None:
    daemon = await _daemon(tmp_path, sim, {})
    try:
        async with _client(daemon) as client:
            board = await client.get("/")
            assert board.status_code == 200
            assert '<span class="muted">read-only</span>' in board.text
            assert "form.act" not in board.text
            login = await client.post("/login", data={"who": "eve", "token": "x"})
            assert login.status_code == 403
            assert "the page is read-only: set http.token_file to allow actions" in login.text
            act = await client.post("/actions/pause", data={"csrf": "x"})
            assert act.status_code == 403
            assert _answer(act.text) == (
                "refused: the page is read-only: set http.token_file to allow actions"
            )
        assert daemon.control is not None
        assert daemon.control.pauses() == []
    finally:
        await daemon.stop()


@pytest.mark.parametrize(
    ("headers", "cookie"),
    [
        ({}, "fleet_session=SID; HttpOnly; Path=/; SameSite=Strict"),
        (
            {"X-Forwarded-Proto": "https"},  # behind a TLS proxy
            "fleet_session=SID; HttpOnly; Path=/; SameSite=Strict; Secure",
        ),
    ],
)
async def test_the_session_cookie_is_secure_when_the_browser_came_over_https(
    open_daemon: Supervisor, headers: dict[str, str], cookie: str
) -> None:
    async with _client(open_daemon) as client:
        response = await client.post("/login", data={"who": "ann", "token": ""}, headers=headers)
    assert response.status_code == 303
    said = response.headers["Set-Cookie"]
    sid = said.split(";", 1)[0].split("=", 1)[1]
    assert said.replace(sid, "SID") == cookie


@pytest.mark.parametrize(
    ("origin", "answer"),
    [
        (None, "refused: the request does not say where it comes from (no Origin): refused"),
        ("null", "refused: the request does not say where it comes from (no Origin): refused"),
        ("http://evil.example", "refused: the request comes from another site"),
    ],
)
async def test_an_action_from_another_origin_is_refused(
    open_daemon: Supervisor, origin: str | None, answer: str
) -> None:
    async with _client(open_daemon) as client:
        csrf = await _sign_in(client, "ann")
        headers = {"Origin": origin} if origin is not None else {}
        client.headers.pop("Origin")
        response = await client.post(
            "/actions/pause", data={"csrf": csrf, "endpoint": "llm"}, headers=headers
        )
    assert response.status_code == 403
    assert _answer(response.text).startswith(answer)
    assert open_daemon.control is not None
    assert open_daemon.control.pauses() == []


async def test_actions_from_the_page_go_through_the_control_api_as_the_person(
    open_daemon: Supervisor,
) -> None:
    api = open_daemon.control
    store = open_daemon.store
    assert api is not None
    assert store is not None
    incident = open_daemon.workers["web"].record.incident_id
    assert incident is not None
    async with _client(open_daemon) as client:
        csrf = await _sign_in(client, "ann")
        cases = [
            ("pause", {"endpoint": "llm", "why": "upgrade"}, 200, "automatic action on llm is"),
            ("resume", {"endpoint": "llm"}, 200, "automatic action on llm"),
            ("ack", {"incident": str(incident), "why": "on it"}, 200, ""),
            ("ack", {"incident": "x"}, 400, "which incident: expected its number, got 'x'"),
            ("silence", {"target": "llm", "for": "soon", "why": "x"}, 400, "for how long: "),
            ("silence", {"target": "llm", "for": "1h"}, 400, NEEDS_A_REASON),
            ("silence", {"target": "nope", "for": "1h", "why": "x"}, 404, "no endpoint 'nope'"),
            ("silence", {"target": "llm", "for": "1h", "why": "disk"}, 200, "silenced llm for 1h"),
            ("edit", {"silence": "x", "for": "1h", "why": "x"}, 400, "which silence: expected"),
            ("edit", {"silence": "9", "for": "1h", "why": "x"}, 404, "no silence #9"),
            ("edit", {"silence": "1", "for": "3h"}, 400, NEEDS_A_REASON),
            ("edit", {"silence": "1", "for": "3h", "why": "disk"}, 200, "silence #1 on llm (llm)"),
            ("unsilence", {"target": "llm"}, 200, "unsilenced llm: it is judged afresh"),
            ("edit", {"silence": "1", "for": "3h", "why": "x"}, 409, "silence #1 is over: set a"),
            (
                "silence",
                {
                    "target": "llm",
                    "until_local": "2020-01-31T18:00",
                    "tz_offset": "-60",
                    "why": "x",
                },
                400,
                "the silence must end in the future, got 2020-01-31 17:00:00Z",
            ),
        ]
        for name, form, status, start in cases:
            response = await client.post(f"/actions/{name}", data={"csrf": csrf, **form})
            assert response.status_code == status, (name, response.text)
            assert _answer(response.text).startswith(start), (name, _answer(response.text))
        ack = await client.post("/actions/ack", data={"csrf": csrf, "incident": str(incident)})
        assert _answer(ack.text) == f"acknowledged incident #{incident}: no more reminders"
        confirm = await client.post("/actions/restart", data={"csrf": csrf, "endpoint": "llm"})
        assert confirm.status_code == 200
        assert 'id="confirm">Yes, restart llm</button>' in confirm.text
        assert [r.action for r in await api.journal("llm")][-1] == "silence"  # no restart yet
        restart = await client.post(
            "/actions/restart", data={"csrf": csrf, "endpoint": "llm", "confirm": "yes"}
        )
        board = (await client.get("/")).text
        assert 'data-action="pause"' in board  # the fleet-wide pause, offered when signed in
        fleet = await client.post("/actions/pause", data={"csrf": csrf, "why": "moving racks"})
        assert _answer(fleet.text) == "automatic action is paused: /resume to resume"
        board = (await client.get("/fragments/board")).text
        assert "paused <b>everything</b> by ann (web): moving racks" in board
        assert 'data-action="resume"' in board
        assert 'data-action="pause"' not in board
        assert " ago: pause * by ann (web): done</li>" in board  # the latest actions
        assert (restart.status_code, _answer(restart.text)) == (
            409,
            "not restarting llm: it has no units to restart",
        )  # refused by the runner, still journaled as the person's
    rows = await api.journal()
    assert [(r.action, r.target, r.who, r.via) for r in rows if r.code != "bad_request"] == [
        ("pause", "llm", "ann", "web"),
        ("resume", "llm", "ann", "web"),
        ("ack", f"#{incident}", "ann", "web"),
        ("silence", "nope", "ann", "web"),
        ("silence", "llm", "ann", "web"),
        ("edit", "#9", "ann", "web"),
        ("edit", "llm", "ann", "web"),
        ("unsilence", "llm", "ann", "web"),
        ("edit", "#1", "ann", "web"),
        ("ack", f"#{incident}", "ann", "web"),
        ("restart", "llm", "ann", "web"),
        ("pause", "*", "ann", "web"),
    ]
    acks = [r.record for r in await store.timeline(incident) if isinstance(r.record, Acked)]
    assert acks[0] == Acked(who="ann", via="the fleet page", why="on it")


async def test_the_live_feed_sends_each_timeline_entry_as_it_is_committed(
    open_daemon: Supervisor,
) -> None:
    incident = open_daemon.workers["web"].record.incident_id
    assert incident is not None
    async with _client(open_daemon) as client, client.stream("GET", "/events") as events:
        assert events.headers["content-type"] == "text/event-stream"
        lines = events.aiter_lines()
        assert await anext(lines) == "retry: 2000"
        async with _client(open_daemon) as other:
            csrf = await _sign_in(other, "ann")
            await other.post("/actions/ack", data={"csrf": csrf, "incident": str(incident)})
        frame = []
        async for line in lines:
            if line.startswith("event: timeline"):
                frame = [line]
            elif frame:
                frame.append(line)
                if line.startswith("data: ") and '"acked"' in line:
                    break
    assert frame[0] == "event: timeline"
    assert frame[1].startswith("id: ")
    assert '"subject": "web"' in frame[2]
    assert (
        f'"incident": {incident}, "type": "acked", "kind": "note", "summary": "acknowledged by'
        ' ann on the fleet page: no more reminders"}' in frame[2]
    )


async def test_a_reconnecting_browser_gets_what_it_missed(open_daemon: Supervisor) -> None:
    """`Last-Event-ID` (sent by EventSource when it reconnects) resumes after that entry."""
    incident = open_daemon.workers["web"].record.incident_id
    assert open_daemon.store is not None
    assert incident is not None
    first = (await open_daemon.store.timeline(incident))[0]
    async with (
        _client(open_daemon) as client,
        client.stream("GET", "/events", headers={"Last-Event-ID": str(first.id - 1)}) as events,
    ):
        lines = events.aiter_lines()
        assert [await anext(lines) for _ in range(5)] == [
            "retry: 2000",
            "",
            "event: timeline",
            f"id: {first.id}",
            "data: {"
            f'"id": {first.id}, "at": "{first.at.isoformat()}", "subject": "web",'
            f' "incident": {incident}, "type": "transition", "kind": "transition",'
            f' "summary": "{first.summary}"'
            "}",
        ]


async def test_a_page_s_stream_starts_after_the_newest_entry_the_page_was_read_with(
    open_daemon: Supervisor,
) -> None:
    """An entry committed after the page was read and before its script opened the stream (a
    slow browser, a loaded machine) is still sent: the page says where its stream starts."""
    incident = open_daemon.workers["web"].record.incident_id
    assert open_daemon.store is not None
    assert incident is not None
    async with _client(open_daemon) as client:
        page = (await client.get(f"/incidents/{incident}")).text
        after = int(page.split(' data-after="', 1)[1].split('"', 1)[0])
        # the page holds every entry of the incident up to the one its stream starts after
        before = [r for r in await open_daemon.store.timeline(incident) if r.id <= after]
        assert page.count(' data-type="') >= len(before) > 0
        csrf = await _sign_in(client, "ann")
        await client.post("/actions/ack", data={"csrf": csrf, "incident": str(incident)})
        # (not always the newest: the daemon may write the incident's next entry meanwhile)
        acked = [r for r in await open_daemon.store.timeline(incident) if r.type == "acked"][-1]
        missed = [row.id for row in await entries_after(open_daemon.store, after)]
        assert acked.id in missed
        async with client.stream("GET", "/events", params={"after": str(after)}) as events:
            lines = events.aiter_lines()
            assert [await anext(lines) for _ in range(4)] == [
                "retry: 2000",
                "",
                "event: timeline",
                f"id: {missed[0]}",
            ]
        bad = await client.get("/events", params={"after": "-1"})
        assert (bad.status_code, bad.text) == (400, "after: not an entry id: '-1'\n")
    for path in ("/", "/endpoints/web"):
        async with _client(open_daemon) as client:
            assert ' data-after="' in (await client.get(path)).text, path


async def test_incident_filters_and_pages(open_daemon: Supervisor) -> None:
    incident = open_daemon.workers["web"].record.incident_id
    async with _client(open_daemon) as client:
        listed = (await client.get("/incidents", params={"endpoint": "web", "open": "1"})).text
        assert f'<a href="/incidents/{incident}">#{incident}</a>' in listed
        none = (await client.get("/incidents", params={"endpoint": "llm"})).text
        assert "no incidents" in none
        bad = await client.get("/incidents", params={"since": "yesterday"})
        assert bad.status_code == 400
        assert '<p class="error">since: ' in bad.text
        page = await client.get(f"/incidents/{incident}")
        assert page.status_code == 200
        assert 'data-type="transition"' in page.text
        assert "unknown → down: connection refused" in page.text
        missing = await client.get("/incidents/999")
        assert (missing.status_code, missing.text) == (404, "no incident 999\n")
        unknown = await client.get("/endpoints/nope")
        assert (unknown.status_code, unknown.text) == (404, "no endpoint 'nope'\n")
        script = await client.get("/static/page.js")
        assert script.status_code == 200
        assert "EventSource" in script.text


REFUSED = """\
id: refused
title: nothing listens
severity: critical
applies_to: {states: [down]}
when:
  all:
    - {fact: probe.reason, op: eq, value: connection refused}
actions:
  - action: shell
    on: host
    params: {argv: ["true"]}
mode: manual
"""


async def test_the_rules_page_shows_each_rule_its_matches_how_they_ended_and_the_disabled_files(
    tmp_path: Path, sim: VllmSim
) -> None:
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "refused.yaml").write_text(REFUSED)
    (playbook / "broken.yaml").write_text("id: broken\nwhen: [\n")
    # not a dry run: the manual rule calls a person (it runs no step)
    daemon = await _daemon(tmp_path, sim, {}, playbook, remediation={"dry_run": False})
    try:
        store = daemon.store
        incident = daemon.workers["web"].record.incident_id
        assert store is not None
        assert incident is not None

        async def escalated() -> bool:  # the manual rule matched: a person is called
            assert incident is not None
            return any(r.type == "escalation" for r in await store.timeline(incident))

        await eventually(escalated, what="web diagnosed and escalated")
        async with _client(daemon) as client:
            page = (await client.get("/rules")).text
    finally:
        await daemon.stop()
    row = page.split('<tr id="rule-refused"', 1)[1].split("</tr>", 1)[0]
    wide = "".join(
        f'<td class="wide">{v}</td>' for v in ("manual", "critical", "states down", "shell")
    )
    assert wide in row
    assert '<span class="narrow small">manual · critical · states down · shell</span>' in row
    assert '<div class="rule-history">1 incident: 1 escalated</div>' in row
    assert (
        f'<a href="/incidents/{incident}">web #{incident}</a> <span class="error">escalated' in row
    )
    broken = page.split('<tr id="rule-broken.yaml"', 1)[1].split("</tr>", 1)[0]
    assert '<td>disabled<div class="error">' in broken


async def test_a_changed_silence_is_told_in_the_open_incident(open_daemon: Supervisor) -> None:
    store = open_daemon.store
    assert store is not None
    incident = open_daemon.workers["web"].record.incident_id
    assert incident is not None
    async with _client(open_daemon) as client:
        csrf = await _sign_in(client, "ann")
        form = {"csrf": csrf, "target": "web", "for": "1h", "why": "rewiring"}
        silenced = await client.post("/actions/silence", data=form)
        assert _answer(silenced.text) == "silenced web for 1h: nothing is acted on until then"
        form = {"csrf": csrf, "silence": "1", "for": "3h", "why": "rewiring, longer"}
        changed = await client.post("/actions/edit", data=form)
        assert _answer(changed.text).startswith("silence #1 on web (web) now ends ")
    until = open_daemon.workers["web"].record.grace_until
    assert until is not None
    notes = [r.summary for r in await store.timeline(incident) if r.type == "note"]
    assert notes[-1] == (
        f"silence #1 now ends {until.strftime('%Y-%m-%d %H:%M:%SZ')}, by ann: rewiring, longer"
    )


@pytest.mark.parametrize(
    ("route", "form", "headers", "answer"),
    [
        ("/login", {"who": "ann", "token": "wröng"}, {}, "wrong token: nothing was done"),
        ("/login", {"who": "ann", "token": "🔑"}, {}, "wrong token: nothing was done"),
        (
            "/actions/pause",
            {"csrf": "çsrf"},
            {},
            "refused: the form's CSRF token does not match your session: reload the page",
        ),
        (
            "/actions/pause",
            {"csrf": "x"},
            {"Origin": "http://[::1"},
            "refused: the request comes from another site (http://[::1): refused",
        ),
    ],
)
async def test_any_input_at_the_door_gets_a_refusal_never_a_500(
    tmp_path: Path,
    sim: VllmSim,
    route: str,
    form: dict[str, str],
    headers: dict[str, str],
    answer: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "page.token").write_text("the-token\n")
    daemon = await _daemon(tmp_path, sim, {"token_file": "page.token"})
    try:
        async with _client(daemon) as client:
            signed = await client.post("/login", data={"who": "ann", "token": "the-token"})
            assert signed.status_code == 303
            response = await client.post(route, data=form, headers=headers)
        assert daemon.control is not None
        assert daemon.control.pauses() == []
    finally:
        await daemon.stop()
    assert response.status_code == 403
    said = _problem(response.text) if route == "/login" else _answer(response.text)
    assert said == answer
    assert "http handler failed" not in capsys.readouterr().out  # no traceback logged


@pytest.mark.parametrize(
    ("body", "content_type"),
    [
        (b"who=ann&token=\xff\xfe", "application/x-www-form-urlencoded"),
        (b"who=ann&token=x", "application/x-www-form-urlencoded; charset=no-such-charset"),
        (b"--b\r\nContent-Disposition: form-data\r\n\r\nx\r\n--b--\r\n", "multipart/form-data"),
    ],
)
async def test_a_form_the_page_cannot_read_is_refused(
    tmp_path: Path,
    sim: VllmSim,
    body: bytes,
    content_type: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    (tmp_path / "page.token").write_text("the-token\n")
    daemon = await _daemon(tmp_path, sim, {"token_file": "page.token"})
    try:
        async with _client(daemon) as client:
            login = await client.post(
                "/login", content=body, headers={"Content-Type": content_type}
            )
            act = await client.post(
                "/actions/pause", content=body, headers={"Content-Type": content_type}
            )
    finally:
        await daemon.stop()
    assert (login.status_code, act.status_code) == (400, 400)
    assert _problem(login.text).startswith("the form cannot be read: ")
    assert _answer(act.text).startswith("refused: the form cannot be read: ")
    assert "http handler failed" not in capsys.readouterr().out  # no traceback logged


def _problem(page: str) -> str:
    return html.unescape(page.split('id="problem">', 1)[1].split("</p>", 1)[0])
