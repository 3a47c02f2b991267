"""Busy is not broken: what two readings of a server's load say, and the sim's load modes that
the readings are tested against (saturated, hung engine, queued completions)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fleet_lab.vllm_sim.control import ControlFile
from fleet_lab.vllm_sim.server import SimBehaviour, VllmSim
from supervisor.config.supervised import Endpoint
from supervisor.core.clock import SystemClock
from supervisor.core.httpclient import HttpClient
from supervisor.execute.local import LocalExecutor
from supervisor.judge.progress.judge import Progress, ProgressVerdict, judge_progress
from supervisor.judge.progress.load import Load, MetricsFormatError, parse_vllm_metrics
from supervisor.judge.progress.read import read_progress
from supervisor.playbook.evidence.base import CollectContext, Scope
from supervisor.playbook.evidence.registry import COLLECTORS
from tests.conftest import SimFactory
from tests.helpers import eventually

T0 = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)
CHAT = "/v1/chat/completions"
WINDOW = timedelta(milliseconds=400)


def load(at_s: float, **values: float) -> Load:
    return Load(at=T0 + timedelta(seconds=at_s), **values)


@pytest.mark.parametrize(
    ("first", "second", "verdict", "reason"),
    [
        (
            load(0, running=48, waiting=20, generation_tokens=1000),
            load(5, running=48, waiting=20, generation_tokens=5700),
            ProgressVerdict.BUSY,
            "busy: 48 running, 20 waiting, 940 tok/s generated",
        ),
        (
            load(0, running=0, waiting=3, generation_tokens=10),
            load(2, running=1, waiting=2, generation_tokens=30),
            ProgressVerdict.BUSY,
            "busy: 1 running, 2 waiting, 10 tok/s generated",
        ),
        (
            load(0, running=1, waiting=0, generation_tokens=10),
            load(5, running=1, waiting=0, generation_tokens=35),
            ProgressVerdict.IDLE,
            "idle: 1 running, 0 waiting, 5 tok/s generated (one request is not load)",
        ),
        (
            load(0, running=2, waiting=0, generation_tokens=10),
            load(5, running=2, waiting=0, generation_tokens=60),
            ProgressVerdict.BUSY,
            "busy: 2 running, 0 waiting, 10 tok/s generated",
        ),
        (
            load(0, running=3, waiting=0, generation_tokens=123456),
            load(5, running=3, waiting=0, generation_tokens=123456),
            ProgressVerdict.HUNG,
            "hung: 3 running, 0 waiting, generation_tokens_total frozen at 123456 for 5.0s",
        ),
        (
            load(0, running=0, waiting=20, generation_tokens=77),
            load(4, running=0, waiting=20, generation_tokens=77),
            ProgressVerdict.HUNG,
            "hung: 0 running, 20 waiting, generation_tokens_total frozen at 77 for 4.0s",
        ),
        (
            load(0, running=0, waiting=0, generation_tokens=50),
            load(5, running=0, waiting=0, generation_tokens=50),
            ProgressVerdict.IDLE,
            "idle: nothing running or waiting (0 tok/s generated)",
        ),
        (
            load(0, running=2, waiting=0, generation_tokens=50),
            load(5, running=0, waiting=0, generation_tokens=100),
            ProgressVerdict.IDLE,
            "idle: nothing running or waiting (10 tok/s generated)",
        ),
        (
            load(0, running=2, waiting=0, generation_tokens=900),
            load(5, running=2, waiting=0, generation_tokens=10),
            ProgressVerdict.UNKNOWN,
            "unknown: the token counter went back (the server restarted)",
        ),
        (
            load(0, running=2, waiting=0),
            load(5, running=2, waiting=0),
            ProgressVerdict.UNKNOWN,
            "unknown: the server does not export running, waiting and token counts",
        ),
        (
            load(5, running=2, waiting=0, generation_tokens=1),
            load(5, running=2, waiting=0, generation_tokens=2),
            ProgressVerdict.UNKNOWN,
            "unknown: the two readings are not apart in time",
        ),
    ],
)
def test_judge_progress(first: Load, second: Load, verdict: ProgressVerdict, reason: str) -> None:
    seen = judge_progress(first, second)
    assert (seen.verdict, seen.reason) == (verdict, reason)
    assert seen.making_progress is (verdict is ProgressVerdict.BUSY)


def test_busy_carries_its_figures() -> None:
    first = load(0, running=48, waiting=20, generation_tokens=1000, kv_cache_usage=0.97)
    second = load(5, running=48, waiting=20, generation_tokens=5700, kv_cache_usage=0.97)
    assert judge_progress(first, second) == Progress(
        verdict=ProgressVerdict.BUSY,
        reason="busy: 48 running, 20 waiting, 940 tok/s generated",
        generation_tokens=5700,
        running=48,
        waiting=20,
        tok_s=940.0,
        kv_cache_usage=0.97,
        window_s=5.0,
    )


VLLM_PAGE = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="ds4"} 30.0
vllm:num_requests_running{engine="1",model_name="ds4"} 18.0
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="ds4"} 20.0
vllm:num_requests_waiting{engine="1",model_name="ds4"} NaN
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="ds4"} 0.97
vllm:kv_cache_usage_perc{engine="1",model_name="ds4"} 0.41
# TYPE vllm:generation_tokens_total counter
vllm:generation_tokens_total{engine="0",model_name="ds4"} 1.5e+06
vllm:generation_tokens_total{engine="1",model_name="ds4"} 250000.0
# TYPE vllm:generation_tokens_created gauge
vllm:generation_tokens_created{engine="0",model_name="ds4"} 1.764e+09
"""


