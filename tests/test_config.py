"""The fleet config loader: valid files, every kind of bad file, and the exact error lines."""

from __future__ import annotations

import string
from datetime import timedelta
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config.doctable import config_keys, render_config_table
from supervisor.config.errors import ConfigError, ConfigIssue
from supervisor.config.loader import load_config, parse_config, resolve_config_path
from supervisor.config.models import FleetConfig
from supervisor.config.sections import ProbeSettings

REPO = Path(__file__).resolve().parent.parent

# The shape fixed by the product owner; line numbers below refer to this text.
VALID = """\
store: {path: state/supervisor.db}
defaults:
  probe: {liveness_interval: 60s, completion_interval: 300s, timeout: 30s, failures_to_down: 3}
hosts:
  spark1: {address: 192.168.1.11, user: supervisor}
  spark2: {address: 192.168.1.12, user: supervisor}
  forge: {local: true}
endpoints:
  ds4:
    kind: openai
    url: http://192.168.1.11:8000
    model: deepseek-v4-flash
    expect_reasoning: true
    baseline_tok_s: 37
    startup_grace: 15m
    units:
      - {host: spark2, unit: vllm-ds4-worker.service, container: vllm_ds4, known_good: /w/worker.sh}
      - {host: spark1, unit: vllm-ds4-head.service, container: vllm_ds4, known_good: /w/head.sh}
"""

PROBE_KEYS = (
    "completion_interval, degraded_after, failures_to_down, jitter, liveness_interval, "
    "max_tokens, min_tok_s_ratio, progress_window, prompt, timeout"
)
SECTION_KEYS = "defaults, endpoints, hosts, http, notify, playbook, remediation, store"
HOST_KEYS = "address, check_host_key, key, known_hosts, local, port, service_manager, user"
ENDPOINT_KEYS = (
    "api_key_env, api_key_file, backend, baseline_tok_s, expect_reasoning, headers, heard_by, "
    "host, keep_warm, kind, model, on_demand, probe, startup_grace, units, url, via, voice"
)


def parse(text: str, base_dir: Path = Path("/etc/fleet")) -> FleetConfig:
    return parse_config(text, source="fleet.yaml", base_dir=base_dir)


def error_lines(text: str) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(text)
    return str(caught.value).splitlines()


def outcome(text: str) -> ConfigError | None:
    """The error parsing `text` raises, or None when it is a valid config."""
    try:
        parse(text)
    except ConfigError as err:
        return err
    return None


def edit(*replacements: tuple[str, str]) -> str:
    text = VALID
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


# ---------------------------------------------------------------- valid files


def test_the_product_owner_example_loads_with_every_value() -> None:
    config = parse(VALID)
    assert config.source == Path("fleet.yaml")
    assert config.store.path == Path("/etc/fleet/state/supervisor.db")
    assert config.store.sample_retention == timedelta(days=7)
    assert list(config.hosts) == ["spark1", "spark2", "forge"]
    spark1 = config.hosts["spark1"]
    assert (spark1.name, spark1.address, spark1.user, spark1.port) == (
        "spark1",
        "192.168.1.11",
        "supervisor",
        22,
    )
    assert spark1.check_host_key is True
    assert spark1.service_manager == "systemd"
    assert config.hosts["forge"].local is True
    assert config.hosts["forge"].address is None
    ds4 = config.endpoint("ds4")
    assert ds4.name == "ds4"
    assert ds4.kind == "openai"
    assert ds4.url == "http://192.168.1.11:8000"
    assert ds4.model == "deepseek-v4-flash"
    assert ds4.expect_reasoning is True
    assert ds4.baseline_tok_s == 37.0
    assert ds4.startup_grace == timedelta(minutes=15)
    assert [(u.host, u.unit, u.container, u.known_good) for u in ds4.units] == [
        ("spark2", "vllm-ds4-worker.service", "vllm_ds4", "/w/worker.sh"),
        ("spark1", "vllm-ds4-head.service", "vllm_ds4", "/w/head.sh"),
    ]
    assert ds4.hosts() == ("spark2", "spark1")
    assert ds4.probe == config.defaults.probe
    assert config.defaults.startup_grace == timedelta(minutes=10)


def test_an_endpoints_headers_are_kept_as_written() -> None:
    text = edit(("    startup_grace: 15m\n", "    headers: {X-Tenant: lab, User-Agent: ''}\n"))
    assert parse(text).endpoint("ds4").headers == {"X-Tenant": "lab", "User-Agent": ""}
    assert parse(VALID).endpoint("ds4").headers == {}


def test_the_models_are_frozen() -> None:
    config = parse(VALID)
    with pytest.raises(ValueError, match="frozen"):
        config.endpoint("ds4").url = "http://elsewhere"


