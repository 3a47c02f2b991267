"""`rules replay`: a playbook evaluated again on the stored evidence of past diagnoses, and where
its decisions differ from those taken then: the regression test of a playbook change, on the
fleet's own history.

Each round (`supervisor.playbook.history`) is matched by the real matcher against the endpoint's
units and hosts as the config has them now; its stored evidence stands in for the collectors.
A rule that asks for evidence the round did not gather sees it missing (the difference says
which), as a rule tried after the one that matched then never had its evidence gathered.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from supervisor.config.models import FleetConfig
from supervisor.playbook.history import Round, stored_gather
from supervisor.playbook.loader import Playbook
from supervisor.playbook.matching import match_rules
from supervisor.playbook.registries import Collectors
from supervisor.playbook.scopes import scopes_of


@dataclass(frozen=True, kw_only=True)
class Replayed:
    """One past diagnosis, decided again."""

    round: Round
    now: str | None  #: the rule that matches now (None: none does)
    missing: tuple[str, ...] = ()  #: evidence the rules tried now asked for, not gathered then

    @property
    def differs(self) -> bool:
        return self.now != self.round.decided

    def line(self) -> str:
        """`#12 ds4 (down): unknown-failure -> lab-preflight`."""
        r = self.round
        line = f"#{r.incident_id} {r.endpoint} ({r.state}): {r.decided or 'none'} -> "
        line += self.now or "none"
        if self.missing:
            line += f" (not gathered then: {', '.join(self.missing)})"
        return line


@dataclass(frozen=True, kw_only=True)
class RuleChange:
    """Where one rule's matches differ: incidents it would now match, and no longer."""

    rule: str
    now_matches: tuple[int, ...] = ()
    no_longer_matches: tuple[int, ...] = ()

    def lines(self) -> list[str]:
        lines = []
        if self.now_matches:
            lines.append(f"{self.rule}: now matches {_ids(self.now_matches)}")
        if self.no_longer_matches:
            lines.append(f"{self.rule}: no longer matches {_ids(self.no_longer_matches)}")
        return lines


def _ids(ids: Sequence[int]) -> str:
    return ", ".join(f"#{i}" for i in ids)


@dataclass(frozen=True, kw_only=True)
class ReplayReport:
    replayed: tuple[Replayed, ...] = ()
    skipped: tuple[str, ...] = ()  #: rounds that could not be replayed, and why

    @property
    def differences(self) -> tuple[Replayed, ...]:
        return tuple(r for r in self.replayed if r.differs)

    @property
    def incidents(self) -> int:
        return len({r.round.incident_id for r in self.replayed})

    def changes(self) -> tuple[RuleChange, ...]:
        """Per rule (by id), the incidents it now matches and no longer matches."""
        gained: dict[str, dict[int, None]] = {}
        lost: dict[str, dict[int, None]] = {}
        for replayed in self.differences:
            incident = replayed.round.incident_id
            if replayed.now is not None:
                gained.setdefault(replayed.now, {})[incident] = None
            if replayed.round.decided is not None:
                lost.setdefault(replayed.round.decided, {})[incident] = None
        return tuple(
            RuleChange(
                rule=rule,
                now_matches=tuple(gained.get(rule, {})),
                no_longer_matches=tuple(lost.get(rule, {})),
            )
            for rule in sorted({*gained, *lost})
        )


async def replay(
    rounds: Sequence[Round], playbook: Playbook, config: FleetConfig, collectors: Collectors
) -> ReplayReport:
    """Every round matched again by `playbook` (rounds of endpoints the config no longer has
    are skipped, with why)."""
    replayed: list[Replayed] = []
    skipped: list[str] = []
    for round_ in rounds:
        endpoint = config.endpoints.get(round_.endpoint)
        if endpoint is None:
            skipped.append(
                f"#{round_.incident_id}: endpoint {round_.endpoint!r} is not in the config"
            )
            continue
        missing: set[str] = set()
        matched, _ = await match_rules(
            playbook.rules,
            scopes_of(endpoint, config),
            state=round_.state,
            trigger=round_.probe_result(),
            collectors=collectors,
            gather=stored_gather(round_, missing),
            event=round_.unit_signal(),
        )
        now = matched.rule.id if matched is not None else None
        replayed.append(Replayed(round=round_, now=now, missing=tuple(sorted(missing))))
    return ReplayReport(replayed=tuple(replayed), skipped=tuple(skipped))
