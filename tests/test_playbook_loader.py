"""The playbook loader: every kind of broken rule file, with its exact line, and the good rules
beside the broken ones still load."""

from __future__ import annotations

import os
from datetime import timedelta
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.judge.machine import State
from supervisor.playbook.actions.base import Target
from supervisor.playbook.loader import check_playbook, load_playbook, load_rule_files
from supervisor.playbook.model import All, Leaf, Mode, Not, Severity
from supervisor.playbook.problems import Level
from tests.test_playbook_support import FileCollectors, action_registry

COLLECTORS = FileCollectors(Path("/nonexistent")).collectors()
ACTIONS = action_registry()

GOOD = """\
id: ghost-execstart
title: Launch script missing
severity: critical
applies_to: {kinds: [openai], states: [down]}
priority: 50
evidence:
  - {id: status, collect: unit_status}
  - {id: script, collect: path_exists, params: {path: "{status.exec_start_script}"}}
when:
  all:
    - {fact: status.exec_main_status, op: in, value: [127, 203]}
    - {fact: script.exists, op: eq, value: false}
    - not: {fact: status.result, op: regex, value: "^succ"}
actions:
  - action: write_execstart_dropin
    on: unit
    params: {command: "/usr/bin/docker exec {unit.container} bash {unit.known_good}"}
  - action: restart_units
verify: {within: 15m}
mode: auto
runbook: runbooks/ghost.md
budget: {attempts: 2, window: 6h}
"""


def load(tmp_path: Path, files: dict[str, str], *, runbook: bool = True) -> list[str]:
    folder = tmp_path / "playbooks"
    folder.mkdir(exist_ok=True)
    if runbook:
        (tmp_path / "runbooks").mkdir(exist_ok=True)
        (tmp_path / "runbooks" / "ghost.md").write_text("# ghost\n")
    for name, text in files.items():
        (folder / name).write_text(text)
    os.chdir(tmp_path)  # problems name files as the folder was given: playbooks/NAME
    return load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS).lines()


@pytest.fixture(autouse=True)
def _restore_cwd() -> object:
    before = Path.cwd()
    yield None
    os.chdir(before)


def test_a_good_rule_loads_into_typed_models(tmp_path: Path) -> None:
    assert load(tmp_path, {"ghost.yaml": GOOD}) == []
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    rule = playbook.by_id["ghost-execstart"]
    assert rule.severity is Severity.CRITICAL
    assert rule.mode is Mode.AUTO
    assert rule.applies_to.states == (State.DOWN,)
    assert rule.priority == 50
    assert [item.id for item in rule.evidence] == ["status", "script"]
    assert rule.evidence[1].params == {"path": "{status.exec_start_script}"}
    assert isinstance(rule.when, All)
    assert rule.when.all[0] == Leaf(fact="status.exec_main_status", op="in", value=(127, 203))
    negated = rule.when.all[2]
    assert isinstance(negated, Not)
    assert isinstance(negated.not_, Leaf)
    assert negated.not_.pattern is not None
    assert rule.actions[0].on is Target.UNIT  # a bare `on:` is YAML 1.1's `true:`
    assert rule.actions[1].on is None
    assert rule.verify.within == timedelta(minutes=15)
    assert (rule.budget.attempts, rule.budget.window) == (2, timedelta(hours=6))
    assert rule.source == "playbooks/ghost.yaml"


def _swap(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new)