def test_the_example_fleet_file_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/operator")
    config = load_config(REPO / "deploy" / "fleet.example.yaml")
    assert list(config.endpoints) == ["ds4", "kimi", "embed", "rerank", "ollama", "asr", "tts"]
    assert set(config.hosts) == {"spark1", "spark2", "m3ultra", "m5max", "forge"}
    assert config.hosts["forge"].local is True
    assert config.hosts["m3ultra"].service_manager == "launchd"
    assert config.hosts["spark1"].key == Path("/home/operator/.ssh/fleet_supervisor_ed25519")
    ds4 = config.endpoint("ds4")
    assert ds4.hosts() == ("spark2", "spark1")
    assert [u.unit for u in ds4.units] == ["vllm-ds4-worker.service", "vllm-ds4-head.service"]
    assert {u.known_good for u in ds4.units} == {
        "/workspace/vllm-worker.sh",
        "/workspace/vllm-head.sh",
    }
    assert ds4.expect_reasoning is True
    assert ds4.startup_grace == timedelta(minutes=15)
    kimi = config.endpoint("kimi")
    assert (kimi.url, kimi.hosts()) == ("http://192.168.1.10:8013", ("m3ultra",))
    assert kimi.probe.timeout == timedelta(seconds=60)
    assert kimi.probe.failures_to_down == 3
    assert [config.endpoint(name).url.rsplit(":", 1)[1] for name in ("embed", "rerank")] == [
        "8002",
        "8003",
    ]
    assert config.endpoint("ollama").kind == "ollama"
    assert config.endpoint("ollama").url.endswith(":11434")
    assert config.endpoint("asr").url == "http://192.168.1.11:8765/health"
    assert config.endpoint("tts").url == "http://192.168.1.12:8882/health"
    assert {config.endpoint(n).kind for n in ("asr", "tts")} == {"health"}


def test_endpoint_probe_keys_override_the_defaults_one_by_one() -> None:
    text = """\
defaults:
  probe: {timeout: 45s, failures_to_down: 5, prompt: "Say hi."}
  startup_grace: 20m
endpoints:
  slow:
    kind: ollama
    url: http://127.0.0.1:11434
    model: qwen3:8b
    probe: {timeout: 2m, max_tokens: 64}
  plain: {kind: health, url: "http://127.0.0.1:8765/health", startup_grace: 1m}
"""
    config = parse(text)
    slow = config.endpoint("slow").probe
    assert slow.timeout == timedelta(minutes=2)
    assert slow.max_tokens == 64
    assert slow.failures_to_down == 5
    assert slow.prompt == "Say hi."
    assert slow.liveness_interval == timedelta(seconds=60)
    assert config.endpoint("plain").probe == config.defaults.probe
    assert config.defaults.probe == ProbeSettings(
        timeout=timedelta(seconds=45), failures_to_down=5, prompt="Say hi."
    )
    assert config.endpoint("slow").startup_grace == timedelta(minutes=20)
    assert config.endpoint("plain").startup_grace == timedelta(minutes=1)


@pytest.mark.parametrize(
    ("host_line", "units", "expected"),
    [
        ("", "[{host: b, unit: x}, {host: a, unit: y}]", ("b", "a")),
        ("host: a", "[{host: b, unit: x}, {host: a, unit: y}]", ("b", "a")),
        ("host: c", "[{host: b, unit: x}, {host: b, unit: y}]", ("b", "c")),
        ("host: a", "[]", ("a",)),
        ("", "[]", ()),
    ],
)
def test_hosts_are_unit_hosts_in_order_then_host_without_repeats(
    host_line: str, units: str, expected: tuple[str, ...]
) -> None:
    text = f"""\
hosts: {{a: {{local: true}}, b: {{address: 10.0.0.2}}, c: {{address: 10.0.0.3}}}}
endpoints:
  e:
    kind: health
    url: http://127.0.0.1:1/health
    {host_line}
    units: {units}
"""
    assert parse(text).endpoint("e").hosts() == expected


@pytest.mark.parametrize(
    ("url", "kept"),
    [
        ("http://h:8000/", "http://h:8000"),
        ("https://h.example//", "https://h.example"),
        ("http://h:8765/health", "http://h:8765/health"),
        ("http://[::1]:8000", "http://[::1]:8000"),
    ],
)
def test_urls_lose_trailing_slashes(url: str, kept: str) -> None:
    text = f"endpoints:\n  e: {{kind: health, url: '{url}'}}\n"
    assert parse(text).endpoint("e").url == kept


def test_unknown_endpoint_names_the_known_ones() -> None:
    config = parse(VALID.replace("  forge: {local: true}\n", "  forge: {local: true}\n"))
    with pytest.raises(KeyError) as caught:
        config.endpoint("ds5")
    assert str(caught.value) == "unknown endpoint 'ds5' (endpoints: ds4)"


# ---------------------------------------------------------------- paths


def test_relative_paths_are_relative_to_the_config_files_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "etc"
    folder.mkdir()
    (folder / "fleet.yaml").write_text(
        "store: {path: state/x.db}\n"
        "hosts:\n"
        "  a: {address: 10.0.0.1, key: keys/id_ed25519, known_hosts: /etc/ssh/known}\n"
        "endpoints:\n  e: {kind: health, url: 'http://a/health', host: a}\n"
    )
    monkeypatch.chdir(tmp_path)
    config = load_config("etc/fleet.yaml")
    assert config.source == tmp_path / "etc" / "fleet.yaml"
    assert config.store.path == tmp_path / "etc" / "state" / "x.db"
    assert config.hosts["a"].key == tmp_path / "etc" / "keys" / "id_ed25519"
    assert config.hosts["a"].known_hosts == Path("/etc/ssh/known")


