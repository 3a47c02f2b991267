"""`rules test` fixtures and the `rules` command: passing, failing with the explanation,
broken fixture files, and the exit codes."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.playbook.fixtures import run_fixtures
from supervisor.playbook.loader import Playbook, load_playbook
from tests.test_playbook_support import FileCollectors, action_registry

DATA = Path(__file__).resolve().parent / "data" / "playbook"
EXAMPLE_RULES = DATA / "rules"
EXAMPLE_FIXTURE = DATA / "fixtures" / "ghost-execstart.yaml"
COLLECTORS = FileCollectors(Path("/nonexistent")).collectors()
ACTIONS = action_registry()

HEAD = "{unit: vllm-ds4-head.service, host: spark1, container: vllm_ds4}"


def example_playbook() -> Playbook:
    playbook = load_playbook(EXAMPLE_RULES, collectors=COLLECTORS, actions=ACTIONS)
    assert playbook.lines() == []
    return playbook


def run(tmp_path: Path, text: str, playbook: Playbook | None = None) -> tuple[list[str], int]:
    fixture = tmp_path / "fixture.yaml"
    fixture.write_text(text)
    report = run_fixtures(
        [fixture], playbook or example_playbook(), collectors=COLLECTORS, actions=ACTIONS
    )
    return report.lines(), report.exit_code


def test_the_example_fixture_passes() -> None:
    report = run_fixtures(
        [EXAMPLE_FIXTURE], Playbook(), collectors=COLLECTORS, actions=ACTIONS
    )  # the fixture names its own rule file
    assert report.lines() == [
        "ok  exit 127 from a missing launch script -> ghost-execstart",
        "ok  exit 127 although the script is there (another cause) -> none",
        "ok  only the worker of a pair lost its script -> ghost-execstart",
        "3 passed, 0 failed",
    ]
    assert report.exit_code == 0


def test_a_failing_case_explains_the_expected_rule_scope_by_scope(tmp_path: Path) -> None:
    lines, code = run(
        tmp_path,
        f"""\
cases:
  - name: the status is missing for the head
    units: [{HEAD}]
    facts:
      - script: {{exists: false}}
    expect: ghost-execstart
  - name: a degraded endpoint
    endpoint: {{state: degraded}}
    facts:
      - status: {{exec_main_status: 127, result: exit-code}}
    expect: ghost-execstart
  - name: a look-alike that matches after all
    units: [{HEAD}]
    facts:
      - status: {{exec_main_status: 203, result: exit-code, exec_start_script: /usr/bin/x}}
        script: {{exists: false}}
    expect: none
  - name: a rule that is not there
    facts: []
    expect: ghost-execstar
