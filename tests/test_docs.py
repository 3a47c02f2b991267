"""The README is a short front door and `docs/` holds the reference: every link between them
resolves, and every path of this repository the docs name exists, so a file moved or renamed
shows up here instead of in a reader's dead end."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from supervisor.cli import parse_args
from supervisor.record.timeline.base import REGISTRY

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
DOCS = REPO / "docs"
#: the reference topics, one file each (config-table.md is generated and read by config.md)
TOPICS = sorted(p for p in DOCS.glob("*.md") if p.name != "config-table.md")
MAPS = (DOCS / "ARCHITECTURE.md", DOCS / "HOSTEVENTS.md")
#: where a short path of the maps may be rooted (`judge/policy.py`, `fleet_lab/mac/`)
ROOTS = (REPO, REPO / "supervisor", REPO / "lab", REPO / "lab" / "fleet_lab")
TOP = ("supervisor/", "lab/", "tests/", "bench/", "deploy/", "playbooks/", "runbooks/", "scripts/")
#: files the docs show as examples of what a command writes, not files of this repository
WRITTEN_BY_EXAMPLES = {
    "playbooks/ds4-incident-12.yaml",
    "playbooks/tests/ds4-incident-12.yaml",
    "runbooks/ds4-incident-12.md",
}
LINK = re.compile(r"\]\(([^)\s]+)\)")
CODE = re.compile(r"`([^`\s]+)`")


def slug(heading: str) -> str:
    """A heading's anchor as GitHub makes it."""
    text = heading.strip().lower().replace("`", "")
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, fenced = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and line.startswith("#"):
            found.add(slug(line.lstrip("#")))
    return found


def in_repo(token: str) -> bool:
    token = token.split("::")[0].rstrip("/")
    return any(next(root.glob(token), None) is not None for root in ROOTS)


def test_the_readme_is_a_front_door_under_15_kb_with_its_contents() -> None:
    text = README.read_text()
    assert len(text.encode()) < 15_000
    contents = next(line for line in text.splitlines() if line.startswith("**Contents:**"))
    contents += text.split(contents, 1)[1].split("\n\n", 1)[0]
    headings = [line[3:] for line in text.splitlines() if line.startswith("## ")]
    assert [f"(#{slug(h)})" in contents for h in headings] == [True] * len(headings), headings


def test_the_readme_links_every_reference_topic() -> None:
    text = README.read_text()
    assert [p.name for p in TOPICS if f"](docs/{p.name}" not in text] == []


def test_every_relative_link_of_the_readme_and_docs_resolves_to_a_file_and_heading() -> None:
    broken = []
    for page in (README, *TOPICS):
        for target in LINK.findall(page.read_text()):
            if target.startswith(("http://", "https://")):
                continue
            name, _, anchor = target.partition("#")
            path = (page.parent / name).resolve() if name else page
            if not path.exists():
                broken.append(f"{page.name}: {target}: no such file")
            elif anchor and path.suffix == ".md" and anchor not in anchors(path):
                broken.append(f"{page.name}: {target}: no such heading")
    assert broken == []


def test_every_path_the_architecture_names_exists() -> None:
    missing = []
    for page in MAPS:
        for token in CODE.findall(page.read_text()):
            if token.startswith(("/", "~", "$", "http")) or "=" in token or "://" in token:
                continue
            named = "/" in token or re.search(r"\.(py|md|sh|toml|yaml|json)$", token)
            if named and not in_repo(token):
                missing.append(f"{page.name}: {token}")
    assert missing == []


def test_every_repository_path_the_readme_and_docs_name_exists() -> None:
    missing = []
    for page in (README, *TOPICS):
        for token in CODE.findall(page.read_text()):
            path = token.split("::")[0]
            if not path.startswith(TOP) or path in WRITTEN_BY_EXAMPLES:
                continue
            if next(REPO.glob(path.rstrip("/")), None) is None:
                missing.append(f"{page.name}: {token}")
    assert missing == []


def test_the_event_types_table_names_every_record_type() -> None:
    text = (DOCS / "ARCHITECTURE.md").read_text()
    table = text.split("| Tag | Kind | Fields | Written when |", 1)[1].split("\n\n", 1)[0]
    assert [tag for tag in REGISTRY if f"`{tag}`" not in table] == []


def test_the_readme_commands_table_has_a_row_for_every_command(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit):
        parse_args(["--help"])
    listing = capsys.readouterr().out.split("  COMMAND\n", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^    (\S+)", listing, flags=re.MULTILINE)
    table = README.read_text().split("| Command | What it does | Exit code |", 1)[1]
    rows = table.split("\n\n", 1)[0].splitlines()[2:]
    named = {word for row in rows for word in re.findall(r"`([\w-]+)", row.split(" | ")[0])}
    assert len(commands) >= 20
    assert [command for command in commands if command not in named] == []
