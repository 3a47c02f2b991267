"""The fleet page in a real browser (Debian's Chromium, headless) against the daemon as a real
process and a vLLM-shaped lab server on loopback: a fault turns the endpoint red on the board
without a reload, the incident shows the repair's step with its exit code and output, a silence
set from the page is in the endpoint's journal and in `status` and `silences`, a restart asks
first, and an action without the token is refused. The screenshots in docs/img are made here
(FLEET_PAGE_SHOTS=DIR writes them there; otherwise into the test's temporary folder)."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from fleet_lab.vllm_sim.server import VllmSim
from tests.browser import chromium, missing
from tests.conftest import SimFactory, free_port
from tests.helpers import eventually, spawn_daemon, write_fleet

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
    params: {argv: [sh, -c, "echo restarting llm; echo unit started"]}
verify: {within: 30s}
mode: auto
"""


@dataclass
class Fleet:
    config: Path
    url: str
    sim: VllmSim
    sim_port: int
    process: asyncio.subprocess.Process


@pytest.fixture
async def fleet(tmp_path: Path, sim_factory: SimFactory) -> AsyncIterator[Fleet]:
    sim_port = free_port()
    sim = await sim_factory(port=sim_port)
    other = await sim_factory(model="qwen")
    playbook = tmp_path / "playbooks"
    playbook.mkdir()
    (playbook / "restart-llm.yaml").write_text(RULE)
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
        await eventually(lambda: _healthy(url), within=20, what="both endpoints healthy")
        yield Fleet(config=config, url=url, sim=sim, sim_port=sim_port, process=process)
    finally:
        if process.returncode is None:
            process.terminate()
            await process.wait()


async def _healthy(url: str) -> bool:
    try:
        async with httpx.AsyncClient(base_url=url) as client:
            status = (await client.get("/status")).json()
    except httpx.HTTPError:
        return False
    return all(e["state"] == "healthy" for e in status["endpoints"])


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
    done = subprocess.run(
        [sys.executable, "-m", "supervisor", "--config", str(config), *argv],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    return done.stdout


#: Before the page's own script: the stream's 5 s `tick` never reaches the page, so only the live
#: path (a `timeline` event per committed entry) can refresh it.
WITHOUT_TICKS = """
const listen = EventSource.prototype.addEventListener;
EventSource.prototype.addEventListener = function (type, ...rest) {
  if (type !== "tick") return listen.call(this, type, ...rest);
};
"""


async def test_a_fault_turns_the_board_red_live_and_the_incident_shows_the_repair(
    fleet: Fleet, tmp_path: Path, sim_factory: SimFactory
) -> None:
    shots = _shots(tmp_path)
    async with chromium() as browser:
        await browser(
            lambda d: d.execute_cdp_cmd(
                "Page.addScriptToEvaluateOnNewDocument", {"source": WITHOUT_TICKS}
            )
        )
        await browser.get(fleet.url + "/")
        assert await browser(lambda d: _state(d, "llm")) == ("healthy", "row-good")
        await browser.wait(lambda d: d.find_element(By.ID, "live").text == "● live")
        await browser(lambda d: d.execute_script("window.notReloaded = true"))

        await fleet.sim.stop()  # the fault: the server is gone, connections are refused
        red = await browser.wait(_red)
        assert red is not None
        state, incident = red
        assert state in ("down", "remediating", "verifying")
        # live, no reload
        assert await browser(lambda d: d.execute_script("return window.notReloaded")) is True
        await browser(lambda d: d.save_screenshot(str(shots / "board.png")))

        await browser.get(incident)
        await browser.wait(lambda d: _texts(d, "li[data-type=step]"))
        heads = await browser(lambda d: _texts(d, "li[data-type=step] .head"))
        assert heads[0].endswith("step 1 shell on forge: ok")
        assert await browser(lambda d: _texts(d, "li[data-type=step] .command .exit")) == ["exit 0"]
        assert await browser(lambda d: _texts(d, "li[data-type=step] .command pre")) == [
            "restarting llm\nunit started"
        ]
        diagnosis = await browser(lambda d: _texts(d, "li[data-type=diagnosis] .head"))
        assert diagnosis[0].endswith("diagnosis: restart-llm — the server refuses connections")
        facts = await browser(lambda d: _texts(d, "li[data-type=diagnosis] dl"))
        assert "connection refused" in facts[0]

        fleet.sim = await sim_factory(port=fleet.sim_port)  # the repair "worked"
        await browser.wait(lambda d: _texts(d, "li[data-type=verification]"), within=30)
        heads = await browser(lambda d: _texts(d, "li[data-type=transition] .head"))
        assert [h.split(" ", 2)[-1].split(":")[0] for h in heads][-3:] == [
            "down → remediating",
            "remediating → verifying",
            "verifying → healthy",
        ]
        await browser(lambda d: _full_page_shot(d, shots / "incident.png"))

        await browser.get(fleet.url + "/")
        await browser.wait(lambda d: _state(d, "llm")[0] == "healthy")


def _full_page_shot(driver: WebDriver, path: Path) -> None:
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1280, min(int(height), 3000))
    driver.save_screenshot(str(path))