@pytest.mark.parametrize(
    ("store", "expected"),
    [
        ("", "/srv/fleet/state/supervisor.db"),
        ("store: {path: /var/lib/fs/db.sqlite}\n", "/var/lib/fs/db.sqlite"),
        ("store: {path: ../db.sqlite}\n", "/srv/db.sqlite"),
        ("store: {path: ~/db.sqlite}\n", "/home/op/db.sqlite"),
    ],
)
def test_store_path_resolution(store: str, expected: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/op")
    text = store + "endpoints:\n  e: {kind: health, url: 'http://a/health'}\n"
    assert parse(text, base_dir=Path("/srv/fleet")).store.path == Path(expected)


@pytest.mark.parametrize(
    ("cli", "env", "expected"),
    [
        ("/etc/a.yaml", {"FLEET_SUPERVISOR_CONFIG": "/etc/b.yaml"}, Path("/etc/a.yaml")),
        (None, {"FLEET_SUPERVISOR_CONFIG": "/etc/b.yaml"}, Path("/etc/b.yaml")),
        ("", {"FLEET_SUPERVISOR_CONFIG": "/etc/b.yaml"}, Path("/etc/b.yaml")),
        (None, {}, Path("fleet.yaml")),
        (None, {"FLEET_SUPERVISOR_CONFIG": ""}, Path("fleet.yaml")),
        ("rel/c.yaml", {}, Path("rel/c.yaml")),
        ("~/c.yaml", {"HOME": "/nowhere"}, Path("/home/op/c.yaml")),
    ],
)
def test_resolve_config_path_precedence(
    cli: str | None, env: dict[str, str], expected: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", "/home/op")
    assert resolve_config_path(cli, env) == expected


# ---------------------------------------------------------------- errors: one at a time


OWNER_EXAMPLE = """\
store:
  path: state/supervisor.db
defaults:
  probe:
    liveness_interval: 60s
    completion_interval: 300s
    timeout: 30s
    failures_to_down: many
endpoints:
  tts: {kind: health, url: "http://127.0.0.1:8882/health"}
"""

DUPLICATE = """\
hosts:
  forge: {local: true}
endpoints:
  ds4:
    kind: openai
    url: http://192.168.1.11:8000
    model: deepseek-v4-flash
    host: forge
  ds4:
    kind: health
    url: http://192.168.1.11:8000/health
"""


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            OWNER_EXAMPLE,
            "fleet.yaml:8: defaults.probe.failures_to_down: expected an integer, got 'many'",
            id="int",
        ),
        pytest.param(
            DUPLICATE, "fleet.yaml:9: endpoints.ds4: duplicate key (first at line 4)", id="dup"
        ),
        pytest.param(
            edit(("failures_to_down: 3", "failures_to_down: 0")),
            "fleet.yaml:3: defaults.probe.failures_to_down: must be at least 1, got 0",
            id="at-least",
        ),
        pytest.param(
            edit(("failures_to_down: 3", "failures_to_down: true")),
            "fleet.yaml:3: defaults.probe.failures_to_down: expected an integer, got true",
            id="bool-for-int",
        ),
        pytest.param(
            edit(("timeout: 30s", "timeout: 60")),
            "fleet.yaml:3: defaults.probe.timeout: expected a duration like 90s, 15m or 2h, got 60",
            id="bare-number-duration",
        ),
        pytest.param(
            edit(("timeout: 30s", "timeout: 0s")),
            "fleet.yaml:3: defaults.probe.timeout: must be longer than 0s, got 0s",
            id="zero-duration",
        ),
        pytest.param(
            edit(("startup_grace: 15m", "startup_grace: soon")),
            "fleet.yaml:15: endpoints.ds4.startup_grace: expected a duration like 90s, 15m or "
            "2h, got 'soon'",
            id="duration-text",
        ),
        pytest.param(
            edit(("timeout: 30s", "timeout: 30s, min_tok_s_ratio: 1.5")),
            "fleet.yaml:3: defaults.probe.min_tok_s_ratio: must be more than 0 and at most 1, "
            "got 1.5",
            id="ratio",
        ),
        pytest.param(
            edit(("user: supervisor}", "user: supervisor, port: 70000}")),
            "fleet.yaml:5: hosts.spark1.port: must be between 1 and 65535, got 70000",
            id="port-range",
        ),
        pytest.param(
            edit(("forge: {local: true}", "forge: {local: true, colour: red}")),
            f"fleet.yaml:7: hosts.forge.colour: unknown key (expected one of: {HOST_KEYS})",
            id="unknown-host-key",
        ),
        pytest.param(
            edit(("forge: {local: true}", "forge: {local: 'yes'}")),
            "fleet.yaml:7: hosts.forge.local: expected true or false, got 'yes'",
            id="bool",
        ),
        pytest.param(
            edit(("forge: {local: true}", "forge: {local: true, service_manager: upstart}")),
            "fleet.yaml:7: hosts.forge.service_manager: expected one of systemd, launchd, "
            "got 'upstart'",
            id="service-manager",
        ),
        pytest.param(
            edit(("spark2: {address: 192.168.1.12, user: supervisor}", "spark2: {user: x}")),
            "fleet.yaml:6: hosts.spark2.address: required unless local: true",
            id="address-unless-local",
        ),
        pytest.param(
            edit(("  spark2: {", "  spark 2: {"), ("host: spark2,", "host: spark 2,")),
            "fleet.yaml:6: hosts.spark 2: invalid name (use letters, digits, '.', '_' and '-', "
            "starting with a letter or digit)",
            id="host-name",
        ),
        pytest.param(
            edit(("kind: openai", "kind: vllm")),
            "fleet.yaml:10: endpoints.ds4.kind: expected one of openai, ollama, health, "
            "embedding, rerank, asr, tts, got 'vllm'",
            id="literal",
        ),
        pytest.param(
            edit(("startup_grace: 15m", "heard_by: {url: http://192.168.1.14:8000, model: w}")),
            "fleet.yaml:15: endpoints.ds4.heard_by: only used by kind 'tts', not 'openai'",
            id="heard-by-not-tts",
        ),
        pytest.param(
            edit(("startup_grace: 15m", "heard_by: {url: ftp://asr, model: w}")),
            "fleet.yaml:15: endpoints.ds4.heard_by.url: expected an http:// or https:// URL, "
            "got 'ftp://asr'",
            id="heard-by-url",
        ),
        pytest.param(
            edit(("url: http://192.168.1.11:8000", "url: ftp://x")),
            "fleet.yaml:11: endpoints.ds4.url: expected an http:// or https:// URL, got 'ftp://x'",
            id="url-scheme",
        ),
        pytest.param(
            edit(("url: http://192.168.1.11:8000", "url: http://x:99999")),
            "fleet.yaml:11: endpoints.ds4.url: expected an http:// or https:// URL, "
            "got 'http://x:99999'",
            id="url-port",
        ),
        pytest.param(
            edit(("    model: deepseek-v4-flash\n", "")),
            "fleet.yaml:9: endpoints.ds4.model: required for kind 'openai'",
            id="model-for-kind",
        ),
        pytest.param(
            edit(("model: deepseek-v4-flash", "model: 5")),
            "fleet.yaml:12: endpoints.ds4.model: expected text, got 5",
            id="str",
        ),
        pytest.param(
            edit(("model: deepseek-v4-flash", "model: ''")),
            "fleet.yaml:12: endpoints.ds4.model: must not be empty",
            id="empty-str",
        ),
        pytest.param(
            edit(("expect_reasoning: true", "expect_reasoning: maybe")),
            "fleet.yaml:13: endpoints.ds4.expect_reasoning: expected true or false, got 'maybe'",
            id="bool-text",
        ),
        pytest.param(
            edit(("baseline_tok_s: 37", "baseline_tok_s: fast")),
            "fleet.yaml:14: endpoints.ds4.baseline_tok_s: expected a number, got 'fast'",
            id="float",
        ),
        pytest.param(
            edit(("baseline_tok_s: 37", "baseline_tok_s: 0")),
            "fleet.yaml:14: endpoints.ds4.baseline_tok_s: must be more than 0, got 0",
            id="float-range",
        ),
        pytest.param(
            edit(("host: spark2, unit", "host: spark3, unit")),
            "fleet.yaml:17: endpoints.ds4.units[0].host: unknown host 'spark3' "
            "(hosts: forge, spark1, spark2)",
            id="unit-host",
        ),
        pytest.param(
            edit(("{host: spark1, unit: vllm-ds4-head.service, ", "{host: spark1, ")),
            "fleet.yaml:18: endpoints.ds4.units[1].unit: required",
            id="unit-missing-key",
        ),
        pytest.param(
            edit(
                ("vllm-ds4-head.service", "vllm-ds4-worker.service"),
                ("host: spark1,", "host: spark2,"),
            ),
            "fleet.yaml:18: endpoints.ds4.units[1]: the same unit as units[0]",
            id="unit-twice",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    startup_grace: 15m\n    host: mac\n")),
            "fleet.yaml:16: endpoints.ds4.host: unknown host 'mac' (hosts: forge, spark1, spark2)",
            id="endpoint-host",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    startup_grace: 15m\n    name: other\n")),
            f"fleet.yaml:16: endpoints.ds4.name: unknown key (expected one of: {ENDPOINT_KEYS})",
            id="name-key",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    startup_grace: 15m\n    probe: {timeout: 5}\n")),
            "fleet.yaml:16: endpoints.ds4.probe.timeout: expected a duration like 90s, 15m or "
            "2h, got 5",
            id="probe-override",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    startup_grace: 15m\n    probe: [timeout]\n")),
            "fleet.yaml:16: endpoints.ds4.probe: expected a mapping, got a list",
            id="probe-not-mapping",
        ),
        pytest.param(
            edit(("  ds4:\n", "  ds4: 5\n  x:\n")),
            "fleet.yaml:9: endpoints.ds4: expected a mapping, got 5",
            id="entry-not-mapping",
        ),
        pytest.param(
            edit(("store: {path: state/supervisor.db}", "store: [state/supervisor.db]")),
            "fleet.yaml:1: store: expected a mapping, got a list",
            id="section-not-mapping",
        ),
        pytest.param(
            edit(("store: {path: state/supervisor.db}", "store: {path: 5}")),
            "fleet.yaml:1: store.path: expected a file path, got 5",
            id="path",
        ),
        pytest.param(
            VALID + "alerts: {}\n",
            f"fleet.yaml:19: alerts: unknown key (expected one of: {SECTION_KEYS})",
            id="unknown-section",
        ),
        pytest.param(
            "hosts:\n  forge: {local: true}\n",
            "fleet.yaml:1: endpoints: required",
            id="no-endpoints",
        ),
        pytest.param(
            "endpoints: {}\n",
            "fleet.yaml:1: endpoints: expected at least one endpoint",
            id="empty-endpoints",
        ),
        pytest.param(
            "endpoints:\n  asr: {kind: health, url: 'http://a/health', expect_reasoning: true}\n",
            "fleet.yaml:2: endpoints.asr.expect_reasoning: only used by kinds openai and ollama, "
            "not 'health'",
            id="kind-only-field",
        ),
        pytest.param(
            "hosts:\n  7: {local: true}\nendpoints:\n  e: {kind: health, url: 'http://a'}\n",
            "fleet.yaml:2: hosts.7: a name must be text, got 7 (quote it)",
            id="name-not-text",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    headers:\n      X Tenant: lab\n")),
            "fleet.yaml:16: endpoints.ds4.headers.X Tenant: not a header name "
            "(letters, digits and !#$%&'*+-.^_`|~), got 'X Tenant'",
            id="header-name",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    headers: {X-Tenant: lab, 7: x}\n")),
            "fleet.yaml:15: endpoints.ds4.headers.7: expected text, got 7",
            id="header-name-not-text",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    headers:\n      Content-length: '3'\n")),
            "fleet.yaml:16: endpoints.ds4.headers.Content-length: set by the client for each "
            "request (leave it out)",
            id="header-set-per-request",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    headers:\n      X-Build: 42\n")),
            "fleet.yaml:16: endpoints.ds4.headers.X-Build: expected text, got 42",
            id="header-value-not-text",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", '    headers: {X-Tenant: "lab\\r\\nX-Admin: 1"}\n')),
            "fleet.yaml:15: endpoints.ds4.headers.X-Tenant: must be one line (no CR, LF or NUL), "
            "got 'lab\\r\\nX-Admin: 1'",
            id="header-value-two-lines",
        ),
        pytest.param(
            edit(("    startup_grace: 15m\n", "    headers: [X-Tenant]\n")),
            "fleet.yaml:15: endpoints.ds4.headers: expected a mapping, got a list",
            id="headers-not-a-mapping",
        ),
    ],
)
def test_one_issue_reported_exactly(text: str, expected: str) -> None:
    assert error_lines(text) == [expected]


