"""The shipped playbook against its own `rules test` fixtures (`playbooks/tests/*.yaml`).

Each fixture file is named after one shipped rule and holds cases that must match it and
look-alikes that must not; every case runs through the real matcher against the whole shipped
playbook, so priorities and "the first match wins" are part of what is checked.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from supervisor.cli import main
from supervisor.playbook.fixtures import FixtureReport, run_fixtures
from supervisor.playbook.loader import Playbook, load_playbook

PLAYBOOK = Path(__file__).resolve().parent.parent / "playbooks"
FIXTURES = sorted(PLAYBOOK.joinpath("tests").glob("*.yaml"))


@pytest.fixture(scope="module")
def shipped() -> Playbook:
    playbook = load_playbook(PLAYBOOK)
    assert playbook.lines() == []
    return playbook


@pytest.fixture(scope="module")
def report(shipped: Playbook) -> FixtureReport:
    return run_fixtures(FIXTURES, shipped)


def failures(report: FixtureReport) -> list[str]:
    """The lines of every failing case (with the runner's explanation) and every problem."""
    lines = [line for result in report.results if not result.passed for line in result.lines()]
    return [*lines, *report.problems]


def test_there_is_a_fixture_file_per_shipped_rule(shipped: Playbook) -> None:
    assert shipped.rules
    assert sorted(path.stem for path in FIXTURES) == sorted(rule.id for rule in shipped.rules)


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: path.stem)
def test_every_case_of_the_fixture_file_passes(path: Path, shipped: Playbook) -> None:
    report = run_fixtures([path], shipped)
    assert failures(report) == []
    assert report.results
    assert report.exit_code == 0


@pytest.mark.parametrize("path", FIXTURES, ids=lambda path: path.stem)
def test_each_file_has_a_match_and_a_look_alike(path: Path, report: FixtureReport) -> None:
    expected = [result.expected for result in report.results if result.file == str(path)]
    assert path.stem in expected, f"no case of {path.name} expects {path.stem}"
    assert any(rule != path.stem for rule in expected), f"{path.name} has no look-alike"


def test_every_shipped_rule_is_expected_by_some_case(
    shipped: Playbook, report: FixtureReport
) -> None:
    cases: defaultdict[str | None, int] = defaultdict(int)
    for result in report.results:
        cases[result.expected] += 1
    assert [rule.id for rule in shipped.rules if cases[rule.id] == 0] == []


def test_the_cli_runs_every_fixture_file(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["rules", "test", *map(str, FIXTURES), "--playbook", str(PLAYBOOK)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert [line for line in lines if not line.startswith("ok  ")] == [
        f"{len(lines) - 1} passed, 0 failed"
    ]