P = "playbooks/ghost.yaml"
R = f"{P}:{{}}: rule 'ghost-execstart': "
ALL_OPS = (
    "eq, ne, in, not_in, gt, ge, lt, le, regex, not_regex, contains, exists, count_eq, count_ne, "
    "count_gt, count_ge, count_lt, count_le, all_match, any_match"
)
STATUS = "active_state, drop_in_paths, exec_main_status, exec_start_script, n_restarts, result"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            _swap("op: in,", "op: equals,"),
            [R.format(11) + f"when.all[0].op: unknown operator 'equals' (operators: {ALL_OPS})"],
            id="unknown-operator",
        ),
        pytest.param(
            _swap("status.exec_main_status, op", "status.exec_main_stat, op"),
            [R.format(11) + f"when.all[0].fact: unknown fact 'status.exec_main_stat' "
             f"(unit_status has: {STATUS})"],
            id="unknown-fact",
        ),
        pytest.param(
            _swap("fact: script.exists", "fact: journal.text"),
            [R.format(12) + "when.all[1].fact: unknown evidence 'journal' (evidence: script, "
             "status; built-in: endpoint, event, host, probe, unit)"],
            id="unknown-evidence",
        ),
        pytest.param(
            _swap("status.exec_main_status, op", "unit.names, op"),
            [R.format(11) + "when.all[0].fact: unknown fact 'unit.names' (built-in unit facts: "
             "container, count, host, index, known_good, name)"],
            id="unknown-builtin-fact",
        ),
        pytest.param(
            _swap("collect: path_exists", "collect: path_exist"),
            [R.format(8) + "evidence[1].collect: unknown collector 'path_exist' (collectors: "
             "crashes, endpoint_only, listeners, path_exists, unit_status)"],
            id="unknown-collector",
        ),
        pytest.param(
            _swap("action: restart_units", "action: restart"),
            [R.format(18) + "actions[1].action: unknown action 'restart' (actions: "
             "kill_processes, restart_units, wait_healthy, write_execstart_dropin)"],
            id="unknown-action",
        ),
        pytest.param(
            _swap('params: {command: "/usr/bin', 'params: {command: 5, x: "/usr/bin'),
            [R.format(17) + "actions[0].params.command: expected text, got 5",
             R.format(17) + "actions[0].params.x: unknown key (expected one of: command)"],
            id="bad-action-params",
        ),
        pytest.param(
            _swap("  - action: restart_units", "  - {action: wait_healthy, params: {within: 5}}"),
            [R.format(18) + "actions[1].params.within: expected a duration like 90s, 15m or 2h, "
             "got 5"],
            id="bad-duration-param",
        ),
        pytest.param(
            _swap("{id: status, collect: unit_status}",
                  '{id: status, collect: listeners, params: {port: "{unit.port}"}}'),
            [R.format(7) + "evidence[0].params.port: expected an integer, got '{unit.port}' "
             "(placeholders only fill text fields)",
             R.format(7) + "evidence[0].params.port: placeholder {unit.port}: unknown fact "
             "'unit.port' (built-in unit facts: container, count, host, index, known_good, name)",
             R.format(8) + "evidence[1].params.path: placeholder {status.exec_start_script}: "
             "unknown fact 'status.exec_start_script' (listeners has: count, pids)",
             R.format(11) + "when.all[0].fact: unknown fact 'status.exec_main_status' "
             "(listeners has: count, pids)",
             R.format(13) + "when.all[2].not.fact: unknown fact 'status.result' "
             "(listeners has: count, pids)"],
            id="bad-collector-params",
        ),
        pytest.param(
            _swap('value: "^succ"', 'value: "succ("'),
            [R.format(13) + "when.all[2].not.value: invalid regular expression 'succ(': "
             "missing ), unterminated subpattern at position 4"],
            id="bad-regex",
        ),
        pytest.param(
            _swap("value: [127, 203]", "value: 127"),
            [R.format(11) + "when.all[0].value: expected a list of values for 'in', got 127"],
            id="value-of-the-wrong-kind",
        ),
        pytest.param(
            _swap("{id: status, collect: unit_status}", "{id: unit, collect: unit_status}"),
            [R.format(7) + "evidence[0].id: 'unit' is a built-in namespace (endpoint, event, host, "
             "probe, unit)",
             R.format(8) + "evidence[1].params.path: placeholder {status.exec_start_script}: "
             "unknown evidence 'status' (evidence: none before this point; built-in: endpoint, "
             "event, host, probe, unit)",
             R.format(11) + "when.all[0].fact: unknown evidence 'status' (evidence: script; "
             "built-in: endpoint, event, host, probe, unit)",
             R.format(13) + "when.all[2].not.fact: unknown evidence 'status' (evidence: script; "
             "built-in: endpoint, event, host, probe, unit)"],
            id="built-in-namespace-as-evidence-id",
        ),
        pytest.param(
            _swap("{id: script,", "{id: status,"),
            [R.format(8) + "evidence[1].id: duplicate evidence id 'status' (also evidence[0])",
             R.format(12) + "when.all[1].fact: unknown evidence 'script' (evidence: status; "
             "built-in: endpoint, event, host, probe, unit)"],
            id="duplicate-evidence-id",
        ),
        pytest.param(
            _swap("    on: unit", "    on: hosts"),
            [R.format(16) + "actions[0].on: write_execstart_dropin cannot act on 'hosts' "
             "(it acts on: unit)"],
            id="target-not-accepted",
        ),
        pytest.param(
            _swap("    on: unit", "    on: cluster"),
            [R.format(16) + "actions[0].on: expected one of unit, units, host, hosts or "
             "endpoint, got 'cluster'"],
            id="unknown-target",
        ),
        pytest.param(
            _swap("mode: auto", "mode: sometimes"),
            [R.format(20) + "mode: expected one of auto, confirm or manual, got 'sometimes'"],
            id="unknown-mode",
        ),
        pytest.param(
            _swap("window: 6h", "window: soon"),
            [R.format(22) + "budget.window: expected a duration like 90s, 15m or 2h, got 'soon'"],
            id="bad-duration",
        ),
        pytest.param(
            _swap("kinds: [openai]", "kinds: [vllm]"),
            [R.format(4) + "applies_to.kinds[0]: expected one of openai, ollama, health, "
             "embedding, rerank, asr or tts, got 'vllm'"],
            id="unknown-kind",
        ),
        pytest.param(
            _swap("id: ghost-execstart", "id: Ghost_Exec"),
            [f"{P}:1: rule 'Ghost_Exec': id: invalid rule id (use lowercase letters, digits and "
             "'-', starting with either)"],
            id="bad-rule-id",
        ),
        pytest.param(
            _swap("mode: auto\n", "mode: auto\nmode: manual\nsource: x\n"),
            [R.format(21) + "mode: duplicate key (first at line 20)",
             R.format(22) + "source: unknown key (expected one of: actions, applies_to, budget, "
             "description, evidence, id, mode, priority, runbook, settle, severity, title, "
             "verify, when)"],
            id="duplicate-and-reserved-keys",
        ),
        pytest.param(
            _swap("severity: critical\n", ""),
            [R.format(1) + "severity: required"],
            id="missing-field",
        ),
        pytest.param(
            _swap("    - {fact: script.exists, op: eq, value: false}\n",
                  "    - {all: [], fact: script.exists}\n    - {any: []}\n    - 5\n"),
            [R.format(12) + "when.all[1]: a condition holds exactly one of all, any, not, or "
             "fact/op/value",
             R.format(13) + "when.all[2].any: expected a list of conditions, got an empty list",
             R.format(14) + "when.all[3]: expected a condition: a mapping with all, any or not, "
             "or a leaf {fact, op, value}, got 5"],
            id="bad-condition-shapes",
        ),
        pytest.param(
            "id: [\n",
            [f"{P}:2: YAML syntax error: expected the node content, but found '<stream end>'"],
            id="yaml-syntax-error",
        ),
        pytest.param(
            "",
            [f"{P}: the file is empty (expected a rule: a mapping with id, title, severity, "
             "evidence, when, actions and mode)"],
            id="empty-file",
        ),
        pytest.param(
            "- id: ghost\n",
            [f"{P}:1: expected a rule: a mapping with id, title, severity, evidence, when, "
             "actions and mode, got a list"],
            id="not-a-mapping",
        ),
    ],
)  # fmt: skip
def test_broken_rule_is_reported_and_the_good_one_beside_it_loads(
    tmp_path: Path, text: str, expected: list[str]
) -> None:
    other = GOOD.replace("id: ghost-execstart", "id: other")
    assert load(tmp_path, {"ghost.yaml": text, "other.yaml": other}) == expected
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    assert [rule.id for rule in playbook.rules] == ["other"]


