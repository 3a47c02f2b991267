"""The control commands: `silence`, `unsilence`, `pause`, `resume`, `ack`, `restart` and
`silences`. They reach the running daemon through its HTTP control endpoint on loopback (the
config's `http.listen`) and print its answer; when no daemon answers they say so. Exit codes: 0
done, 1 refused (already silenced, a repair runs), 2 could not run (no daemon, unknown endpoint,
a bad argument)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from datetime import datetime, timedelta
from typing import Any

from supervisor.cli.common import CliError, load
from supervisor.config.models import FleetConfig
from supervisor.control.door import SCHEME, read_token
from supervisor.control.routes import VIA_HEADER, WHO_HEADER
from supervisor.core.durations import format_duration
from supervisor.core.httpclient import HttpClient, HttpError, WholeReply, failure_reason
from supervisor.core.timefmt import stamp
from supervisor.tell.web.listen import ListenError, parse_listen

TIMEOUT = timedelta(seconds=30)
"""How long a control call may take (a restart answers once its units restarted)."""

COMMANDS = ("silence", "unsilence", "pause", "resume", "ack", "restart", "silences")


def add_parsers(sub: Any) -> None:
    """The control commands, on the CLI's subparsers."""
    p = sub.add_parser("silence", help="maintenance for endpoints (NAME, GLOB, host:H or all)")
    p.add_argument("target", metavar="NAME|GLOB|host:H|all")
    when = p.add_mutually_exclusive_group(required=True)
    when.add_argument("--for", dest="length", metavar="DURATION", help="e.g. 2h")
    when.add_argument(
        "--until", metavar="TIME", help="ISO-8601 with a zone, e.g. 2026-01-31T18:00Z"
    )
    p.add_argument("--why", default="", metavar="TEXT")
    p = sub.add_parser("unsilence", help="end the silences covering endpoints")
    p.add_argument("target", metavar="NAME|GLOB|host:H|all")
    p.add_argument("--why", default="", metavar="TEXT")
    for name, verb in (("pause", "pause"), ("resume", "resume")):
        p = sub.add_parser(name, help=f"{verb} automatic repair (fleet-wide, or one endpoint)")
        p.add_argument("endpoint", nargs="?", metavar="NAME")
        p.add_argument("--why", default="", metavar="TEXT")
    p = sub.add_parser("ack", help="stop the reminders of an escalated incident")
    p.add_argument("id", type=int)
    p.add_argument("--why", default="", metavar="TEXT")
    p = sub.add_parser("restart", help="restart an endpoint through the guarded repair path")
    p.add_argument("name")
    p.add_argument("--why", default="", metavar="TEXT")
    p = sub.add_parser("silences", help="the silences and pauses in force")
    p.add_argument("--json", action="store_true")


def _body(args: argparse.Namespace) -> tuple[str, dict[str, Any]]:
    command = args.command
    why = {"why": args.why} if getattr(args, "why", "") else {}
    if command == "silence":
        when = {"for": args.length} if args.length is not None else {"until": args.until}
        return command, {"target": args.target, **when, **why}
    if command == "unsilence":
        return command, {"target": args.target, **why}
    if command in ("pause", "resume"):
        endpoint = {"endpoint": args.endpoint} if args.endpoint else {}
        return command, {**endpoint, **why}
    if command == "ack":
        return command, {"incident": args.id, **why}
    return command, {"endpoint": args.name, **why}


def base_url(config: FleetConfig) -> str:
    """Where the daemon of `config` answers: its `http.listen`, a wildcard read as loopback."""
    if not config.http.enabled:
        raise CliError(
            f"no daemon to ask: http is disabled in {config.source} (http.enabled: false); "
            "the control commands reach the daemon through it"
        )
    try:
        host, port = parse_listen(config.http.listen)
    except ListenError as exc:
        raise CliError(str(exc)) from None
    host = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)  # noqa: S104
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def call(config: FleetConfig, method: str, path: str, body: dict[str, Any] | None) -> Any:
    """The daemon's JSON answer (status, document); CliError when no daemon answers."""
    url = base_url(config)
    headers = {WHO_HEADER: _who(), VIA_HEADER: "cli", **_token(config)}
    try:
        response = asyncio.run(_ask(method, f"{url}{path}", body, headers))
    except (HttpError, TimeoutError) as exc:
        why = (
            failure_reason(exc)
            if isinstance(exc, HttpError)
            else f"timed out after {format_duration(TIMEOUT)}"
        )
        raise CliError(
            f"no daemon answers on {url} ({why}): is `fleet-supervisor run` "
            f"running with {config.source}?"
        ) from None
    try:
        return response.status_code, response.json()
    except ValueError:
        raise CliError(
            f"{url}{path}: HTTP {response.status_code}: {response.text.strip()}"
        ) from None


async def _ask(
    method: str, url: str, body: dict[str, Any] | None, headers: dict[str, str]
) -> WholeReply:
    """The daemon's answer, within TIMEOUT (the URL is plain HTTP: the shared TLS context is
    never read)."""
    async with asyncio.timeout(TIMEOUT.total_seconds()), HttpClient() as http:
        if method == "GET":
            return await http.get(url, headers=headers)
        return await http.post(url, json=body, headers=headers)


def _token(config: FleetConfig) -> dict[str, str]:
    """The Authorization header naming `http.control_token_file`'s token (none: no header)."""
    path = config.http.control_token_file
    if path is None:
        return {}
    try:
        token = read_token(path).decode("utf-8", "replace")
    except OSError as exc:
        raise CliError(
            f"cannot read http.control_token_file {path}: {exc.strerror or exc} (it is readable"
            " by the service's group: add yourself to it, e.g. `sudo usermod -aG"
            " fleet-supervisor $USER`, or run as root)"
        ) from None
    return {"Authorization": f"{SCHEME}{token}"}


def _who() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "someone"


def main(args: argparse.Namespace) -> int:
    config = load(args)
    if args.command == "silences":
        status, document = call(config, "GET", "/control/silences", None)
        if status != 200:  # a follower names the leader
            print(f"fleet-supervisor: {document.get('text', '')}", file=sys.stderr)
            return 2
        if args.json:
            print(json.dumps(document, indent=2))
        else:
            print("\n".join(listing_lines(document)))
        return 0
    command, body = _body(args)
    status, document = call(config, "POST", f"/control/{command}", body)
    text = str(document.get("text", ""))
    if status == 200:
        print(text)
        return 0
    print(f"fleet-supervisor: {text}", file=sys.stderr)
    return 1 if status == 409 else 2


def listing_lines(document: dict[str, Any]) -> list[str]:
    lines = []
    for s in document.get("silences", []):
        why = f": {s['why']}" if s["why"] else ""
        until = _stamp(s["until"])
        lines.append(f"silence #{s['id']} {s['target']} until {until} by {s['who']}{why}")
    for p in document.get("pauses", []):
        scope = "fleet-wide" if p["scope"] == "*" else p["scope"]
        why = f": {p['why']}" if p["why"] else ""
        lines.append(f"paused {scope} since {_stamp(p['at'])} by {p['who']}{why}")
    return lines or ["no silences, no pauses"]


def _stamp(text: str) -> str:
    """A time of the daemon's JSON as the docs write it (`2026-01-31T18:00:00Z`)."""
    try:
        return stamp(datetime.fromisoformat(text))
    except (TypeError, ValueError):
        return str(text)