def test_an_issue_carries_its_parts() -> None:
    with pytest.raises(ConfigError) as caught:
        parse(OWNER_EXAMPLE)
    assert caught.value.issues == (
        ConfigIssue(
            file="fleet.yaml",
            line=8,
            path="defaults.probe.failures_to_down",
            message="expected an integer, got 'many'",
        ),
    )


@pytest.mark.parametrize(
    ("issue", "shown"),
    [
        (ConfigIssue("f.yaml", 3, "a.b", "required"), "f.yaml:3: a.b: required"),
        (ConfigIssue("f.yaml", None, "a.b", "required"), "f.yaml: a.b: required"),
        (ConfigIssue("f.yaml", 3, "", "YAML syntax error: x"), "f.yaml:3: YAML syntax error: x"),
        (ConfigIssue("f.yaml", None, "", "cannot read: x"), "f.yaml: cannot read: x"),
    ],
)
def test_issue_rendering(issue: ConfigIssue, shown: str) -> None:
    assert str(issue) == shown


# ---------------------------------------------------------------- errors: all at once


def test_every_issue_is_reported_sorted_by_line() -> None:
    text = edit(
        ("spark2: {address: 192.168.1.12, user: supervisor}", "spark2: {user: x, port: 0}"),
        ("timeout: 30s", "timeout: later"),
        ("kind: openai", "kind: vllm"),
        ("host: spark2, unit", "host: spark9, unit"),
        ("{host: spark1, unit: vllm-ds4-head.service, ", "{host: spark1, "),
    ) + (
        "  kimi:\n"
        "    kind: openai\n"
        "    url: http://192.168.1.10:8013/\n"
        "    host: m3\n"
        "    probe: {max_tokens: 0, colour: red}\n"
        "surprise: true\n"
    )
    assert error_lines(text) == [
        "fleet.yaml:3: defaults.probe.timeout: expected a duration like 90s, 15m or 2h, "
        "got 'later'",
        "fleet.yaml:6: hosts.spark2.port: must be between 1 and 65535, got 0",
        "fleet.yaml:6: hosts.spark2.address: required unless local: true",
        "fleet.yaml:10: endpoints.ds4.kind: expected one of openai, ollama, health, embedding, "
        "rerank, asr, tts, got 'vllm'",
        "fleet.yaml:17: endpoints.ds4.units[0].host: unknown host 'spark9' "
        "(hosts: forge, spark1, spark2)",
        "fleet.yaml:18: endpoints.ds4.units[1].unit: required",
        "fleet.yaml:19: endpoints.kimi.model: required for kind 'openai'",
        "fleet.yaml:22: endpoints.kimi.host: unknown host 'm3' (hosts: forge, spark1, spark2)",
        "fleet.yaml:23: endpoints.kimi.probe.max_tokens: must be at least 1, got 0",
        f"fleet.yaml:23: endpoints.kimi.probe.colour: unknown key (expected one of: {PROBE_KEYS})",
        f"fleet.yaml:24: surprise: unknown key (expected one of: {SECTION_KEYS})",
    ]


