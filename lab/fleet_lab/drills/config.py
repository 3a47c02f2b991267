"""The fleet config a drill's daemon runs on: the lab's hosts over SSH with the lab's key (as the
lab's user, with the sudoers file generated for the config: `install_sudoers`), short
probes, remediation for real, and the one endpoint the drill is about: the DeepSeek pair `ds4`
(the worker on spark2, then the head on spark1, in `vllm_ds4` containers) or the single-node
`qwen` on spark1 (a launch script on the host, no container), or Kimi (`kimi`) on the Mac
stand-in m3ultra (a launchd job; see `fleet_lab.mac.host`), or Spark 1's Ollama (`ollama`,
models loaded on demand: `idle` is its calm state); with the endpoints it needs: a route
(`qwen-via-swap`: `qwen` through the llama-swap router `swap` on spark2) comes with its router
and its backend."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx
import yaml

from fleet_lab import account, fleet
from fleet_lab.boot import INSIDE
from fleet_lab.drills.steps import CONTAINER, HEAD_SCRIPT, HEAD_UNIT, WORKER_SCRIPT, WORKER_UNIT
from fleet_lab.lab import ADDRESSES, Lab, LabError
from fleet_lab.mac import host as mac_host
from supervisor.config.models import FleetConfig
from supervisor.core.tls import default_tls

PLAYBOOK = Path(__file__).resolve().parents[3] / "playbooks"
#: The probes every drill's daemon runs (the figures are measured against these).
PROBE = {
    "liveness_interval": "500ms",
    "completion_interval": "2s",
    "failures_to_down": 2,
    "timeout": "2s",
    "jitter": "0s",
}
#: The production intervals (docs/config.md): the event path must find a death without them.
PRODUCTION = {
    "liveness_interval": "60s",
    "completion_interval": "300s",
    "failures_to_down": 3,
    "timeout": "30s",
    "jitter": "0s",
}


@dataclass(frozen=True)
class Unit:
    host: str
    unit: str
    known_good: str | None
    container: str | None = None
    domain: str | None = None  #: a launchd job's domain
    plist: str | None = None  #: a launchd job's plist


@dataclass(frozen=True)
class Endpoint:
    url: str
    model: str
    units: tuple[Unit, ...]
    expect_reasoning: bool = True
    kind: str = "openai"  #: `openai`, `ollama` (on demand) or `health` (`url` is the check)
    via: str | None = None  #: the router it is reached through
    backend: str | None = None  #: the endpoint serving it behind that router
    #: its own probe settings over the drill's (none: the drill's)
    probe: Mapping[str, object] | None = None

    def needs(self) -> tuple[str, ...]:
        """The other endpoints a config with this one must hold: its router and its backend."""
        return tuple(name for name in (self.via, self.backend) if name is not None)


ENDPOINTS: Mapping[str, Endpoint] = {
    "ds4": Endpoint(
        f"http://{ADDRESSES['spark1']}:8000",
        fleet.DS4_MODEL,
        (
            Unit("spark2", WORKER_UNIT, WORKER_SCRIPT, CONTAINER),
            Unit("spark1", HEAD_UNIT, HEAD_SCRIPT, CONTAINER),
        ),
    ),
    "qwen": Endpoint(
        f"http://{ADDRESSES['spark1']}:8001",
        fleet.QWEN_MODEL,
        (Unit("spark1", fleet.QWEN_UNIT, fleet.QWEN_KNOWN_GOOD),),
    ),
    "kimi": Endpoint(
        mac_host.url(),
        mac_host.MODEL,
        (Unit(mac_host.HOST, mac_host.LABEL, None, None, mac_host.DOMAIN, mac_host.PLIST),),
        expect_reasoning=False,
    ),
    "ollama": Endpoint(
        f"http://{ADDRESSES['spark1']}:{fleet.OLLAMA_PORT}",
        fleet.OLLAMA_MODEL,
        (Unit("spark1", fleet.OLLAMA_UNIT, None),),
        kind="ollama",
    ),
    "swap": Endpoint(
        f"http://{ADDRESSES['spark2']}:{fleet.SWAP_PORT}/health",
        "",
        (Unit("spark2", fleet.SWAP_UNIT, None),),
        kind="health",
    ),
    "qwen-via-swap": Endpoint(
        f"http://{ADDRESSES['spark2']}:{fleet.SWAP_PORT}",
        fleet.QWEN_MODEL,
        (),
        via="swap",
        backend="qwen",
        # faster than the drill's probes: its failure is confirmed within the outage of its
        # router (about a second: the daemon restarts it that fast), so it is seen blocked
        probe={"liveness_interval": "250ms", "completion_interval": "500ms"},
    ),
}


def completes(name: str) -> bool:
    """Endpoint `name` answers a real chat completion now (a health endpoint: its check; an
    Ollama on demand: its model list, which loads nothing)."""
    endpoint = ENDPOINTS[name]
    body = {"model": endpoint.model, "messages": [{"role": "user", "content": "hi"}]}
    try:
        if endpoint.kind == "health":
            reply = httpx.get(endpoint.url, verify=default_tls(), timeout=5)
        elif endpoint.kind == "ollama":
            reply = httpx.get(f"{endpoint.url}/api/tags", verify=default_tls(), timeout=5)
        else:
            reply = httpx.post(
                f"{endpoint.url}/v1/chat/completions",
                json={**body, "max_tokens": 8},
                verify=default_tls(),
                timeout=5,
            )
    except httpx.HTTPError:
        return False
    return reply.status_code == 200


def _units(endpoint: Endpoint) -> list[dict[str, str]]:
    units = []
    for unit in endpoint.units:
        entry = {"host": unit.host, "unit": unit.unit}
        optional = {
            "known_good": unit.known_good,
            "container": unit.container,
            "domain": unit.domain,
            "plist": unit.plist,
        }
        entry |= {key: value for key, value in optional.items() if value is not None}
        units.append(entry)
    return units


def _endpoint(chosen: Endpoint) -> dict[str, object]:
    entry: dict[str, object] = {"kind": chosen.kind, "url": chosen.url}
    if chosen.kind != "health":
        entry |= {"model": chosen.model, "expect_reasoning": chosen.expect_reasoning}
    if chosen.units:
        entry["units"] = _units(chosen)
    optional = {"via": chosen.via, "backend": chosen.backend, "probe": chosen.probe}
    return entry | {
        key: dict(value) if isinstance(value, Mapping) else value
        for key, value in optional.items()
        if value is not None
    }


def write_config(
    lab: Lab,
    folder: Path,
    *,
    playbook: Path = PLAYBOOK,
    startup_grace: str = "20s",
    notify: Mapping[str, object] | None = None,
    endpoint: str = "ds4",
    probe: Mapping[str, object] | None = None,
    also: Sequence[str] = (),
) -> Path:
    """The config for a drill about `endpoint` in `folder` (store in `folder/state`), with the
    endpoints `also` (a route the drill blocks) and the ones each needs (its router and
    backend); `notify` is the config's `notify` section (none: no Telegram)."""
    hosts: dict[str, object] = {"forge": {"local": True}}
    for name in [*ADDRESSES, *mac_host.ADDRESSES]:
        host = lab.fleet_host(name)
        entry: dict[str, object] = {
            "address": host.address,
            "port": host.port,
            "user": host.user,
            "key": str(host.key),
            "known_hosts": str(host.known_hosts),
        }
        if name in mac_host.ADDRESSES:
            entry["service_manager"] = "launchd"
        hosts[name] = entry
    names = [endpoint]
    for name in also:
        names += [n for n in (*ENDPOINTS[name].needs(), name) if n not in names]
    document: dict[str, object] = {
        "store": {"path": "state/supervisor.db"},
        "playbook": {"path": str(playbook)},
        "http": {"enabled": False},
        "remediation": {"dry_run": False, "verify_every": "500ms"},
        "defaults": {
            "probe": {**PROBE, **(probe or {})},
            "startup_grace": startup_grace,
        },
        "hosts": hosts,
        "endpoints": {name: _endpoint(ENDPOINTS[name]) for name in names},
    }
    if notify is not None:
        document["notify"] = dict(notify)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "fleet.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


