"""Bad input, fuzzed: the config loader and the rule loader, given arbitrary text or a mutated
valid file, return a result or clear one-line problems, never a traceback."""

from __future__ import annotations

from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from supervisor.config.errors import ConfigError, ConfigIssue
from supervisor.config.loader import parse_config
from supervisor.config.models import FleetConfig
from supervisor.playbook.loader import parse_rule
from supervisor.playbook.registries import actions_or_default, collectors_or_default

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = (ROOT / "deploy" / "fleet.example.yaml").read_text()
RULES = sorted((ROOT / "playbooks").glob("*.yaml"))
RULE_TEXTS = [p.read_text() for p in RULES]
COLLECTORS = collectors_or_default(None)
ACTIONS = actions_or_default(None)
BASE = Path("/srv/fleet")  #: only joined to relative paths, never touched
FUZZ = settings(
    max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow], database=None
)

#: YAML-ish text: the characters that make YAML do interesting things, and some others.
yamlish = st.text(
    alphabet=st.sampled_from([*"abz019 :-_[]{}#&*!|>'\"%@`,?\n\t.~=\\/", "\x00", "é"]),
    max_size=300,
)


@st.composite
def mutated(draw: st.DrawFn, texts: list[str]) -> str:
    """A valid file with a few lines deleted, duplicated, cut short or changed."""
    lines = draw(st.sampled_from(texts)).splitlines()
    for _ in range(draw(st.integers(1, 4))):
        if not lines:
            break
        i = draw(st.integers(0, len(lines) - 1))
        op = draw(st.sampled_from(["delete", "dup", "cut", "replace", "indent"]))
        if op == "delete":
            del lines[i]
        elif op == "dup":
            lines.insert(i, lines[i])
        elif op == "cut":
            lines[i] = lines[i][: draw(st.integers(0, len(lines[i])))]
        elif op == "indent":
            lines[i] = " " * draw(st.integers(1, 3)) + lines[i]
        else:
            lines[i] = draw(yamlish)
    return "\n".join(lines) + "\n"


def _config(text: str) -> None:
    issues: tuple[ConfigIssue, ...] = ()
    try:
        config = parse_config(text, source="fleet.yaml", base_dir=BASE)
    except ConfigError as err:
        issues = tuple(err.issues)
        assert issues, "a ConfigError names at least one problem"
    else:
        assert isinstance(config, FleetConfig)
    for issue in issues:
        line = str(issue)
        assert line.startswith("fleet.yaml"), line
        assert issue.message.strip(), line
        assert "\n" not in issue.message, line


@FUZZ
@given(text=yamlish)
def test_config_loader_on_arbitrary_text(text: str) -> None:
    _config(text)


@FUZZ
@given(text=mutated([EXAMPLE]))
def test_config_loader_on_a_mutated_example(text: str) -> None:
    _config(text)


def test_the_unmutated_example_loads(tmp_path: Path) -> None:
    assert isinstance(parse_config(EXAMPLE, source="fleet.yaml", base_dir=tmp_path), FleetConfig)


def _rule(text: str) -> None:
    loaded = parse_rule(
        text, file="rule.yaml", base=ROOT / "playbooks", collectors=COLLECTORS, actions=ACTIONS
    )
    if loaded.rule is None:
        assert loaded.problems, "a refused rule says why"
    for problem in loaded.problems:
        line = str(problem)
        assert line.startswith("rule.yaml"), line
        assert problem.message.strip(), line


@FUZZ
@given(text=yamlish)
def test_rule_loader_on_arbitrary_text(text: str) -> None:
    _rule(text)


@FUZZ
@given(text=mutated(RULE_TEXTS))
def test_rule_loader_on_mutated_shipped_rules(text: str) -> None:
    _rule(text)


def test_every_shipped_rule_loads() -> None:
    assert len(RULE_TEXTS) >= 10
    for text in RULE_TEXTS:
        loaded = parse_rule(
            text, file="rule.yaml", base=ROOT / "playbooks", collectors=COLLECTORS, actions=ACTIONS
        )
        assert loaded.rule is not None, [str(p) for p in loaded.problems]
