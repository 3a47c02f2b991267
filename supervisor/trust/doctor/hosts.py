"""Host checks: the SSH login, the service manager, the journal the event streams follow, the
clock, the installed sudoers file and the root-owned helpers."""

from __future__ import annotations

import hashlib
import re
import time

from supervisor.config.supervised import Host
from supervisor.execute.helpers import SOURCES
from supervisor.hear.streams.journal import head_argv
from supervisor.trust.doctor.context import DoctorContext, Login
from supervisor.trust.doctor.model import Finding, fail, ok, warn
from supervisor.trust.doctor.registry import Over, check
from supervisor.trust.needs import STREAMS
from supervisor.trust.sudoers import commands_for, sudo_user

#: journalctl --since reads 30 s before the last passing check: a larger offset loses lines
CLOCK_FAIL_S = 30.0
CLOCK_WARN_S = 2.0
_GRANT = re.compile(r"^\s+\([^)]*\)\s+(?:NOPASSWD:\s+)?(.+)$")


def _login_fix(host: Host) -> str:
    user = host.user or "(your user)"
    key = f" -i {host.key}" if host.key else ""
    where = f"{user}@{host.address or host.name}"
    return (
        f"try `ssh{key} -p {host.port} {where} true`; "
        f"check hosts.{host.name}.user, key and known_hosts"
    )


@check("ssh", over=Over.HOST, doc="the SSH login (user, key, known_hosts): the exact error")
async def ssh(ctx: DoctorContext, login: Login) -> list[Finding]:
    host = login.host
    if host.local:
        return [ok(host.name, "ssh", f"this box (local: true): {login.system or 'no SSH'}")]
    if not login.ok:
        return [fail(host.name, "ssh", login.error, _login_fix(host))]
    who = host.user or "(the SSH client's user)"
    return [ok(host.name, "ssh", f"logged in as {who}: {login.system}")]


@check("manager", over=Over.HOST, doc="the service manager and its version")
async def manager(ctx: DoctorContext, login: Login) -> list[Finding]:
    host = login.host
    argv = (
        ["launchctl", "version"]
        if host.service_manager == "launchd"
        else ["systemctl", "--version"]
    )
    result = await ctx.run(host, argv)
    first = next((line for line in result.stdout.splitlines() if line.strip()), "").strip()
    if not result.ok or not first:
        said = (
            result.error
            or (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[0]
        )
        return [
            fail(
                host.name,
                "manager",
                f"{' '.join(argv)}: {said}",
                f"is {host.name} managed by {host.service_manager}? "
                f"set hosts.{host.name}.service_manager",
            )
        ]
    return [ok(host.name, "manager", f"{host.service_manager}: {first}")]


def _units_on(ctx: DoctorContext, host: Host) -> list[str]:
    return sorted(
        {u.unit for e in ctx.config.endpoints.values() for u in e.units if u.host == host.name}
    )


@check("journal", over=Over.HOST, doc="the user can follow the units' journal (event streams)")
async def check_journal(ctx: DoctorContext, login: Login) -> list[Finding]:
    host = login.host
    units = _units_on(ctx, host)
    if host.service_manager != "systemd" or not units:
        return []
    result = await ctx.run(host, head_argv(), sudo=True)
    fix = f"install `fleet-supervisor sudoers --host {host.name}` there (the journal is root's)"
    if not result.ok:
        said = (
            result.error
            or (result.stderr.strip().splitlines() or [f"exit {result.exit_status}"])[0]
        )
        return [fail(host.name, "journal", f"sudo journalctl: {said}", fix)]
    allowed = ctx.permitted.get(host.name, {})
    streams = [n for n in ctx.needs.on(host.name) if n.who == STREAMS]
    refused = [n for n in streams if not allowed.get(n.shape.example(), login.root)]
    if refused:
        return [
            fail(host.name, "journal", f"may not follow the journal of {', '.join(units)}", fix)
        ]
    return [ok(host.name, "journal", f"follows the journal of {', '.join(units)}")]


def _epoch(text: str) -> float | None:
    word = text.strip().replace("N", "")  # BSD date has no %N: `1764000000.N`
    try:
        return float(word.rstrip("."))
    except ValueError:
        return None


@check("clock", over=Over.HOST, doc="the clock's offset from this box")
async def clock(ctx: DoctorContext, login: Login) -> list[Finding]:
    host = login.host
    if host.local:
        return []
    before = time.time()
    result = await ctx.run(host, ["date", "+%s.%N"])
    after = time.time()
    remote = _epoch(result.stdout) if result.ok else None
    if remote is None:
        said = result.error or f"unreadable date: {result.stdout.strip()!r}"
        return [warn(host.name, "clock", said, "check `date` there")]
    offset = remote - (before + after) / 2
    shown = f"{offset:+.2f}s from this box (±{(after - before) / 2:.2f}s)"
    fix = f"run NTP on {host.name} and here (timedatectl set-ntp true)"
    if abs(offset) > CLOCK_FAIL_S:
        return [fail(host.name, "clock", f"{shown}: journal windows miss lines", fix)]
    if abs(offset) > CLOCK_WARN_S:
        return [warn(host.name, "clock", shown, fix)]
    return [ok(host.name, "clock", shown)]


def parse_sudo_list(text: str) -> set[str]:
    """The commands `sudo -n -l` lists for the user (one per line, as sudoers wrote them)."""
    found: set[str] = set()
    listing = False
    for line in text.splitlines():
        if "may run the following commands" in line:
            listing = True
            continue
        match = _GRANT.match(line) if listing else None
        if match is not None:
            found.update(part.strip() for part in re.split(r"(?<!\\), ", match[1]))
    return found


@check("sudoers", over=Over.HOST, doc="the installed sudoers and helpers match the rules")
async def sudoers(ctx: DoctorContext, login: Login) -> list[Finding]:
    host = login.host
    if login.root or host.service_manager != "systemd":
        return []
    wanted = commands_for(ctx.needs, host)
    found: list[Finding] = []
    fix = (
        f"install `fleet-supervisor sudoers --host {host.name}` (deploy/install.sh --sudoers FILE)"
    )
    if wanted:
        listing = await ctx.run(host, ["sudo", "-n", "-l"])
        granted = parse_sudo_list(listing.stdout) if listing.ok else set()
        missing, extra = wanted - granted, granted - wanted
        user = sudo_user(host)
        if missing:
            found.append(
                fail(
                    host.name,
                    "sudoers",
                    f"{user} lacks {len(missing)} of the {len(wanted)} commands the rules need",
                    fix,
                )
            )
        elif extra:
            found.append(
                warn(
                    host.name,
                    "sudoers",
                    f"{user} may run {len(extra)} commands no rule needs (e.g. {sorted(extra)[0]})",
                    fix,
                )
            )
        else:
            found.append(
                ok(
                    host.name,
                    "sudoers",
                    f"{user} may run exactly the {len(wanted)} commands the rules need",
                )
            )
    programs = {need.shape.program for need in ctx.needs.on(host.name)}
    for helper, source in SOURCES.items():
        if helper not in programs:
            continue
        digest = hashlib.sha256(source.read_bytes()).hexdigest()
        result = await ctx.run(host, ["sha256sum", helper])
        have = result.stdout.split()[0] if result.ok and result.stdout.split() else ""
        label = f"helper {helper.rsplit('/', 1)[1]}"
        if have != digest:
            why = "missing" if not have else "differs from this version's"
            found.append(fail(host.name, label, f"{helper} {why}", fix))
        else:
            found.append(ok(host.name, label, f"{helper} is this version's"))
    return found