def test_a_field_with_a_type_error_is_not_cross_checked_again() -> None:
    text = "endpoints:\n  e: {kind: openai, url: 'http://a', model: 5, host: 7}\n"
    assert error_lines(text) == [
        "fleet.yaml:2: endpoints.e.model: expected text, got 5",
        "fleet.yaml:2: endpoints.e.host: expected text, got 7",
    ]


def test_a_broken_hosts_section_does_not_make_every_reference_unknown() -> None:
    text = edit(("hosts:\n", "hosts: [a]\nold_hosts:\n"))
    assert error_lines(text) == [
        "fleet.yaml:4: hosts: expected a mapping, got a list",
        f"fleet.yaml:5: old_hosts: unknown key (expected one of: {SECTION_KEYS})",
    ]


def test_a_later_duplicate_is_the_one_checked() -> None:
    text = DUPLICATE.replace("    kind: health\n", "")
    assert error_lines(text) == [
        "fleet.yaml:9: endpoints.ds4: duplicate key (first at line 4)",
        "fleet.yaml:9: endpoints.ds4.kind: required",
    ]


# ---------------------------------------------------------------- whole-file problems


DEEP = "a: " + "[" * 600 + "]" * 600 + "\n"
BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        pytest.param(
            b"hosts:\n  forge: {local: true}\nendpoints: tts: {kind: health}\n",
            ["fleet.yaml:3: YAML syntax error: mapping values are not allowed here"],
            id="syntax",
        ),
        pytest.param(
            b"endpoints:\n\ttts: {kind: health}\n",
            [
                "fleet.yaml:2: YAML syntax error: found character '\\t' that cannot start any "
                "token (indent with spaces, not tabs)"
            ],
            id="tab",
        ),
        pytest.param(
            b"",
            [
                "fleet.yaml: the file is empty (expected a mapping with store, defaults, hosts and "
                "endpoints)"
            ],
            id="empty",
        ),
        pytest.param(
            b"# only a comment\n\n",
            [
                "fleet.yaml: the file is empty (expected a mapping with store, defaults, hosts and "
                "endpoints)"
            ],
            id="comments-only",
        ),
        pytest.param(
            b"- spark1\n- spark2\n",
            [
                "fleet.yaml:1: expected a mapping with store, defaults, hosts and endpoints at the "
                "top level, got a list"
            ],
            id="top-level-list",
        ),
        pytest.param(
            b"endpoints:\n  e: {kind: health, url: \xff\xfe}\n",
            ["fleet.yaml:2: cannot read: not UTF-8 text (byte 0xff)"],
            id="binary",
        ),
        pytest.param(
            b"endpoints: \x00\n",
            [
                "fleet.yaml:1: YAML syntax error: unacceptable character #x0000: special "
                "characters are not allowed"
            ],
            id="nul",
        ),
        pytest.param(
            b"store: {sample_retention: " + b"9" * 5000 + b"}\n",
            ["fleet.yaml:1: YAML error: a number with more than 4000 digits"],
            id="huge-int",
        ),
        pytest.param(
            b"store: !!python/object/apply:os.system [id]\n",
            [
                "fleet.yaml:1: YAML error: could not determine a constructor for the tag "
                "'tag:yaml.org,2002:python/object/apply:os.system'"
            ],
            id="unsafe-tag",
        ),
        pytest.param(
            b"endpoints: {}\n---\nendpoints: {}\n",
            [
                "fleet.yaml:2: YAML syntax error: expected a single document in the stream, but "
                "found another document"
            ],
            id="two-documents",
        ),
        pytest.param(
            b"endpoints: *nowhere\n",
            ["fleet.yaml:1: YAML syntax error: found undefined alias 'nowhere'"],
            id="undefined-alias",
        ),
        pytest.param(
            DEEP.encode(),
            ["fleet.yaml: YAML syntax error: the document is nested too deeply"],
            id="deep",
        ),
    ],
)
def test_whole_file_problems(
    content: bytes, expected: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "fleet.yaml").write_bytes(content)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config("fleet.yaml")
    assert str(caught.value).splitlines() == expected