def test_parse_sums_engines_takes_the_fullest_kv_cache_and_skips_nan() -> None:
    assert parse_vllm_metrics(VLLM_PAGE, at=T0) == Load(
        at=T0, running=48.0, waiting=20.0, generation_tokens=1_750_000.0, kv_cache_usage=0.97
    )


def test_parse_reads_the_old_kv_cache_name_and_leaves_absent_series_none() -> None:
    page = 'vllm:gpu_cache_usage_perc{model_name="m"} 0.5\n'
    assert parse_vllm_metrics(page, at=T0) == Load(at=T0, kv_cache_usage=0.5)


def test_a_malformed_page_is_a_format_error_in_the_parsers_words() -> None:
    with pytest.raises(MetricsFormatError, match=r"^not Prometheus text: "):
        parse_vllm_metrics("vllm:num_requests_running{engine=0} 3\n", at=T0)


# -- against the sim, over real HTTP --------------------------------------------------------------


@pytest.fixture
async def http() -> AsyncIterator[HttpClient]:
    async with HttpClient() as client:
        yield client


async def progress_of(sim: VllmSim, http: HttpClient, kind: str = "openai") -> Progress:
    return await read_progress(
        sim.url, kind, http, clock=SystemClock(), window=WINDOW, timeout=timedelta(seconds=5)
    )


def chat(max_tokens: int = 8) -> dict[str, object]:
    return {
        "model": "sim-model",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": max_tokens,
    }


async def test_a_saturated_server_is_busy(sim: VllmSim, http: HttpClient) -> None:
    sim.behaviour.load_running, sim.behaviour.load_waiting = 48, 20
    sim.behaviour.load_tok_s = 940.0
    seen = await progress_of(sim, http)
    assert seen.verdict is ProgressVerdict.BUSY
    assert seen.reason.startswith("busy: 48 running, 20 waiting, ")
    assert seen.tok_s is not None
    assert 400 < seen.tok_s < 1500  # 940/s over a measured window
    assert seen.kv_cache_usage == pytest.approx(0.96)