def _sign_in(driver: WebDriver, url: str, who: str, token: str) -> None:
    driver.get(url + "/login")
    driver.find_element(By.NAME, "who").send_keys(who)
    driver.find_element(By.NAME, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, "form.stack button").click()


def _silence_from_the_form(driver: WebDriver, url: str) -> None:
    driver.get(url + "/endpoints/llm")
    form = driver.find_element(By.CSS_SELECTOR, "form[data-action=silence]")
    duration = form.find_element(By.NAME, "for")
    duration.clear()
    duration.send_keys("2h")
    form.find_element(By.NAME, "why").send_keys("swapping a disk")
    form.find_element(By.TAG_NAME, "button").click()


def _journal(driver: WebDriver) -> list[list[str]]:
    """The endpoint's journal: each row's cells."""
    rows = driver.find_elements(By.CSS_SELECTOR, "#endpoint-journal tbody tr")
    return [[c.text for c in row.find_elements(By.TAG_NAME, "td")] for row in rows]


async def test_a_silence_from_the_page_is_journaled_and_in_status(fleet: Fleet) -> None:
    async with chromium() as browser:
        await browser(lambda d: _sign_in(d, fleet.url, "alice", TOKEN))
        await browser.wait(
            lambda d: "signed in as alice" in d.find_element(By.TAG_NAME, "header").text
        )

        await browser.get(fleet.url + "/endpoints/llm")
        # the page asks first
        await browser(
            lambda d: d.find_element(By.CSS_SELECTOR, "form[data-action=restart] button").click()
        )
        alert = await browser.wait(lambda d: d.switch_to.alert)
        assert await browser(lambda d: alert.text) == "Restart llm now?"
        await browser(lambda d: alert.accept())
        answer = await browser.wait(lambda d: d.find_element(By.ID, "answer").text)
        assert answer == "not restarting llm: it has no units to restart"

        await browser(lambda d: _silence_from_the_form(d, fleet.url))
        answer = await browser.wait(lambda d: d.find_element(By.ID, "answer").text)
        assert answer == "silenced llm for 2h: nothing is acted on until then"

        await browser.get(fleet.url + "/endpoints/llm")
        journal = await browser(_journal)
        assert journal[0][1:6] == ["silence", "llm", "alice", "web", "swapping a disk"]
        assert journal[1][1] == "restart"

    status = json.loads(await asyncio.to_thread(_cli, fleet.config, "status", "--json"))
    states = {e["name"]: e["state"] for e in status["endpoints"]}
    assert states == {"llm": "maintenance", "qwen": "healthy", "embed": "healthy"}
    listing = await asyncio.to_thread(_cli, fleet.config, "silences")
    assert " llm until " in listing
    assert listing.rstrip().endswith("by alice: swapping a disk")


FORGED_SILENCE = """
const f = document.createElement("form");
f.method = "post"; f.action = "/actions/silence";
for (const [k, v] of [["target", "llm"], ["for", "2h"], ["csrf", "guess"]]) {
  const i = document.createElement("input"); i.name = k; i.value = v; f.append(i);
}
document.body.append(f); f.submit();
"""


async def test_actions_without_the_token_are_refused(fleet: Fleet) -> None:
    async with chromium() as browser:
        await browser.get(fleet.url + "/endpoints/llm")
        # no forms to click
        assert await browser(lambda d: d.find_elements(By.CSS_SELECTOR, "form.act")) == []
        await browser(lambda d: d.execute_script(FORGED_SILENCE))
        answer = await browser.wait(lambda d: d.find_elements(By.ID, "answer")[0].text)
        assert answer == "refused: sign in with the token first: nothing was done"

        await browser(lambda d: _sign_in(d, fleet.url, "mallory", "not-the-token"))
        problem = await browser.wait(lambda d: d.find_elements(By.ID, "problem")[0].text)
        assert problem == "wrong token: nothing was done"

    async with httpx.AsyncClient(base_url=fleet.url) as client:
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
