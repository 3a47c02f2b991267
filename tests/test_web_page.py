"""The fleet page in a real browser (Debian's Chromium, headless) against the daemon as a real
process and a vLLM-shaped lab server on loopback: a fault turns the endpoint red on the board
without a reload, the incident shows the repair's step with its exit code and output, a silence
set from the page is in the endpoint's journal and in `status` and `silences`, a restart asks
first, and an action without the token is refused. The screenshots in docs/img are made here
(FLEET_PAGE_SHOTS=DIR writes them there; otherwise into the test's temporary folder)."""

from __future__ import annotations

import asyncio
import getpass
import json
import os
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest
from aiohttp import web
from selenium.common.exceptions import TimeoutException
from selenium.webdriver import Chrome
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from fleet_lab.vllm_sim.server import VllmSim
from supervisor.core.timefmt import stamp
from supervisor.core.tls import default_tls
from supervisor.judge.machine import State, Trigger
from supervisor.record.store.doctor import save_doctor_run
from supervisor.record.store.records import Snapshot, SubjectKind, TimelineEntry
from supervisor.record.store.store import Store
from supervisor.record.timeline.state import Transition
from supervisor.tell.web.page.states import TONES, tone_of
from supervisor.trust.doctor.model import DoctorRun, fail, ok, warn
from tests import warmstart
from tests.browser import chromium, missing, wait_for
from tests.conftest import SimFactory
from tests.helpers import eventually, spawn_daemon, write_fleet
from tests.ports import free_port
from tests.warmstart import WarmProcess

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(bool(missing()), reason=missing() or "-"),
]

TOKEN = "correct-horse-battery-staple"

RULE = """\
id: restart-llm
title: the server refuses connections
severity: critical
applies_to: {states: [down]}
when:
  all:
    - {fact: probe.reason, op: eq, value: connection refused}
actions:
  - action: shell
    on: host
    params:
      argv: [sh, -c, 'cat "$0" >/dev/null; echo restarting llm; echo unit started', "{gate}"]
verify: {within: 90s}
mode: auto
"""


@dataclass
class Fleet:
    config: Path
    url: str
    sim: VllmSim
    sim_port: int
    process: WarmProcess
    gate: Path  #: a FIFO the repair's command reads first: the spec says when the step ends


@pytest.fixture
async def fleet(tmp_path: Path, sim_factory: SimFactory) -> AsyncIterator[Fleet]:
    sim_port = free_port()
    sim = await sim_factory(port=sim_port)
    other = await sim_factory(model="qwen")
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    (playbook / "restart-llm.yaml").write_text(RULE.replace("{gate}", str(gate)))
    (tmp_path / "token").write_text(TOKEN + "\n")
    port = free_port()
    config = write_fleet(
        tmp_path,
        {
            "llm": {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"},
            "qwen": {"kind": "openai", "url": other.url, "model": "qwen", "host": "forge"},
            "embed": {"kind": "health", "url": other.url + "/health", "host": "forge"},
        },
        remediation={"verify_every": "200ms"},
        playbook=str(playbook),
        http={"listen": f"127.0.0.1:{port}", "token_file": "token"},
    )
    process = await spawn_daemon(config, tmp_path / "daemon.log")
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(
            lambda: _healthy(url, "llm", "qwen", "embed"), within=20, what="every endpoint healthy"
        )
        yield Fleet(config=config, url=url, sim=sim, sim_port=sim_port, process=process, gate=gate)
    finally:
        _open_gate(gate)  # a repair the spec left waiting does not outlive it
        if process.returncode is None:
            process.terminate()
            await process.wait()


async def _healthy(url: str, *names: str) -> bool:
    """Whether /status says each of `names`, and no other endpoint, is healthy."""
    try:
        async with httpx.AsyncClient(verify=default_tls(), base_url=url) as client:
            status = (await client.get("/status")).json()
    except httpx.HTTPError:
        return False
    # by name: an answer with no endpoints in it is not a healthy fleet
    states = {e["name"]: e["state"] for e in status["endpoints"]}
    return states == dict.fromkeys(names, "healthy")


def _open_gate(gate: Path) -> bool:
    """Let the repair's command past its FIFO: whether it was waiting there (a writer can open
    a FIFO without waiting only once its reader has)."""
    try:
        os.close(os.open(gate, os.O_WRONLY | os.O_NONBLOCK))
    except OSError:
        return False
    return True


async def _fragment_has(url: str, path: str, marker: str) -> bool:
    """Whether the live part of the page at `path` (an incident's) holds `marker` now."""
    fragment = path.replace("/incidents/", "/fragments/incidents/")
    async with httpx.AsyncClient(verify=default_tls(), base_url=url) as client:
        return marker in (await client.get(fragment)).text


def _shots(tmp_path: Path) -> Path:
    folder = Path(os.environ.get("FLEET_PAGE_SHOTS", "") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _state(driver: WebDriver, name: str) -> tuple[str, str]:
    row = driver.find_element(By.ID, f"ep-{name}")
    return row.get_attribute("data-state") or "", row.get_attribute("class") or ""


def _texts(driver: WebDriver, css: str) -> list[str]:
    """The text of every element `css` selects, read in one script (so a live part of the page
    replaced meanwhile cannot leave a stale element half read)."""
    found = driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => e.innerText.trim())", css
    )
    return [str(text) for text in found]