#: Where a host's generated sudoers file is staged (in its own folder, `/var/lib/lab` inside).
STAGED_SUDOERS = "sudoers"


def install_sudoers(lab: Lab, config: FleetConfig) -> None:
    """On every running host: the sudoers file `fleet-supervisor sudoers --host H` generates
    for `config` (the rules in force, the lab's user), accepted by `visudo -c`, installed as
    `deploy/install.sh --sudoers FILE` does. Nothing for a lab that logs in as root."""
    from supervisor.trust.load import in_force  # (the playbook and asyncssh: only here)
    from supervisor.trust.sudoers import render_sudoers

    if lab.user == "root":
        return
    found = in_force(config)
    for name, host in lab.hosts.items():
        if host.pid is None or name not in config.hosts:
            continue
        text = render_sudoers(
            config,
            found.needs,
            hosts=[name],
            rules=len(found.playbook.rules),
            playbook=str(config.playbook.path),
        )
        (host.folder / STAGED_SUDOERS).write_text(text)
        done = host.nsenter("sh", "-c", account.install_script(f"{INSIDE}/{STAGED_SUDOERS}"))
        if done.returncode != 0:
            said = (done.stdout + done.stderr).strip().replace("\n", " | ")
            raise LabError(f"the generated sudoers for {name} was not installed: {said}")
