"""Per rule in force that applies to the endpoint: every command its evidence and steps would
run as root is permitted for that host's user, asked of sudo without running it (`sudo -n -l
-- COMMAND...`); a root login may run anything; launchd jobs in the user's own domain need no
sudo (their commands are not needs at all)."""

from __future__ import annotations

from supervisor.config.supervised import Endpoint
from supervisor.trust.doctor.context import DoctorContext
from supervisor.trust.doctor.model import Finding, fail, ok, warn
from supervisor.trust.doctor.registry import Over, check
from supervisor.trust.needs import applies

EVIDENCE_ONLY = "reads a path only evidence names"


@check("rules", over=Over.ENDPOINT, doc="each rule's commands are permitted (sudo -n -l)")
async def rules(ctx: DoctorContext, endpoint: Endpoint) -> list[Finding]:
    found: list[Finding] = []
    for rule in ctx.rules:
        if not applies(rule, endpoint):
            continue
        label = f"rule {rule.id}"
        needs = ctx.needs.for_rule(rule.id, endpoint.name)
        refused: list[str] = []
        unchecked = 0
        for need in needs:
            login = ctx.reached(need.host.name)
            if login is None:
                unchecked += 1
                continue
            allowed = login.root or ctx.permitted.get(need.host.name, {}).get(
                need.shape.example(), False
            )
            if not allowed:
                refused.append(f"`{need.shape.line()}` on {need.host.name}")
        unknown = [
            u
            for u in ctx.needs.unknown
            if u.rule == rule.id and u.endpoint == endpoint.name and EVIDENCE_ONLY in u.why
        ]
        hosts = sorted({need.host.name for need in needs})
        fix = f"install `fleet-supervisor sudoers --host {hosts[0] if hosts else 'H'}` there"
        if refused:
            more = f" (and {len(refused) - 1} more)" if len(refused) > 1 else ""
            found.append(fail(endpoint.name, label, f"may not run {refused[0]}{more}", fix))
        elif unknown:
            found.append(
                warn(
                    endpoint.name,
                    label,
                    f"{unknown[0].what} {unknown[0].why}",
                    "set units[].known_good",
                )
            )
        elif needs and not unchecked:
            found.append(ok(endpoint.name, label, f"may run its {len(needs)} root commands"))
    return found