def _red(driver: WebDriver) -> tuple[str, str] | None:
    """llm's state and its incident's link once its row is red, else None."""
    state, tone = _state(driver, "llm")
    if tone != "row-bad":
        return None
    link = driver.find_element(By.CSS_SELECTOR, "#ep-llm a[href^='/incidents/']")
    return state, link.get_attribute("href") or ""


def _cli(config: Path, *argv: str) -> str:
    return warmstart.run(["--config", str(config), *argv], timeout=30, check=True).stdout


#: Before the page's own script: the stream's 5 s `tick` never reaches the page, so only the live
#: path (a `timeline` event per committed entry) can refresh it.
WITHOUT_TICKS = """
const listen = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, ...rest) {
  if (type !== "tick") return listen.call(this, type, ...rest);
};
"""

#: Before the page's own script: its event stream opens only when the spec calls
#: `openStreams()`, so an entry can be committed after the page was read and before its stream
#: opens (as when a loaded machine is slow to run the page's script).
HELD_STREAMS = """
const Real = window.EventSource;
const held = [];
window.EventSource = function (url) {
  const stream = {
    url: url, listeners: [], onopen: null, onerror: null, real: null, closed: false,
    addEventListener(type, fn) { this.listeners.push([type, fn]); },
    close() { this.closed = true; if (this.real) this.real.close(); },
  };
  held.push(stream);
  return stream;
};
window.openStreams = function () {
  for (const stream of held) {
    if (stream.closed || stream.real) continue;
    stream.real = new Real(stream.url);
    stream.real.onopen = stream.onopen;
    stream.real.onerror = stream.onerror;
    for (const [type, fn] of stream.listeners) stream.real.addEventListener(type, fn);
  }
};
"""


async def test_a_fault_turns_the_board_red_live_and_the_incident_shows_the_repair(
    fleet: Fleet, tmp_path: Path, sim_factory: SimFactory
) -> None:
    shots = _shots(tmp_path)
    with chromium() as driver:
        driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": WITHOUT_TICKS})
        await asyncio.to_thread(driver.get, fleet.url + "/")
        # (once, in a fresh clone's check, the page had no row for llm: what it was, if again)
        page = f"{driver.title!r}: {_texts(driver, 'body')}"
        assert driver.title == "board · fleet-supervisor", page
        assert driver.find_elements(By.ID, "ep-llm") != [], page
        assert _state(driver, "llm") == ("healthy", "row-good")
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text == "● live")
        driver.execute_script("window.notReloaded = true")

        await fleet.sim.stop()  # the fault: the server is gone, connections are refused
        state, incident = await asyncio.to_thread(wait_for, driver, _red)
        assert state in ("down", "remediating", "verifying")
        # the tab says it too (a background tab's title and icon), from the same live path
        wait_for(driver, lambda d: d.title == "(1) board · fleet-supervisor")
        icon = driver.find_element(By.ID, "icon").get_attribute("href") or ""
        assert icon.endswith("/icons/bad.png")
        assert driver.execute_script("return window.notReloaded") is True  # live, no reload
        driver.save_screenshot(str(shots / "board.png"))

        # the incident page is read while the repair's command waits at its gate, and its
        # stream opens only once the step and the move to verifying are committed: the stream
        # must send what was committed after the page was read, not only what comes after it
        # opened (nothing more comes until the server is back: no tick reaches the page)
        hold = driver.execute_cdp_cmd(
            "Page.addScriptToEvaluateOnNewDocument", {"source": HELD_STREAMS}
        )
        await asyncio.to_thread(driver.get, incident)
        driver.execute_cdp_cmd("Page.removeScriptToEvaluateOnNewDocument", hold)
        await eventually(lambda: _open_gate(fleet.gate), within=30, what="the repair at its gate")
        path = incident.removeprefix(fleet.url)
        await eventually(
            lambda: _fragment_has(fleet.url, path, "remediating → verifying"),
            within=30,
            what="the step and the move to verifying committed",
        )
        step = "li[data-type=step]"
        assert _texts(driver, step) == []  # the page was read before the step
        driver.execute_script("window.openStreams()")
        await asyncio.to_thread(wait_for, driver, lambda d: _texts(d, step), within=10)
        assert _texts(driver, "li[data-type=step] .head")[0].endswith("step 1 shell on forge: ok")
        assert _texts(driver, "li[data-type=step] .command .exit") == ["exit 0"]
        assert _texts(driver, "li[data-type=step] .command pre") == ["restarting llm\nunit started"]
        assert _texts(driver, "li[data-type=diagnosis] .head")[0].endswith(
            "diagnosis: restart-llm — the server refuses connections"
        )
        assert "connection refused" in _texts(driver, "li[data-type=diagnosis] dl")[0]

        fleet.sim = await sim_factory(port=fleet.sim_port)  # the repair "worked"
        await asyncio.to_thread(
            wait_for, driver, lambda d: _texts(d, "li[data-type=verification]"), within=30
        )
        heads = [h.split(" ", 2)[-1] for h in _texts(driver, "li[data-type=transition] .head")]
        assert [h.split(":")[0] for h in heads][-3:] == [
            "down → remediating",
            "remediating → verifying",
            "verifying → healthy",
        ]
        height = driver.execute_script("return document.documentElement.scrollHeight")
        driver.set_window_size(1280, min(int(height), 3000))
        driver.save_screenshot(str(shots / "incident.png"))

        await asyncio.to_thread(driver.get, fleet.url + "/")
        wait_for(driver, lambda d: _state(d, "llm")[0] == "healthy")


