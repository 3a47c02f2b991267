"""The playbook: YAML rules that diagnose a failure from evidence and say how to repair it.

`load_playbook(folder)` gives the valid rules and every located problem; `diagnose(...)` gathers
evidence for one endpoint and finds the first rule that matches; `run_fixtures(...)` replays
recorded facts (`fleet-supervisor rules test`). `playbooks/README.md` documents the format.
"""

from supervisor.playbook.diagnose import diagnose
from supervisor.playbook.fixtures import FixtureReport, run_fixtures
from supervisor.playbook.loader import Playbook, check_playbook, load_playbook
from supervisor.playbook.model import Mode, Rule, Severity
from supervisor.playbook.problems import RuleProblem
from supervisor.playbook.results import DiagnosisResult, RuleEvaluation, RuleMatch

__all__ = [
    "DiagnosisResult",
    "FixtureReport",
    "Mode",
    "Playbook",
    "Rule",
    "RuleEvaluation",
    "RuleMatch",
    "RuleProblem",
    "Severity",
    "check_playbook",
    "diagnose",
    "load_playbook",
    "run_fixtures",
]
