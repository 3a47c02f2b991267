"""The control API's door, over the daemon's real HTTP server on loopback (a real in-process
daemon, its real SQLite file): a browser's request (an `Origin`, a `Sec-Fetch-Site` other than
`none`) is refused before any route reads it, a POST must declare JSON, and with
`http.control_token_file` only a caller naming its token is answered; the CLI sends it. Nothing
refused reaches the API: the control journal stays empty."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import yaml

from supervisor.app.root import Supervisor
from supervisor.cli import main
from supervisor.config.loader import load_config
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State
from tests.helpers import eventually, write_fleet
from tests.ports import free_port

TOKEN = "s3cret-control-token"
BROWSER = "forbidden: the control API does not answer browsers"
ASKS = [
    ("/control/silence", {"target": "ds4", "for": "1h"}),
    ("/control/pause", {"endpoint": "ds4"}),
    ("/control/restart", {"endpoint": "ds4"}),
]


def _fleet(tmp_path: Path, *, token: bool) -> Path:
    http: dict[str, object] = {"listen": f"127.0.0.1:{free_port()}"}
    if token:
        (tmp_path / "control.token").write_text(TOKEN + "\n")
        http["control_token_file"] = "control.token"
    return write_fleet(
        tmp_path,
        {"ds4": {"kind": "openai", "url": f"http://127.0.0.1:{free_port()}", "model": "m"}},
        startup_grace="1h",  # starting: nothing but the control API moves it
        http=http,
    )


async def _started(path: Path) -> Supervisor:
    daemon = Supervisor(load_config(path))
    await daemon.start()
    worker = daemon.workers["ds4"]
    await eventually(lambda: worker.state is State.STARTING, what="starting")
    return daemon


@pytest.fixture
async def daemon(tmp_path: Path) -> AsyncIterator[Supervisor]:
    started = await _started(_fleet(tmp_path, token=False))
    try:
        yield started
    finally:
        await started.stop()


@pytest.fixture
async def guarded(tmp_path: Path) -> AsyncIterator[Supervisor]:
    started = await _started(_fleet(tmp_path, token=True))
    try:
        yield started
    finally:
        await started.stop()


def _url(daemon: Supervisor) -> str:
    assert daemon.ops.server is not None
    return daemon.ops.server.url


async def _journal(daemon: Supervisor) -> list[tuple[str, str]]:
    assert daemon.control is not None
    return [(r.action, r.code) for r in await daemon.control.journal()]


@pytest.mark.parametrize(("path", "body"), ASKS)
@pytest.mark.parametrize(
    ("headers", "why"),
    [
        # what a page of another site sends with fetch(..., {mode: "no-cors"}): no preflight
        (
            {"Origin": "http://evil.example", "Content-Type": "text/plain;charset=UTF-8"},
            "(Origin: http://evil.example)",
        ),
        (
            {"Origin": "http://evil.example", "Content-Type": "application/json"},
            "(Origin: http://evil.example)",
        ),
        ({"Origin": "null", "Content-Type": "text/plain"}, "(Origin: null)"),
        (
            {"Sec-Fetch-Site": "cross-site", "Content-Type": "application/json"},
            "(Sec-Fetch-Site: cross-site)",
        ),
        (  # another port of 127.0.0.1 is the same site to a browser
            {"Sec-Fetch-Site": "same-site", "Content-Type": "application/json"},
            "(Sec-Fetch-Site: same-site)",
        ),
        (
            {"Sec-Fetch-Site": "same-origin", "Content-Type": "application/json"},
            "(Sec-Fetch-Site: same-origin)",
        ),
    ],
)
async def test_a_browser_is_refused_before_the_route_reads_the_body(
    daemon: Supervisor, path: str, body: dict[str, str], headers: dict[str, str], why: str
) -> None:
    async with httpx.AsyncClient(verify=default_tls(), base_url=_url(daemon)) as client:
        response = await client.post(path, content=json.dumps(body), headers=headers)
    assert response.status_code == 403
    assert response.json() == {
        "ok": False,
        "code": "refused",
        "text": f"{BROWSER} {why}; use the CLI, or the fleet page's actions",
        "subjects": [],
    }
    assert await _journal(daemon) == []
    assert daemon.control is not None
    assert daemon.control.pauses() == []
    assert daemon.workers["ds4"].state is State.STARTING


async def test_a_post_must_declare_json(daemon: Supervisor) -> None:
    async with httpx.AsyncClient(verify=default_tls(), base_url=_url(daemon)) as client:
        plain = await client.post(
            "/control/silence",
            content=json.dumps({"target": "ds4", "for": "1h"}),
            headers={"Content-Type": "text/plain"},
        )
        form = await client.post("/control/pause", data={"endpoint": "ds4"})
        none = await client.post("/control/pause", content=b"{}")
        typed = await client.post(
            "/control/silence",
            content=json.dumps({"target": "ds4", "for": "1h"}),
            headers={"Content-Type": "application/json; charset=utf-8"},
        )
        typed_by_hand = await client.post(  # a person at a terminal: Sec-Fetch-Site none is fine
            "/control/pause", json={"endpoint": "ds4"}, headers={"Sec-Fetch-Site": "none"}
        )
    assert (plain.status_code, plain.json()["text"]) == (
        415,
        "unsupported media type: text/plain; send the body as JSON (Content-Type: "
        "application/json)",
    )
    assert (form.status_code, form.json()["text"]) == (
        415,
        "unsupported media type: application/x-www-form-urlencoded; send the body as JSON "
        "(Content-Type: application/json)",
    )
    assert (none.status_code, none.json()["text"]) == (
        415,
        "unsupported media type: none; send the body as JSON (Content-Type: application/json)",
    )
    assert (typed.status_code, typed.json()["text"]) == (
        200,
        "silenced ds4 for 1h: nothing is acted on until then",
    )
    assert typed_by_hand.status_code == 200
    assert await _journal(daemon) == [("silence", "done"), ("pause", "done")]


@pytest.mark.parametrize(
    ("authorization", "status", "text"),
    [
        (
            None,
            401,
            "unauthorized: the control API needs its token (Authorization: Bearer TOKEN, from "
            "http.control_token_file)",
        ),
        (
            "Basic czNjcmV0",
            401,
            "unauthorized: the control API needs its token (Authorization: Bearer TOKEN, from "
            "http.control_token_file)",
        ),
        ("Bearer not-it", 401, "unauthorized: wrong token"),
        ("Bearer s3cret-contröl-token".encode(), 401, "unauthorized: wrong token"),
        (f"Bearer {TOKEN}", 200, "automatic action on ds4 is paused: /resume ds4 to resume"),
    ],
)
async def test_with_a_token_file_only_its_token_is_answered(
    guarded: Supervisor, authorization: str | bytes | None, status: int, text: str
) -> None:
    headers = {"Authorization": authorization} if authorization is not None else {}
    async with httpx.AsyncClient(verify=default_tls(), base_url=_url(guarded)) as client:
        response = await client.post(
            "/control/pause",
            json={"endpoint": "ds4"},
            headers=headers,  # type: ignore[arg-type] # httpx sends bytes values as they are
        )
        listing = await client.get("/control/silences", headers=headers)  # type: ignore[arg-type]
    assert (response.status_code, response.json()["text"]) == (status, text)
    assert listing.status_code == (200 if status == 200 else 401)
    assert await _journal(guarded) == ([("pause", "done")] if status == 200 else [])


async def test_the_cli_sends_the_token_and_says_when_it_cannot_read_it(
    guarded: Supervisor, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = str(tmp_path / "fleet.yaml")
    code = await _cli("--config", config, "silence", "ds4", "--for", "2h")
    said = capsys.readouterr().out.splitlines()  # the in-process daemon logs there too
    assert (code, said[-1]) == (0, "silenced ds4 for 2h: nothing is acted on until then")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    document = yaml.safe_load((tmp_path / "fleet.yaml").read_text())
    document["http"]["control_token_file"] = "missing.token"
    (elsewhere / "fleet.yaml").write_text(yaml.safe_dump(document))
    code = await _cli("--config", str(elsewhere / "fleet.yaml"), "pause")
    assert code == 2
    assert capsys.readouterr().err == (
        f"fleet-supervisor: cannot read http.control_token_file {elsewhere / 'missing.token'}: "
        "No such file or directory (it is readable by the service's group: add yourself to it, "
        "e.g. `sudo usermod -aG fleet-supervisor $USER`, or run as root)\n"
    )
    assert await _journal(guarded) == [("silence", "done")]


async def _cli(*argv: str) -> int:
    return await asyncio.to_thread(main, list(argv))