def test_a_missing_runbook_is_a_warning_and_the_rule_still_loads(tmp_path: Path) -> None:
    lines = load(tmp_path, {"ghost.yaml": GOOD}, runbook=False)
    base = tmp_path.absolute()
    assert lines == [
        f"{P}:21: rule 'ghost-execstart': warning: runbook: no such file "
        f"'{base}/runbooks/ghost.md' (relative paths start at '{base}')"
    ]
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    assert [rule.id for rule in playbook.rules] == ["ghost-execstart"]
    assert playbook.problems[0].level is Level.WARNING
    assert playbook.errors == ()


def test_duplicate_rule_ids_name_both_files_and_skip_the_second(tmp_path: Path) -> None:
    second = GOOD.replace("title: Launch script missing", "title: Second")
    lines = load(tmp_path, {"a.yaml": GOOD, "b.yaml": second})
    assert lines == [
        "playbooks/b.yaml:1: rule 'ghost-execstart': id: duplicate rule id 'ghost-execstart' "
        "(also in playbooks/a.yaml); skipped"
    ]
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    assert playbook.by_id["ghost-execstart"].title == "Launch script missing"


def test_rules_are_ordered_by_priority_then_id(tmp_path: Path) -> None:
    files = {
        f"{name}.yaml": GOOD.replace("id: ghost-execstart", f"id: {name}").replace(
            "priority: 50", f"priority: {priority}"
        )
        for name, priority in (("b", 10), ("a", 10), ("c", 90), ("d", -5))
    }
    files["e.yaml"] = GOOD.replace("id: ghost-execstart", "id: e").replace("priority: 50\n", "")
    assert load(tmp_path, files) == []
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    assert [rule.id for rule in playbook.rules] == ["c", "a", "b", "e", "d"]