@pytest.mark.parametrize(
    ("make", "expected"),
    [
        (lambda p: None, "fleet.yaml: cannot read: No such file or directory"),
        (lambda p: p.mkdir(), "fleet.yaml: cannot read: Is a directory"),
    ],
)
def test_unreadable_files(
    make: object, expected: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert callable(make)
    make(tmp_path / "fleet.yaml")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as caught:
        load_config("fleet.yaml")
    assert str(caught.value) == expected


def test_anchors_and_merge_keys_work_and_keep_their_lines() -> None:
    text = """\
hosts:
  spark1: &spark {address: 192.168.1.11, user: supervisor, port: 2222}
  spark2:
    <<: *spark
    address: 192.168.1.12
endpoints:
  tts: {kind: health, url: 'http://192.168.1.12:8882/health', host: spark2}
"""
    config = parse(text)
    assert config.hosts["spark2"].address == "192.168.1.12"
    assert config.hosts["spark2"].port == 2222
    broken = text.replace("port: 2222", "port: 0")
    assert error_lines(broken) == [
        "fleet.yaml:2: hosts.spark1.port: must be between 1 and 65535, got 0",
        "fleet.yaml:2: hosts.spark2.port: must be between 1 and 65535, got 0",
    ]


def test_an_alias_bomb_is_refused_quickly() -> None:
    assert error_lines(BOMB)[0] == (
        f"fleet.yaml:1: a: unknown key (expected one of: {SECTION_KEYS})"
    )


def test_a_self_referencing_alias_is_an_issue_not_a_hang() -> None:
    text = "endpoints:\n  e: &e {kind: health, url: 'http://a', units: [*e]}\n"
    lines = error_lines(text)
    assert lines[:2] == [
        "fleet.yaml:2: endpoints.e.units[0].host: required",
        "fleet.yaml:2: endpoints.e.units[0].unit: required",
    ]


# ---------------------------------------------------------------- never a traceback


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(alphabet=string.printable + "\x00é{}[]:-&*!|>'\"#", max_size=300))
def test_any_text_gives_a_config_or_a_config_error(text: str) -> None:
    err = outcome(text)
    assert err is None or all("\n" not in str(issue) for issue in err.issues)


