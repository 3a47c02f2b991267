"""Commands other distributions add to `fleet-supervisor` (entry-point group
`fleet_supervisor.commands`): the lab's `demo` and `lab` when it is installed, one plain line on
how to get them when it is not, and any other distribution's command just the same."""

from __future__ import annotations

from pathlib import Path

import pytest

import fleet_lab.cli
import fleet_lab.demo.cli
from supervisor.cli import main
from supervisor.cli.extra import GROUP, discover

HINT = {
    "demo": "fleet-supervisor: `demo` comes with the lab, which is not installed: "
    "`bash scripts/demo.sh` in a checkout sets it up (or `pip install -e ./lab`)\n",
    "lab": "fleet-supervisor: `lab` comes with the lab, which is not installed: "
    "`bash scripts/setup.sh` in a checkout sets it up (or `pip install -e ./lab`)\n",
}


def _distribution(folder: Path, name: str, entry_points: str, module: str = "") -> Path:
    """A distribution installed in `folder` (its dist-info, and `module`.py if given)."""
    info = folder / f"{name}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(entry_points)
    if module:
        (folder / f"{name}_cmd.py").write_text(module)
    return folder


def test_the_installed_lab_provides_demo_and_lab() -> None:
    assert discover() == {"demo": fleet_lab.demo.cli, "lab": fleet_lab.cli}


def test_a_place_with_no_distribution_provides_no_command(tmp_path: Path) -> None:
    assert discover([str(tmp_path)]) == {}
    other_group = _distribution(tmp_path, "other", "[console_scripts]\nx = other_cmd:main\n")
    assert discover([str(other_group)]) == {}


@pytest.mark.parametrize(
    "argv",
    [
        ["demo"],
        ["demo", "--loopback"],
        ["demo", "--lab", "/var/lib/fleet-lab", "-h"],
        ["lab", "up"],
        ["lab", "drill", "ssh-lost"],
    ],
)
def test_without_the_lab_its_commands_say_in_one_line_how_to_get_it(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv, commands={}) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err == HINT[argv[0]]


def test_without_the_lab_the_help_still_lists_its_commands(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--help"], commands={})
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "    demo         the demo (needs the lab: fleet-lab)\n" in out
    assert "    lab          the fleet lab (needs the lab: fleet-lab)\n" in out


def test_a_command_of_another_distribution_parses_and_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = (
        "def add_parser(sub):\n"
        "    sub.add_parser('hello', help='greets').add_argument('who')\n\n"
        "def main(args):\n"
        "    print(f'hello {args.who}')\n"
        "    return 3\n"
    )
    folder = _distribution(tmp_path, "hello", f"[{GROUP}]\nhello = hello_cmd\n", module=module)
    monkeypatch.syspath_prepend(str(folder))
    commands = discover([str(folder)])
    assert list(commands) == ["hello"]
    assert main(["hello", "world"], commands=commands) == 3
    assert capsys.readouterr().out == "hello world\n"
    # the lab's stand-ins are still there beside it
    assert main(["demo"], commands=commands) == 2
    assert capsys.readouterr().err == HINT["demo"]