async def test_a_hung_engine_is_hung_while_health_and_models_answer(
    sim: VllmSim, http: HttpClient
) -> None:
    sim.behaviour.engine_hung, sim.behaviour.load_running = True, 3
    stuck = asyncio.create_task(http.post(sim.url + CHAT, json=chat()))
    running = 'vllm:num_requests_running{model_name="sim-model",engine="0"} 4.0'
    await eventually(
        lambda: _has(http, sim, running), what="our request running beside the 3 stuck ones"
    )
    seen = await progress_of(sim, http)
    assert seen.verdict is ProgressVerdict.HUNG
    assert seen.reason.startswith("hung: 4 running, 0 waiting, generation_tokens_total frozen at ")
    assert (await http.get(sim.url + "/health")).status_code == 200
    assert (await http.get(sim.url + "/v1/models")).status_code == 200
    assert not stuck.done()
    sim.behaviour.engine_hung = False  # the engine steps again: the stuck request completes
    assert (await stuck).status_code == 200


async def _has(http: HttpClient, sim: VllmSim, line: str) -> bool:
    return line in (await http.get(sim.url + "/metrics")).text


async def test_an_idle_server_is_idle(sim: VllmSim, http: HttpClient) -> None:
    seen = await progress_of(sim, http)
    assert (seen.verdict, seen.reason) == (
        ProgressVerdict.IDLE,
        "idle: nothing running or waiting (0 tok/s generated)",
    )


async def test_servers_without_metrics_are_unknown(
    sim_factory: SimFactory, http: HttpClient
) -> None:
    mlx = await sim_factory(flavour="mlx")
    ollama = await sim_factory(flavour="ollama")
    assert (await progress_of(mlx, http)).reason == "unknown: no metrics (HTTP 404)"
    assert (await progress_of(ollama, http, kind="ollama")).reason == (
        "unknown: `ollama` endpoints export no progress metrics"
    )


async def test_a_queued_completion_counts_as_waiting(sim: VllmSim, http: HttpClient) -> None:
    sim.behaviour.queue_s = 0.5
    waiting = 'vllm:num_requests_waiting{model_name="sim-model",engine="0"} 1.0'
    task = asyncio.create_task(http.post(sim.url + CHAT, json=chat()))
    await eventually(lambda: _has(http, sim, waiting), what="the completion queued")
    assert (await task).status_code == 200


async def test_the_progress_collector_gives_rules_its_facts(sim: VllmSim, http: HttpClient) -> None:
    sim.behaviour.load_running, sim.behaviour.load_waiting = 48, 20
    sim.behaviour.load_tok_s = 940.0
    endpoint = Endpoint(name="ds4", kind="openai", url=sim.url, model="sim-model")
    collector = COLLECTORS["progress"]
    ctx = CollectContext(
        scope=Scope(endpoint=endpoint, host=None, unit=None),
        executor=LocalExecutor(),
        timeout=timedelta(seconds=5),
        http=http,
    )
    evidence = await collector.run(ctx, collector.params(window=WINDOW))
    facts = dict(evidence.facts)
    assert (evidence.error, facts["verdict"], facts["running"], facts["waiting"]) == (
        "",
        "busy",
        48.0,
        20.0,
    )
    assert str(facts["reason"]).startswith("busy: 48 running, 20 waiting, ")
    assert set(facts) == set(collector.facts)


def test_the_control_file_flips_the_behaviour_and_an_empty_one_restores_it(tmp_path: Path) -> None:
    path = tmp_path / "control.json"
    started = SimBehaviour(tok_s=40.0)
    control = ControlFile(path, started)
    assert control.poll(started) == started  # no file: as started
    path.write_text(json.dumps({"load_running": 48, "queue_s": 60, "nonsense": 1}))
    saturated = control.poll(started)
    assert (saturated.load_running, saturated.queue_s, saturated.tok_s) == (48, 60, 40.0)
    assert control.poll(saturated) is saturated  # unchanged file: nothing re-read
    path.write_text("{}")
    os.utime(path, ns=(1, 1))
    assert control.poll(saturated) == started