YAML_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats()
    | st.text(max_size=20)
    | st.sampled_from(["30s", "1h30m", "openai", "http://h:1", "spark1", "-1", ""]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=10,
)
ENTRY_KEYS = st.sampled_from(
    ["kind", "url", "model", "host", "units", "probe", "startup_grace", "port", "local", "x"]
)


@settings(max_examples=150, deadline=None)
@given(
    host=st.dictionaries(ENTRY_KEYS, YAML_VALUES, max_size=4),
    endpoint=st.dictionaries(ENTRY_KEYS, YAML_VALUES, max_size=5),
    defaults=YAML_VALUES,
)
def test_any_values_in_any_place_give_located_issues(
    host: dict[str, object], endpoint: dict[str, object], defaults: object
) -> None:
    document = {"defaults": defaults, "hosts": {"h": host}, "endpoints": {"e": endpoint}}
    text = yaml.safe_dump(document, sort_keys=False)
    err = outcome(text)
    assert err is None or all(issue.line is not None and issue.path for issue in err.issues)


# ---------------------------------------------------------------- the package and its docs


def test_the_docs_table_is_the_generated_one() -> None:
    assert (REPO / "docs" / "config-table.md").read_text() == render_config_table()


def test_the_docs_table_names_every_key_the_example_uses() -> None:
    documented = {path for path, _, _ in config_keys()}
    data = yaml.safe_load((REPO / "deploy" / "fleet.example.yaml").read_text())

    def paths(value: object, prefix: str) -> set[str]:
        if isinstance(value, dict):
            found = set()
            for key, inner in value.items():
                name = "NAME" if prefix in ("hosts.", "endpoints.") else key
                found |= {f"{prefix}{name}"} | paths(inner, f"{prefix}{name}.")
            return found
        if isinstance(value, list):
            return set().union(*(paths(item, prefix[:-1] + "[].") for item in value))
        return set()

    entries = {"hosts.NAME", "endpoints.NAME"}  # the named entries themselves, not keys
    used = {p for p in paths(data, "") - entries if not p.startswith("endpoints.NAME.probe.")}
    assert used <= documented


def test_only_true_and_false_are_booleans() -> None:
    """YAML 1.1 reads yes/no/on/off as booleans; here they are text, so a typo is an error."""
    text = (
        "hosts:\n"
        "  spark1: {address: 10.0.0.1, check_host_key: yes}\n"
        "endpoints:\n"
        "  asr: {kind: health, url: 'http://10.0.0.1:8765/health', host: spark1}\n"
    )
    assert error_lines(text) == [
        "fleet.yaml:2: hosts.spark1.check_host_key: expected true or false, got 'yes'"
    ]


def test_the_config_reference_documents_every_config_key() -> None:
    reference = (REPO / "docs" / "config.md").read_text(encoding="utf-8")
    assert render_config_table().strip() in reference


# --- launchd hosts: their units name a label, a domain and a plist --------------------------------

MACS = """\
hosts:
  m3ultra: {address: 192.168.1.10, service_manager: launchd}
  spark1: {address: 192.168.1.11}
endpoints:
  kimi:
    kind: openai
    url: http://192.168.1.10:8013
    model: kimi-k2.6-dq3
    units:
      - {host: m3ultra, unit: com.fleet.mlx-kimi, domain: gui/501,
         plist: ~/Library/LaunchAgents/com.fleet.mlx-kimi.plist}
  ollama:
    kind: ollama
    url: http://192.168.1.11:11434
    model: qwen3:8b
    units:
      - {host: spark1, unit: ollama.service}
"""


def macs(*replacements: tuple[str, str]) -> str:
    text = MACS
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