async def test_a_silence_from_the_page_is_journaled_and_in_status(fleet: Fleet) -> None:
    with chromium() as driver:
        await asyncio.to_thread(driver.get, fleet.url + "/login")
        driver.find_element(By.NAME, "who").send_keys("alice")
        driver.find_element(By.NAME, "token").send_keys(TOKEN)
        await asyncio.to_thread(driver.find_element(By.CSS_SELECTOR, "form.stack button").click)
        wait_for(
            driver, lambda d: "signed in as alice" in d.find_element(By.TAG_NAME, "header").text
        )

        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        restart = driver.find_element(By.CSS_SELECTOR, "form[data-action=restart] button")
        restart.click()  # the page asks first
        alert = wait_for(driver, lambda d: d.switch_to.alert)
        assert alert.text == "Restart llm now?"
        await asyncio.to_thread(alert.accept)
        answer = wait_for(driver, lambda d: d.find_element(By.ID, "answer")).text
        assert answer == "not restarting llm: it has no units to restart"

        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        form = driver.find_element(By.CSS_SELECTOR, "form[data-action=silence]")
        duration = form.find_element(By.NAME, "for")
        duration.clear()
        duration.send_keys("2h")
        form.find_element(By.NAME, "why").send_keys("swapping a disk")
        await asyncio.to_thread(form.find_element(By.TAG_NAME, "button").click)
        answer = wait_for(driver, lambda d: d.find_element(By.ID, "answer")).text
        assert answer == "silenced llm for 2h: nothing is acted on until then"

        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        journal = "#endpoint-journal tbody tr"  # (live: each read in one script)
        cells = _texts(driver, f"{journal}:nth-child(1) td")[1:6]
        assert cells == ["silence", "llm", "alice", "web", "swapping a disk"]
        assert _texts(driver, f"{journal}:nth-child(2) td")[1] == "restart"

    status = json.loads(await asyncio.to_thread(_cli, fleet.config, "status", "--json"))
    states = {e["name"]: e["state"] for e in status["endpoints"]}
    assert states == {"llm": "maintenance", "qwen": "healthy", "embed": "healthy"}
    listing = await asyncio.to_thread(_cli, fleet.config, "silences")
    assert " llm until " in listing
    assert listing.rstrip().endswith("by alice: swapping a disk")


async def test_actions_without_the_token_are_refused(fleet: Fleet) -> None:
    with chromium() as driver:
        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        assert driver.find_elements(By.CSS_SELECTOR, "form.act") == []  # no forms to click
        driver.execute_script(
            """
            const f = document.createElement("form");
            f.method = "post"; f.action = "/actions/silence";
            for (const [k, v] of [["target", "llm"], ["for", "2h"], ["csrf", "guess"]]) {
              const i = document.createElement("input"); i.name = k; i.value = v; f.append(i);
            }
            document.body.append(f); f.submit();
            """
        )
        answer = wait_for(driver, lambda d: d.find_elements(By.ID, "answer"))[0].text
        assert answer == "refused: sign in with the token first: nothing was done"

        await asyncio.to_thread(driver.get, fleet.url + "/login")
        driver.find_element(By.NAME, "who").send_keys("mallory")
        driver.find_element(By.NAME, "token").send_keys("not-the-token")
        await asyncio.to_thread(driver.find_element(By.CSS_SELECTOR, "form.stack button").click)
        problem = wait_for(driver, lambda d: d.find_elements(By.ID, "problem"))[0].text
        assert problem == "wrong token: nothing was done"

        await asyncio.to_thread(driver.get, fleet.url + "/login")  # not ASCII: refused, no 500
        driver.find_element(By.NAME, "who").send_keys("mallory")
        driver.find_element(By.NAME, "token").send_keys("schlüssel-🔑")
        await asyncio.to_thread(driver.find_element(By.CSS_SELECTOR, "form.stack button").click)
        problem = wait_for(driver, lambda d: d.find_elements(By.ID, "problem"))[0].text
        assert problem == "wrong token: nothing was done"

    async with httpx.AsyncClient(verify=default_tls(), base_url=fleet.url) as client:
        login = await client.post(
            "/login", data={"who": "bob", "token": TOKEN}, headers={"Origin": fleet.url}
        )
        assert login.status_code == 303
        forged = await client.post(  # another site posting with bob's cookie
            "/actions/silence",
            data={"target": "llm", "for": "2h", "csrf": "x"},
            headers={"Origin": "http://evil.example"},
        )
        assert forged.status_code == 403
        assert "refused: the request comes from another site (http://evil.example)" in forged.text
        no_csrf = await client.post(
            "/actions/silence",
            data={"target": "llm", "for": "2h", "csrf": "x"},
            headers={"Origin": fleet.url},
        )
        assert no_csrf.status_code == 403
        assert "does not match your session" in no_csrf.text
        status = (await client.get("/status")).json()
    assert {e["name"]: e["state"] for e in status["endpoints"]}["llm"] == "healthy"