""",
    )
    missing = "missing (unit_status: not given by the fixture)"
    assert lines == [
        "FAIL  the status is missing for the head: expected ghost-execstart, got none",
        "    rule ghost-execstart: no match",
        "      vllm-ds4-head.service@spark1: no",
        "        all: no",
        f"          status.exec_main_status: {missing}: in [127, 203]: no",
        f"          status.result: {missing}: eq 'exit-code': no",
        "          script.exists: missing (path_exists: placeholder {status.exec_start_script}: "
        "status.exec_start_script is missing (unit_status: not given by the fixture)): "
        "eq false: no",
        "FAIL  a degraded endpoint: expected ghost-execstart, got none",
        "    rule ghost-execstart: skipped (applies in states down, not degraded)",
        "FAIL  a look-alike that matches after all: expected none, got ghost-execstart",
        "    rule ghost-execstart: matched",
        "      vllm-ds4-head.service@spark1: yes",
        "        all: yes",
        "          status.exec_main_status = 203: in [127, 203]: yes",
        "          status.result = 'exit-code': eq 'exit-code': yes",
        "          script.exists = false: eq false: yes",
        "FAIL  a rule that is not there: expected ghost-execstar, got none",
        "    no rule 'ghost-execstar' in the playbook (rules: ghost-execstart)",
        "0 passed, 4 failed",
    ]
    assert code == 1


def test_a_disabled_expected_rule_shows_its_problem(tmp_path: Path) -> None:
    folder = tmp_path / "playbooks"
    folder.mkdir()
    rule = (EXAMPLE_RULES / "ghost-execstart.yaml").read_text()
    (folder / "ghost.yaml").write_text(
        rule.replace("op: eq, value: exit-code", "op: equals, value: exit-code")
    )
    playbook = load_playbook(folder, collectors=COLLECTORS, actions=ACTIONS)
    lines, code = run(
        tmp_path, "cases:\n  - {name: x, facts: [], expect: ghost-execstart}\n", playbook
    )
    assert lines[:2] == [
        "FAIL  x: expected ghost-execstart, got none",
        "    rule ghost-execstart is disabled:",
    ]
    assert lines[2].startswith(
        f"      {folder}/ghost.yaml:15: rule 'ghost-execstart': when.all[1].op"
    )
    assert code == 1


@pytest.mark.parametrize(
    ("text", "problems"),
    [
        pytest.param(
            "cases:\n  - name: x\n    expect: [a]\n    endpont: {}\n",
            ["{f}:3: cases[0].expect: expected text, got a list",
             "{f}:4: cases[0].endpont: unknown key (expected one of: endpoint, expect, facts, "
             "hosts, name, probe, units)"],
            id="wrong-types",
        ),
        pytest.param(
            "cases:\n  - name: x\n    facts:\n      - status: {exec_main_stat: 127}\n"
            "        stat: {exists: true}\n    expect: none\n",
            ["{f}:4: cases[0].facts[0].status.exec_main_stat: unknown fact (the rules' status "
             "has: active_state, drop_in_paths, exec_main_status, exec_start_script, n_restarts, "
             "result)",
             "{f}:5: cases[0].facts[0].stat: no rule gathers evidence 'stat' (evidence: script, "
             "status)"],
            id="unknown-facts",
        ),
        pytest.param(
            "cases:\n  - name: x\n    facts: [{status: {result: {a: 1}}}, {}]\n    expect: none\n",
            ["{f}:3: cases[0].facts: 2 entries for an endpoint without units (one per unit)",
             "{f}:3: cases[0].facts[0].status.result: expected a value or a list of values, "
             "got a mapping"],
            id="bad-facts",
        ),
        pytest.param("cases: [\n", ["{f}:2: YAML syntax error: expected the node content, but "
                                    "found '<stream end>'"], id="yaml-syntax"),
        pytest.param("", ["{f}: the file is empty (expected a mapping with cases (and optionally "
                          "rule_files))"], id="empty"),
        pytest.param("cases: []\n", ["{f}:1: cases: expected at least one case"], id="no-cases"),
        pytest.param(
            "rule_files: [nope.yaml]\ncases: [{name: x, expect: none}]\n",
            ["{d}/nope.yaml: cannot read: No such file or directory"],
            id="missing-rule-file",
        ),
    ],
)  # fmt: skip
def test_a_broken_fixture_file_is_reported_with_its_line(
    tmp_path: Path, text: str, problems: list[str]
) -> None:
    lines, code = run(tmp_path, text)
    fixture = tmp_path / "fixture.yaml"
    expected = [p.format(f=fixture, d=tmp_path) for p in problems]
    assert lines == [*expected, f"0 passed, 0 failed, {len(expected)} problems in fixture files"]
    assert code == 2


@pytest.fixture
def in_tmp(tmp_path: Path) -> object:
    before = Path.cwd()
    os.chdir(tmp_path)
    yield tmp_path
    os.chdir(before)


def test_cli_rules_lists_rules_and_problems(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    shutil.copytree(EXAMPLE_RULES, in_tmp / "playbooks")
    (in_tmp / "playbooks" / "broken.yaml").write_text("id: broken\nmode: auto\n")
    assert main(["rules"]) == 1  # no config here: ./playbooks
    out = capsys.readouterr().out
    assert out.splitlines() == [
        "ID               MODE  SEVERITY  APPLIES TO                 ACTIONS"
        "                                STATUS",
        "ghost-execstart  auto  critical  kinds openai; states down  write_execstart_dropin, "
        "restart_units  ok",
        "broken           -     -         -                          -"
        "                                      disabled",
        "playbooks/broken.yaml:1: rule 'broken': title: required",
        "playbooks/broken.yaml:1: rule 'broken': severity: required",
        "playbooks/broken.yaml:1: rule 'broken': when: required",
    ]
    assert main(["rules", "--playbook", str(EXAMPLE_RULES), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["rules"][0]["id"] == "ghost-execstart"
    assert document["rules"][0]["applies_to"] == {
        "kinds": ["openai"],
        "endpoints": None,
        "states": ["down"],
    }
    assert document["problems"] == []


def test_cli_rules_test_exit_codes(in_tmp: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["rules", "test", str(EXAMPLE_FIXTURE)]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "3 passed, 0 failed"
    failing = in_tmp / "failing.yaml"
    failing.write_text(f"rule_files: [{EXAMPLE_RULES}/ghost-execstart.yaml]\n"
                       "cases: [{name: x, facts: [], expect: ghost-execstart}]\n")  # fmt: skip
    assert main(["rules", "test", str(failing), str(EXAMPLE_FIXTURE)]) == 1
    assert capsys.readouterr().out.splitlines()[0] == "FAIL  x: expected ghost-execstart, got none"
    broken = in_tmp / "broken.yaml"
    broken.write_text("cases: 5\n")
    assert main(["rules", "test", str(broken), "--playbook", str(EXAMPLE_RULES)]) == 2
    assert capsys.readouterr().out.splitlines() == [
        f"{broken}:1: cases: expected a list, got 5",
        "0 passed, 0 failed, 1 problems in fixture files",
    ]


def test_cli_takes_the_playbook_folder_from_the_config(
    in_tmp: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = in_tmp / "etc" / "fleet.yaml"
    config.parent.mkdir()
    config.write_text("endpoints:\n  x: {kind: health, url: 'http://127.0.0.1:9/health'}\n")
    (config.parent / "playbooks").mkdir()
    assert main(["--config", str(config), "rules"]) == 0  # default: playbooks beside the config
    assert capsys.readouterr().out == f"no rules in {config.parent / 'playbooks'}\n"
    config.write_text(config.read_text() + f"playbook: {{path: {EXAMPLE_RULES}}}\n")
    assert main(["--config", str(config), "rules"]) == 0
    assert capsys.readouterr().out.splitlines()[1].startswith("ghost-execstart  auto")
    assert main(["--config", str(in_tmp / "nope.yaml"), "rules"]) == 2
    assert "nope.yaml: cannot read: No such file or directory" in capsys.readouterr().err