def test_only_yaml_files_in_the_folder_itself_are_rules(tmp_path: Path) -> None:
    (tmp_path / "playbooks" / "tests").mkdir(parents=True)
    (tmp_path / "playbooks" / "tests" / "fixture.yaml").write_text("cases: []\n")
    (tmp_path / "playbooks" / "README.md").write_text("# not a rule\n")
    files = {"ghost.yml": GOOD}
    assert load(tmp_path, files) == []
    playbook = load_playbook(Path("playbooks"), collectors=COLLECTORS, actions=ACTIONS)
    assert [rule.id for rule in playbook.rules] == ["ghost-execstart"]


def test_a_missing_folder_is_a_problem_not_an_exception(tmp_path: Path) -> None:
    playbook = load_playbook(tmp_path / "nope", collectors=COLLECTORS, actions=ACTIONS)
    assert playbook.rules == ()
    assert playbook.lines() == [
        f"{tmp_path}/nope: cannot read the playbook folder: No such file or directory"
    ]


def test_check_playbook_gives_lines_and_undecodable_files_are_reported(tmp_path: Path) -> None:
    folder = tmp_path / "playbooks"
    folder.mkdir()
    (folder / "bin.yaml").write_bytes(b"id: x\n\xff\xfe\n")
    assert check_playbook(folder, collectors=COLLECTORS, actions=ACTIONS) == [
        f"{folder}/bin.yaml:2: not UTF-8 text (byte 0xff)"
    ]


def test_load_rule_files_keeps_the_order_given(tmp_path: Path) -> None:
    first = tmp_path / "z.yaml"
    second = tmp_path / "a.yaml"
    first.write_text(GOOD.replace("runbook: runbooks/ghost.md\n", ""))
    second.write_text(GOOD.replace("runbook: runbooks/ghost.md\n", "").replace("critical", "info"))
    playbook = load_rule_files([first, second], collectors=COLLECTORS, actions=ACTIONS)
    assert playbook.by_id["ghost-execstart"].severity is Severity.CRITICAL
    assert [p.file for p in playbook.problems] == [str(second)]


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.one_of(
        st.binary(max_size=300),
        st.text(alphabet="{}[]:,-&*! \n\tidwhenallnotfactopvalue0123456789'\"#|>", max_size=300)
        .map(str.encode),
        st.sampled_from(GOOD.splitlines(keepends=True)).map(str.encode),
        st.lists(st.sampled_from(GOOD.splitlines(keepends=True)), max_size=30)
        .map(lambda lines: "".join(lines).encode()),
    )
)  # fmt: skip
def test_the_loader_never_raises_whatever_the_bytes(tmp_path: Path, data: bytes) -> None:
    folder = tmp_path / "fuzz"
    folder.mkdir(exist_ok=True)
    (folder / "rule.yaml").write_bytes(data)
    playbook = load_playbook(folder, collectors=COLLECTORS, actions=ACTIONS)
    assert all(isinstance(line, str) for line in playbook.lines())
    assert len(playbook.rules) + len(playbook.errors) >= 1
