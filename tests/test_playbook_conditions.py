"""The operator table, condition evaluation with traces, explanations and placeholders."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from supervisor.playbook.conditions import evaluate, explain, first_failure
from supervisor.playbook.docs import builtin_facts_markdown, rule_fields_markdown
from supervisor.playbook.facts import Facts
from supervisor.playbook.model import All, Any, Leaf, Not
from supervisor.playbook.operators import (
    MISSING,
    OPERATORS,
    apply_operator,
    operators_markdown,
    unknown_operator,
)
from supervisor.playbook.params import ParamsError, resolve_params
from supervisor.playbook.registries import actions_or_default, collectors_or_default
from supervisor.playbook.templating import PlaceholderError, fill, placeholders
from tests.test_playbook_support import KillParams, PathParams

REPO = Path(__file__).resolve().parent.parent


def _compiled(op: str, value: object) -> object:
    return (
        re.compile(str(value)) if op in {"regex", "not_regex", "all_match", "any_match"} else value
    )


@pytest.mark.parametrize("name", list(OPERATORS))
def test_every_operator_holds_on_its_passing_example_and_not_on_its_failing_one(
    name: str,
) -> None:
    op = OPERATORS[name]
    fact, value = op.passes_example
    assert apply_operator(op, fact, _compiled(name, value)) == (True, "")
    fact, value = op.fails_example
    assert apply_operator(op, fact, _compiled(name, value)) == (False, "")


def test_the_table_has_the_documented_operators_in_order() -> None:
    assert list(OPERATORS) == [
        "eq", "ne", "in", "not_in", "gt", "ge", "lt", "le", "regex", "not_regex", "contains",
        "exists", "count_eq", "count_ne", "count_gt", "count_ge", "count_lt", "count_le",
        "all_match", "any_match",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("op", "fact", "value", "expected"),
    [
        ("eq", True, 1, (False, "")),  # no Python True == 1
        ("eq", 1, True, (False, "")),
        ("eq", 127, 127.0, (True, "")),
        ("eq", ("a", "b"), ("a", "b"), (True, "")),
        ("eq", ("a", "b"), "a", (False, "")),
        ("eq", None, None, (True, "")),
        ("ne", MISSING, 1, (False, "")),  # a missing fact fails every operator but exists
        ("not_in", MISSING, (1, 2), (False, "")),
        ("in", True, (1, 2), (False, "")),
        ("gt", "exit-code", 5, (False, "not a number")),
        ("lt", True, 5, (False, "not a number")),
        ("gt", MISSING, 5, (False, "")),
        ("regex", 127, "12", (False, "not text")),
        ("regex", ("x", "EADDRINUSE"), "EADDR", (True, "")),
        ("regex", (4242,), "42", (False, "not text")),
        ("not_regex", ("a", "b"), "c", (True, "")),
        ("contains", "No such file", "such", (True, "")),
        ("contains", ("a", "b"), "b", (True, "")),
        ("contains", "text", 5, (False, "text contains only text; the value is not text")),
        ("contains", 5, "5", (False, "not text")),
        ("exists", MISSING, False, (True, "")),
        ("exists", "", False, (False, "")),
        ("exists", None, True, (True, "")),
        ("count_eq", "abc", 3, (False, "not a list or a count")),
        ("count_eq", True, 1, (False, "not a list or a count")),
        ("count_ge", 3, 2, (True, "")),
        ("all_match", (), "x", (False, "")),  # false on an empty list
        ("all_match", "VLLM::Worker", "VLLM", (False, "not a list")),
        ("any_match", "VLLM::Worker", "VLLM", (False, "not a list")),
        ("any_match", ("a", 1), "a", (True, "")),
    ],
)
def test_edge_cases_never_raise(op: str, fact: object, value: object, expected: object) -> None:
    assert apply_operator(OPERATORS[op], fact, _compiled(op, value)) == expected  # type: ignore[arg-type]


def test_unknown_operator_text_lists_the_table() -> None:
    assert unknown_operator("equals") == (
        "unknown operator 'equals' (operators: eq, ne, in, not_in, gt, ge, lt, le, regex, "
        "not_regex, contains, exists, count_eq, count_ne, count_gt, count_ge, count_lt, "
        "count_le, all_match, any_match)"
    )


def test_markdown_table_rows_come_from_the_table() -> None:
    lines = operators_markdown().splitlines()
    assert lines[0] == "| Operator | `value:` | Holds when | Holds | Does not hold |"
    assert len(lines) == 2 + len(OPERATORS)
    assert lines[4] == (
        "| `in` | a list of values | the fact equals one of the values "
        "| fact `127`, value `[127, 203]` | fact `1`, value `[127, 203]` |"
    )
    assert "| fact missing, value `true` |" in lines[2 + 11]


def test_the_readme_holds_the_generated_operators_table() -> None:
    readme = (REPO / "playbooks" / "README.md").read_text()
    assert operators_markdown() in readme


FACTS = Facts(
    values={
        "status.exec_main_status": 127,
        "status.result": "exit-code",
        "script.exists": True,
        "listeners.commands": ("VLLM::Worker_TP0", "nginx"),
    },
    errors={"journal": "journal: cannot connect to spark1 (192.168.1.11:22): refused"},
)


def leaf(fact: str, op: str, value: object) -> Leaf:
    return Leaf.model_validate({"fact": fact, "op": op, "value": value})


def test_a_trace_explains_every_leaf_with_its_actual_value() -> None:
    condition = All(
        all=(
            leaf("status.exec_main_status", "in", [127, 203]),
            leaf("script.exists", "eq", False),
            Any(any=(leaf("journal.text", "regex", "EADDRINUSE"), leaf("x.y", "exists", False))),
            Not(not_=leaf("status.result", "eq", "success")),
            leaf("status.result", "gt", 5),
        )
    )
    trace = evaluate(condition, FACTS)
    assert not trace.passed
    assert explain(trace) == [
        "all: no",
        "  status.exec_main_status = 127: in [127, 203]: yes",
        "  script.exists = true: eq false: no",
        "  any: yes",
        "    journal.text: missing (journal: cannot connect to spark1 (192.168.1.11:22): "
        "refused): regex 'EADDRINUSE': no",
        "    x.y: missing: exists false: yes",
        "  not: yes",
        "    status.result = 'exit-code': eq 'success': no",
        "  status.result = 'exit-code': gt 5: no (not a number)",
    ]
    assert first_failure(trace) == "script.exists = true: eq false: no"


@pytest.mark.parametrize(
    ("condition", "failure"),
    [
        (leaf("status.exec_main_status", "eq", 127), ""),
        (
            Any(any=(leaf("script.exists", "eq", False), leaf("status.result", "eq", "success"))),
            "none of these holds: script.exists = true: eq false: no; "
            "status.result = 'exit-code': eq 'success': no",
        ),
        (Not(not_=leaf("script.exists", "eq", True)), "not: script.exists = true: eq true: yes"),
        (
            Not(not_=All(all=(leaf("script.exists", "eq", True),))),
            "not: its all holds",
        ),
        (
            leaf("listeners.commands", "all_match", "^VLLM::"),
            "listeners.commands = ['VLLM::Worker_TP0', 'nginx']: all_match '^VLLM::': no",
        ),
    ],
)
def test_first_failure_in_plain_words(condition: All | Any | Not | Leaf, failure: str) -> None:
    assert first_failure(evaluate(condition, FACTS)) == failure


def test_regex_leaves_are_compiled_when_built() -> None:
    built = leaf("journal.text", "regex", "EADDR(INUSE)?")
    assert built.pattern is not None
    assert built.pattern.pattern == "EADDR(INUSE)?"
    assert leaf("status.result", "eq", "x").pattern is None


@pytest.mark.parametrize(
    ("text", "names", "filled"),
    [
        ("{unit.known_good}", ("unit.known_good",), "/w/head.sh"),
        (
            "docker exec {unit.container} bash {unit.known_good}",
            ("unit.container", "unit.known_good"),
            "docker exec vllm_ds4 bash /w/head.sh",
        ),
        (r"VLLM::Worker_TP\d{1,2}", (), r"VLLM::Worker_TP\d{1,2}"),  # braces of a regex stay
        ("{{unit.name}} is literal", (), "{unit.name} is literal"),
        ("{status.pids} and {status.ok}", ("status.pids", "status.ok"), "1 2 and true"),
        ("{ not.a placeholder }", (), "{ not.a placeholder }"),
    ],
)
def test_placeholders(text: str, names: tuple[str, ...], filled: str) -> None:
    facts = Facts(
        values={
            "unit.known_good": "/w/head.sh",
            "unit.container": "vllm_ds4",
            "status.pids": (1, 2),
            "status.ok": True,
        }
    )
    assert placeholders(text) == names
    assert fill(text, facts) == filled


def test_a_missing_placeholder_says_why() -> None:
    facts = Facts(errors={"status": "unit_status: cannot connect to spark1"})
    with pytest.raises(PlaceholderError) as caught:
        fill("{status.exec_start_script}", facts)
    assert str(caught.value) == (
        "placeholder {status.exec_start_script}: status.exec_start_script is missing "
        "(unit_status: cannot connect to spark1)"
    )


@pytest.mark.parametrize(
    ("raw", "facts", "result"),
    [
        ({"path": "{status.script}"}, {"status.script": "/w/x"}, "path='/w/x' in_container=False"),
        ({"path": "/fixed", "in_container": True}, {}, "path='/fixed' in_container=True"),
        ({"path": "{status.script}"}, {}, "placeholder {status.script}: status.script is missing"),
    ],
)
def test_resolve_params_fills_then_validates(
    raw: dict[str, object], facts: dict[str, str], result: str
) -> None:
    try:
        resolved = str(resolve_params(PathParams, raw, Facts(values=facts)))
    except ParamsError as exc:
        resolved = str(exc)
    assert resolved == result


def test_resolve_params_fills_defaults_and_rechecks() -> None:
    class WithDefault(PathParams):
        path: str = "{unit.container}"

    resolved = resolve_params(WithDefault, {}, Facts(values={"unit.container": "vllm_ds4"}))
    assert resolved.path == "vllm_ds4"
    with pytest.raises(ParamsError, match=r"^params\.port: expected an integer, got 'x'"):
        resolve_params(KillParams, {"pattern": "x", "port": "x"}, Facts())


def test_the_readme_holds_the_generated_reference_tables() -> None:
    readme = (REPO / "playbooks" / "README.md").read_text()
    assert rule_fields_markdown() in readme
    assert builtin_facts_markdown() in readme
    for name in collectors_or_default(None):
        assert f"### `{name}`" in readme, name
    for name in actions_or_default(None):
        assert f"### `{name}`" in readme, name