def test_a_launchd_unit_keeps_its_label_domain_and_plist_as_written() -> None:
    config = parse_config(MACS, source="fleet.yaml", base_dir=Path("/etc/fleet"))
    unit = config.endpoints["kimi"].units[0]
    assert (unit.unit, unit.domain, unit.plist) == (
        "com.fleet.mlx-kimi",
        "gui/501",
        "~/Library/LaunchAgents/com.fleet.mlx-kimi.plist",  # the Mac's home, not ours
    )
    assert config.endpoints["ollama"].units[0].domain is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            macs(("unit: com.fleet.mlx-kimi", "unit: mlx-kimi.service")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].unit: 'mlx-kimi.service' is a systemd "
                "unit name, but host 'm3ultra' uses launchd: name the job's launchd label "
                "(e.g. com.fleet.mlx-kimi)"
            ],
            id="service-on-launchd",
        ),
        pytest.param(
            macs(("domain: gui/501,", "")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].domain: required for a unit on launchd "
                "host 'm3ultra' (gui/<uid> for a LaunchAgent, system for a LaunchDaemon, "
                "or user/<uid>)"
            ],
            id="domain-required",
        ),
        pytest.param(
            macs(("domain: gui/501", "domain: gui/milo")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].domain: expected gui/<uid> for a "
                "LaunchAgent, system for a LaunchDaemon, or user/<uid>, got 'gui/milo'"
            ],
            id="domain-malformed",
        ),
        pytest.param(
            macs(("domain: gui/501", "domain: System")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].domain: expected gui/<uid> for a "
                "LaunchAgent, system for a LaunchDaemon, or user/<uid>, got 'System'"
            ],
            id="domain-case",
        ),
        pytest.param(
            macs((",\n         plist: ~/Library/LaunchAgents/com.fleet.mlx-kimi.plist", "")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].plist: required for a unit on launchd "
                "host 'm3ultra' (the job's plist, for bootstrap)"
            ],
            id="plist-required",
        ),
        pytest.param(
            macs(("plist: ~/Library", "plist: Library")),
            [
                "fleet.yaml:11: endpoints.kimi.units[0].plist: expected an absolute path or one "
                "starting with ~/, got 'Library/LaunchAgents/com.fleet.mlx-kimi.plist'"
            ],
            id="plist-relative",
        ),
        pytest.param(
            macs(("unit: ollama.service}", "unit: ollama.service, domain: system}")),
            [
                "fleet.yaml:17: endpoints.ollama.units[0].domain: only for units on launchd "
                "hosts, not systemd host 'spark1'"
            ],
            id="domain-on-systemd",
        ),
        pytest.param(
            macs(("unit: ollama.service}", "unit: com.ollama.ollama}")),
            [
                "fleet.yaml:17: endpoints.ollama.units[0].unit: 'com.ollama.ollama' looks like "
                "a launchd label, but host 'spark1' uses systemd: name the systemd unit (e.g. "
                "vllm-ds4-head.service), or set service_manager: launchd on the host"
            ],
            id="label-on-systemd",
        ),
        pytest.param(
            macs(("gui/501,", "gui/501, container: mlx,")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].container: only for units on systemd "
                "hosts, not launchd host 'm3ultra'"
            ],
            id="container-on-launchd",
        ),
        pytest.param(
            macs(("service_manager: launchd", "service_manager: systemd")),
            [
                "fleet.yaml:10: endpoints.kimi.units[0].unit: 'com.fleet.mlx-kimi' looks like "
                "a launchd label, but host 'm3ultra' uses systemd: name the systemd unit (e.g. "
                "vllm-ds4-head.service), or set service_manager: launchd on the host",
                "fleet.yaml:10: endpoints.kimi.units[0].domain: only for units on launchd "
                "hosts, not systemd host 'm3ultra'",
                "fleet.yaml:11: endpoints.kimi.units[0].plist: only for units on launchd "
                "hosts, not systemd host 'm3ultra'",
            ],
            id="launchd-unit-on-systemd-host",
        ),
    ],
)
def test_units_must_fit_their_hosts_service_manager(text: str, expected: list[str]) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_config(text, source="fleet.yaml", base_dir=Path("/etc/fleet"))
    assert [str(issue) for issue in caught.value.issues] == expected


@pytest.mark.parametrize("domain", ["system", "gui/501", "user/0"])
def test_every_launchd_domain_form_is_accepted(domain: str) -> None:
    text = macs(("domain: gui/501", f"domain: {domain}"))
    config = parse_config(text, source="fleet.yaml", base_dir=Path("/etc/fleet"))
    assert config.endpoints["kimi"].units[0].domain == domain


def test_the_example_gives_the_macs_their_launchd_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", "/home/operator")
    config = load_config(REPO / "deploy" / "fleet.example.yaml")
    units = [
        (u.host, u.unit, u.domain, u.plist)
        for name in ("kimi", "embed", "rerank")
        for u in config.endpoint(name).units
    ]
    agents = "~/Library/LaunchAgents"
    assert units == [
        ("m3ultra", "com.fleet.mlx-kimi", "gui/501", f"{agents}/com.fleet.mlx-kimi.plist"),
        ("m5max", "com.fleet.mlx-embed", "gui/501", f"{agents}/com.fleet.mlx-embed.plist"),
        ("m5max", "com.fleet.mlx-rerank", "gui/501", f"{agents}/com.fleet.mlx-rerank.plist"),
    ]