def _rgb(colour: str) -> str:
    """`#rrggbb` as the browser's computed style says it."""
    red, green, blue = (int(colour[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgb({red}, {green}, {blue})"


def _background(driver: WebDriver, css: str) -> str:
    return str(
        driver.execute_script(
            "return getComputedStyle(document.querySelector(arguments[0])).backgroundColor", css
        )
    )


async def test_an_endpoint_page_is_live_in_its_states_colour_and_the_tab_shows_the_worst(
    fleet: Fleet,
) -> None:
    async with httpx.AsyncClient(verify=default_tls(), base_url=fleet.url) as client:
        icon = await client.get("/favicon.ico")
    assert (icon.status_code, icon.headers["Content-Type"]) == (200, "image/x-icon")
    assert icon.content[:4] == b"\x00\x00\x01\x00"  # an ICO
    with chromium() as driver:
        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        assert driver.title == "llm · fleet-supervisor"
        assert _background(driver, "#state") == _rgb(TONES["good"].colour)
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text == "● live")
        driver.execute_script("window.notReloaded = true")

        await fleet.sim.stop()
        wait_for(driver, lambda d: d.title == "(1) llm · fleet-supervisor")
        icon_href = driver.find_element(By.ID, "icon").get_attribute("href") or ""
        assert icon_href.endswith("/icons/bad.png")
        state = wait_for(
            driver, lambda d: tone_of(s := d.find_element(By.ID, "state").text) == "bad" and s
        )
        assert state in ("down", "remediating", "verifying", "escalated")
        assert _background(driver, "#state") == _rgb(TONES["bad"].colour)
        assert _texts(driver, "#reason") == ["connection refused"]
        assert driver.execute_script("return window.notReloaded") is True


#: Eight pages in a row, as a person clicks through them.
CLICKED_THROUGH = (
    "/",
    "/incidents",
    "/silences",
    "/rules",
    "/endpoints/llm",
    "/",
    "/incidents",
    "/endpoints/qwen",
)


async def test_page_after_page_opens_without_waiting_for_the_last_ones_streams(
    fleet: Fleet,
) -> None:
    """Every page follows the daemon's event stream. A left page closes its stream: the browser
    keeps left pages (back-forward cache) and holds 6 connections to a server, so with the
    streams left open the seventh page waited about a minute for a free one."""
    with chromium() as driver:
        driver.set_page_load_timeout(30)
        waited = []
        for path in CLICKED_THROUGH:
            try:
                await asyncio.to_thread(driver.get, fleet.url + path)
            except TimeoutException:
                waited.append(path)
        assert waited == []
        # and the page it ended on follows the stream
        wait_for(driver, lambda d: d.find_element(By.ID, "live").text == "● live")


async def test_the_board_fits_a_phone_and_says_why_an_endpoint_is_red(
    fleet: Fleet, tmp_path: Path
) -> None:
    shots = _shots(tmp_path)
    with chromium(390, 844, phone=True) as driver:
        await asyncio.to_thread(driver.get, fleet.url + "/")
        assert driver.execute_script("return window.innerWidth") == 390
        await fleet.sim.stop()
        await asyncio.to_thread(wait_for, driver, _red)
        reason = wait_for(driver, lambda d: _texts(d, "#ep-llm .reason"))
        assert reason == ["connection refused"]
        # a live refresh may replace the row between the find and the read: read it again then
        assert wait_for(
            driver, lambda d: d.find_element(By.CSS_SELECTOR, "#ep-llm .reason").is_displayed()
        )
        widths = driver.execute_script(
            "const e = document.documentElement; return [e.scrollWidth, e.clientWidth]"
        )
        assert widths[0] <= widths[1]  # nothing to scroll sideways
        shown = driver.execute_script(
            "return [...document.querySelectorAll('table.board thead th')]"
            ".filter(e => e.getClientRects().length).map(e => e.innerText.trim())"
        )
        assert shown == ["endpoint", "state", "since", "incident"]
        driver.save_screenshot(str(shots / "phone.png"))


#: What makes a page scroll sideways: the page itself wider than the window, any element reaching
#: past its right edge, or any element that scrolls sideways inside itself (a wide table in an
#: `overflow-x: auto` box is sideways scrolling too).
SIDEWAYS = """
const doc = document.documentElement, width = doc.clientWidth, found = [];
const name = e => e.tagName.toLowerCase() + (e.id ? "#" + e.id : "")
  + (e.className && typeof e.className === "string" ? "." + e.className.split(" ").join(".") : "");
if (doc.scrollWidth > width) found.push("the page is " + doc.scrollWidth + " px wide");
for (const e of document.querySelectorAll("body *")) {
  const box = e.getBoundingClientRect();
  if (box.width && box.height && (box.right > width + 1 || box.left < -1))
    found.push(name(e) + " reaches " + Math.round(box.left) + ".." + Math.round(box.right));
  const overflow = getComputedStyle(e).overflowX;
  if ((overflow === "auto" || overflow === "scroll") && e.scrollWidth > e.clientWidth + 1)
    found.push(name(e) + " scrolls sideways (" + e.scrollWidth + " > " + e.clientWidth + ")");
}
return found.slice(0, 8);
"""


#: Each transition of an incident's timeline as its (fact, value) pairs.
TRANSITION_FACTS = (
    "return [...document.querySelectorAll('li[data-type=transition]')]"
    ".map(e => [...e.querySelectorAll('dt')]"
    ".map(t => [t.innerText, t.nextElementSibling.innerText]))"
)


async def test_every_page_fits_a_phone(fleet: Fleet, tmp_path: Path) -> None:
    """At 390 px, signed in (the forms are the widest parts), with an incident and a silence set
    from the CLI: the endpoint page, its incident, the incidents list, /silences (a glob's
    preview and its form) and the rules need no sideways scrolling, and the reason is text."""
    with chromium(390, 844, phone=True) as driver:
        await _sign_in(driver, fleet.url, "bob")
        await asyncio.to_thread(driver.get, fleet.url + "/")
        await fleet.sim.stop()
        _, incident = await asyncio.to_thread(wait_for, driver, _red)
        why = "swapping the NVMe in forge's second slot: back after the rebuild finishes"
        await asyncio.to_thread(_cli, fleet.config, "silence", "llm", "--for", "1h", "--why", why)
        pages = {
            "endpoint": "/endpoints/llm",
            "incident": incident.removeprefix(fleet.url),
            "incidents": "/incidents",
            "silences": "/silences?target=*e*",
            "rules": "/rules",
        }
        for page, path in pages.items():
            await asyncio.to_thread(driver.get, fleet.url + path)
            assert driver.execute_script("return window.innerWidth") == 390
            assert (page, driver.execute_script(SIDEWAYS)) == (page, [])
            driver.save_screenshot(str(tmp_path / f"phone-{page}.png"))
            if page == "endpoint":
                # (live: a refresh may replace it between a find and a read; read it again then)
                assert wait_for(driver, lambda d: _texts(d, "#reason")) == ["connection refused"]
                assert wait_for(driver, lambda d: d.find_element(By.ID, "reason").is_displayed())
            if page == "incident":  # the silence in the incident says who set it, and how
                await asyncio.to_thread(
                    wait_for, driver, lambda d: _texts(d, "li[data-type=transition]")
                )
                facts = driver.execute_script(TRANSITION_FACTS)
                silenced = [dict(f) for f in facts if dict(f).get("trigger") == "silence"]
                assert len(silenced) == 1
                assert {k: silenced[0].get(k) for k in ("by", "silence", "why")} == {
                    "by": f"{getpass.getuser()} (cli)",
                    "silence": "#1 on llm",
                    "why": why,
                }

        # and who ended it
        await asyncio.to_thread(_cli, fleet.config, "unsilence", "llm")
        await asyncio.to_thread(driver.get, incident)

        def unsilenced(d: WebDriver) -> list[dict[str, str]]:
            return [
                dict(f)
                for f in d.execute_script(TRANSITION_FACTS)
                if dict(f).get("trigger") == "unsilence"
            ]

        ended = await asyncio.to_thread(wait_for, driver, unsilenced)
        assert ended[0]["by"] == f"{getpass.getuser()} (cli)"


async def _sign_in(driver: Chrome, url: str, who: str) -> None:
    await asyncio.to_thread(driver.get, url + "/login")
    driver.find_element(By.NAME, "who").send_keys(who)
    driver.find_element(By.NAME, "token").send_keys(TOKEN)
    await asyncio.to_thread(driver.find_element(By.CSS_SELECTOR, "form.stack button").click)
    wait_for(driver, lambda d: f"signed in as {who}" in d.find_element(By.TAG_NAME, "header").text)


async def test_a_glob_silence_previews_what_it_covers_then_silences_it(
    fleet: Fleet, tmp_path: Path
) -> None:
    shots = _shots(tmp_path)
    with chromium() as driver:
        await _sign_in(driver, fleet.url, "alice")
        await asyncio.to_thread(driver.get, fleet.url + "/silences")
        driver.find_element(By.ID, "target").send_keys("*e*")  # qwen and embed, not llm
        wait_for(driver, lambda d: _texts(d, "#preview li") == ["qwen healthy", "embed healthy"])
        form = driver.find_element(By.CSS_SELECTOR, "form[data-action=silence]")
        assert form.find_element(By.TAG_NAME, "button").text == "silence 2 endpoints"
        form.find_element(By.CSS_SELECTOR, "input[name=for][value='1h']").click()
        form.find_element(By.NAME, "why").send_keys("moving the rack")
        driver.save_screenshot(str(shots / "silence.png"))
        await asyncio.to_thread(form.find_element(By.TAG_NAME, "button").click)
        answer = wait_for(driver, lambda d: d.find_element(By.ID, "answer")).text
        assert answer == "silenced qwen, embed for 1h: nothing is acted on until then"

        listing = (await asyncio.to_thread(_cli, fleet.config, "silences")).splitlines()
        assert listing[0].startswith("silence #1 *e* until ")
        assert listing[0].endswith(" by alice: moving the rack")
        # who set it (and through what) wherever the page shows it
        await asyncio.to_thread(driver.get, fleet.url + "/silences")
        active = _texts(driver, "#active-silences li[data-silence='1']")[0]
        assert " by alice (web): moving the rack" in active
        await asyncio.to_thread(driver.get, fleet.url + "/")
        board_line = " ".join(_texts(driver, "#silences li")[0].split())
        assert re.fullmatch(
            r"silence #1 \*e\* until \S+Z by alice \(web\): moving the rack ?end it", board_line
        )
        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/qwen")
        shown = _texts(driver, "#endpoint-silences li")
        assert len(shown) == 1
        assert re.fullmatch(
            r"silenced by alice \(web\) until \S+: moving the rack · #1 \*e\*", shown[0]
        )
        await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
        assert _texts(driver, "#endpoint-silences li") == []
        status = json.loads(await asyncio.to_thread(_cli, fleet.config, "status", "--json"))
        states = {e["name"]: e["state"] for e in status["endpoints"]}
        assert states == {"llm": "healthy", "qwen": "maintenance", "embed": "maintenance"}

        await asyncio.to_thread(driver.get, fleet.url + "/silences")  # extend it to 4h
        edit = driver.find_element(By.CSS_SELECTOR, "li[data-silence='1'] form[data-action=edit]")
        edit.find_element(By.CSS_SELECTOR, "select[name=for] option[value='4h']").click()
        await asyncio.to_thread(edit.find_element(By.TAG_NAME, "button").click)
        answer = wait_for(driver, lambda d: d.find_element(By.ID, "answer")).text
        assert answer.startswith("silence #1 on *e* (qwen, embed) now ends ")
        until = answer.rsplit(" ", 2)[-2:]
        longer = (await asyncio.to_thread(_cli, fleet.config, "silences")).splitlines()[0]
        assert longer.split()[4] == "T".join(until).removesuffix("Z") + "Z"

        await asyncio.to_thread(driver.get, fleet.url + "/silences")  # expire it
        expire = driver.find_element(
            By.CSS_SELECTOR, "li[data-silence='1'] form[data-action=unsilence] button"
        )
        await asyncio.to_thread(expire.click)
        answer = wait_for(driver, lambda d: d.find_element(By.ID, "answer")).text
        assert answer == "unsilenced qwen, embed: they are judged afresh"
        await asyncio.to_thread(driver.get, fleet.url + "/silences")
        assert _texts(driver, "#active-silences li") == ["none"]
        ended = _texts(driver, "#expired-silences li")
        assert len(ended) == 1
        assert ended[0].startswith("#1 *e* from ")
        assert "ended early" in ended[0]
        assert ended[0].endswith(" by alice · set by alice (web): moving the rack")
    assert (await asyncio.to_thread(_cli, fleet.config, "silences")).strip() == (
        "no silences, no pauses"
    )


async def _known_history(db: Path, now: datetime) -> None:
    """llm over the last 48 h: healthy, down 20 h-18 h ago (an incident, repaired), silenced
    10 h-8 h ago, healthy since; the daemon that watched it was last seen `now`."""
    h = timedelta(hours=1)
    ep = SubjectKind.ENDPOINT
    async with await Store.open(db) as store:
        await store.supervising(now - 48 * h, [(ep, "llm", "healthy")])
        steps = [
            ("healthy", "down", now - 20 * h, "connection refused", None),
            ("down", "healthy", now - 18 * h, None, "a real completion passes again"),
            ("healthy", "maintenance", now - 10 * h, None, None),
            ("maintenance", "healthy", now - 8 * h, None, None),
        ]
        for source, dest, at, cause, closed in steps:
            await store.transition(
                snapshot=Snapshot(kind=ep, name="llm", state=dest, since=at, updated_at=at),
                entry=TimelineEntry(
                    at=at,
                    subject="llm",
                    record=Transition(
                        source=State(source), dest=State(dest), trigger=Trigger.PASS, note="spec"
                    ),
                ),
                open_cause=cause,
                close_resolution=closed,
            )
        await store.supervised(now - 48 * h, now)


async def test_availability_on_the_page_is_what_the_store_says(
    tmp_path: Path, sim: VllmSim
) -> None:
    port = free_port()
    config = write_fleet(
        tmp_path,
        {"llm": {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    await _known_history(tmp_path / "state" / "supervisor.db", datetime.now(UTC))
    process = await spawn_daemon(config, tmp_path / "daemon.log")
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: _healthy(url, "llm"), within=20, what="llm healthy")
        with chromium() as driver:
            await asyncio.to_thread(driver.get, url + "/endpoints/llm")
            rows = {r.split("\t")[0]: r.split("\t")[1:] for r in _texts(driver, "#availability tr")}
            # 24 h: 20 h serving, 2 h down, 2 h silenced, and the seconds the daemon was off
            # (between its last beat and this run): availability 20 / 22
            # (the serving time a few seconds either side of 20 h: the window moved meanwhile)
            percent, serving, down, silenced, off = rows["24h"]
            assert (percent, down, silenced) == ("90.91%", "2h 0m", "2h 0m")
            assert serving in ("19h 59m", "20h 0m")
            assert re.fullmatch(r"\d+s", off)
            # 7 d: 44 h serving, nobody watched it before the 48 h
            percent, serving, down, silenced, off = rows["7d"]
            assert (percent, down, silenced) == ("95.65%", "2h 0m", "2h 0m")
            assert (serving, off) in (("1d 19h", "5d 0h"), ("1d 20h", "4d 23h"))
            assert _texts(driver, "#mttr") == ["2h 0m"]
            height = driver.execute_script("return document.documentElement.scrollHeight")
            driver.set_window_size(1280, min(int(height), 3000))
            driver.save_screenshot(str(_shots(tmp_path) / "endpoint.png"))
            bar = _texts(driver, "#history-causes li")
            assert len(bar) == 1
            assert bar[0].endswith(": #1 connection refused")
            # the 30 days: before supervision began (48 h ago) nobody watched it: not
            # supervised, neither up nor down, in its own colour
            now = datetime.now(UTC)
            began, fault = (
                (now - 48 * timedelta(hours=1)).date(),
                (now - timedelta(hours=20)).date(),
            )
            days = driver.execute_script(
                "return [...document.querySelectorAll('#history li')].map(e =>"
                " [e.dataset.day, e.dataset.status, getComputedStyle(e).backgroundColor])"
            )
            assert len(days) == 30
            colours = {
                "not supervised": "rgb(224, 224, 224)",
                "incidents": _rgb(TONES["bad"].colour),
            }
            colours["no incident"] = "rgb(102, 187, 106)"
            for day, status, colour in days:
                when = datetime.fromisoformat(day).date()
                expected = (
                    "not supervised"
                    if when < began
                    else "incidents"
                    if when == fault
                    else "no incident"
                )
                assert (day, status, colour) == (day, expected, colours[expected])
            assert (
                sum(1 for _, status, _ in days if status == "not supervised")
                == 30 - (now.date() - began).days - 1
            )
            await asyncio.to_thread(driver.get, url + "/")
            cells = _texts(driver, "#ep-llm td.avail")
            assert cells == ["90.91%", "95.65%", "95.65%"]
    finally:
        process.terminate()
        await process.wait()


async def test_the_board_shows_the_last_doctor_run(tmp_path: Path, sim: VllmSim) -> None:
    """What `status` and Telegram's /status say of the last `doctor` run, on the board: when,
    its counts, and what it found wrong, failures first (the run before it is not shown)."""
    port = free_port()
    config = write_fleet(
        tmp_path,
        {"llm": {"kind": "openai", "url": sim.url, "model": "sim-model", "host": "forge"}},
        http={"listen": f"127.0.0.1:{port}"},
    )
    now = datetime.now(UTC).replace(microsecond=0)
    earlier = DoctorRun(at=now - timedelta(days=2), took_s=1.0, findings=(ok("llm", "model", "x"),))
    latest = DoctorRun(
        at=now - timedelta(minutes=5),
        took_s=2.34,
        findings=(
            ok("forge", "ssh", "root@forge answers"),
            warn("llm", "metrics", "no /metrics", "enable vLLM's metrics"),
            fail("forge", "sudo systemctl restart vllm", "a password is asked", "install sudoers"),
            ok("store", "write", "writable"),
        ),
    )
    async with await Store.open(tmp_path / "state" / "supervisor.db") as store:
        for run in (earlier, latest):
            await save_doctor_run(
                store, at=run.at, ok=run.ok, summary=run.summary(), document=run.document()
            )
    process = await spawn_daemon(config, tmp_path / "daemon.log")
    url = f"http://127.0.0.1:{port}"
    try:
        await eventually(lambda: _healthy(url, "llm"), within=20, what="llm healthy")
        with chromium() as driver:
            await asyncio.to_thread(driver.get, url + "/")
            head = " ".join(_texts(driver, "#doctor p")[0].split())
            when = re.escape(stamp(latest.at))
            assert re.fullmatch(rf"fail {when} \(5m \d+s ago\): 2 ok, 1 warn, 1 fail in 2.3s", head)
            assert _background(driver, "#doctor .pill") == _rgb(TONES["bad"].colour)
            assert _texts(driver, "#doctor-problems li") == [
                "FAIL forge · sudo systemctl restart vllm: a password is asked — install sudoers",
                "WARN llm · metrics: no /metrics — enable vLLM's metrics",
            ]
        line = (await asyncio.to_thread(_cli, config, "status")).splitlines()
        assert f"last doctor run {latest.at:%Y-%m-%d %H:%M} UTC: 2 ok, 1 warn, 1 fail in 2.3s" in [
            x.split(": run `")[0] for x in line
        ]
    finally:
        process.terminate()
        await process.wait()


EVIL_FETCHES = """<!doctype html><title>evil</title><script>
const fleet = %(fleet)s;
const asks = [["silence", {target: "llm", for: "2h"}], ["pause", {endpoint: "llm"}],
              ["restart", {endpoint: "llm"}]];
const tries = [];
for (const [name, body] of asks) {
  // a "simple" request: no preflight, the browser sends it and hides the answer
  tries.push(fetch(fleet + "/control/" + name, {method: "POST", mode: "no-cors",
    headers: {"Content-Type": "text/plain"}, body: JSON.stringify(body)}).then(() => "sent"));
  // JSON: the browser asks first (a CORS preflight), which the control API never grants
  tries.push(fetch(fleet + "/control/" + name, {method: "POST",
    headers: {"Content-Type": "application/json"}, body: JSON.stringify(body)})
    .then(() => "answered", () => "blocked"));
}
Promise.all(tries).then(r => { document.title = r.join(","); });
</script>"""

EVIL_FORM = """<!doctype html><title>evil form</title>
<form method="post" action="%(action)s">%(fields)s</form>
<script>document.forms[0].submit();</script>"""


async def _evil_site(pages: dict[str, str]) -> tuple[str, web.AppRunner]:
    """Another origin on loopback (another port: the same site to the browser) serving `pages`."""
    app = web.Application()
    for path, body in pages.items():

        async def page(_: web.Request, body: str = body) -> web.Response:
            return web.Response(text=body, content_type="text/html")

        app.router.add_get(path, page)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return f"http://127.0.0.1:{port}", runner


def _form(action: str, fields: dict[str, str]) -> str:
    inputs = "".join(f'<input name="{k}" value="{v}">' for k, v in fields.items())
    return EVIL_FORM % {"action": action, "fields": inputs}


async def test_a_page_of_another_origin_cannot_silence_pause_or_restart(
    fleet: Fleet, tmp_path: Path
) -> None:
    forms = {
        "silence": {"target": "llm", "for": "2h", "csrf": "guess"},
        "pause": {"endpoint": "llm", "csrf": "guess"},
        "restart": {"endpoint": "llm", "confirm": "yes", "csrf": "guess"},
    }
    pages = {"/": EVIL_FETCHES % {"fleet": json.dumps(fleet.url)}}
    pages |= {f"/{n}": _form(f"{fleet.url}/actions/{n}", f) for n, f in forms.items()}
    evil, runner = await _evil_site(pages)
    log = tmp_path / "daemon.log"
    try:
        with chromium() as driver:
            await asyncio.to_thread(driver.get, fleet.url + "/login")  # signed in: the cookie
            driver.find_element(By.NAME, "who").send_keys("alice")  # goes with every request
            driver.find_element(By.NAME, "token").send_keys(TOKEN)
            await asyncio.to_thread(driver.find_element(By.CSS_SELECTOR, "form.stack button").click)
            wait_for(
                driver,
                lambda d: "signed in as alice" in d.find_element(By.TAG_NAME, "header").text,
            )

            await asyncio.to_thread(driver.get, evil + "/")
            title = wait_for(driver, lambda d: d.title if d.title != "evil" else None)
            assert title == "sent,blocked,sent,blocked,sent,blocked"
            for name in forms:
                await asyncio.to_thread(driver.get, f"{evil}/{name}")
                answer = wait_for(driver, lambda d: d.find_elements(By.ID, "answer"))[0].text
                assert answer == f"refused: the request comes from another site ({evil}): refused"

            await asyncio.to_thread(driver.get, fleet.url + "/endpoints/llm")
            journal = _texts(driver, "#endpoint-journal tbody tr")
            assert journal == ["nothing yet"]  # nothing reached the control API
    finally:
        await runner.cleanup()

    def refusals() -> list[str]:
        lines = [json.loads(line) for line in log.read_text().splitlines() if line.startswith("{")]
        return [
            f"{e['status']} {e['path']} {e['why']}"
            for e in lines
            if e.get("event") == "control request refused"
        ]

    await eventually(lambda: len(refusals()) >= 6, what="the six fetches refused")
    browser = f"forbidden: the control API does not answer browsers (Origin: {evil})"
    assert sorted(set(refusals())) == [  # the no-cors POSTs and the JSON ones' preflights
        f"403 /control/{name} {browser}; use the CLI, or the fleet page's actions"
        for name in ("pause", "restart", "silence")
    ]
    listing = await asyncio.to_thread(_cli, fleet.config, "silences")
    assert listing == "no silences, no pauses\n"
    async with httpx.AsyncClient(verify=default_tls(), base_url=fleet.url) as client:
        status = (await client.get("/status")).json()
    assert {e["name"]: e["state"] for e in status["endpoints"]}["llm"] == "healthy"
