"""Two distributions from one checkout: the runtime (`fleet-supervisor`, package `supervisor`) and
the lab (`fleet-lab`, package `fleet_lab` in lab/). The runtime's wheel holds no lab code, and
nothing in the runtime imports the lab: the lab depends on the runtime, never the reverse."""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUNTIME = ROOT / "supervisor"


def _imported(path: Path) -> set[str]:
    """Every module `path` imports (absolute names; the runtime uses no relative imports)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            names.add(node.module or "")
    return names


def test_no_runtime_module_imports_the_lab() -> None:
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in sorted(RUNTIME.rglob("*.py"))
        for name in _imported(path)
        if name == "fleet_lab" or name.startswith("fleet_lab.")
    }
    assert offenders == set()


def test_importing_every_runtime_module_loads_no_lab_module() -> None:
    code = (
        "import pkgutil, sys, supervisor\n"
        "for m in pkgutil.walk_packages(supervisor.__path__, 'supervisor.'):\n"
        "    if m.name != 'supervisor.__main__':\n"
        "        __import__(m.name)\n"
        "print(sorted(n for n in sys.modules if n.split('.')[0] == 'fleet_lab'))\n"
        "print(len([n for n in sys.modules if n.startswith('supervisor.')]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=False, cwd=ROOT
    )
    assert result.returncode == 0, result.stderr
    lab, count = result.stdout.splitlines()
    assert lab == "[]"
    assert int(count) > 50  # it did import the runtime


def _wheel(source: Path, out: Path) -> zipfile.ZipFile:
    """`pip wheel` of `source`, offline: no dependencies, no build isolation."""
    result = subprocess.run(
        [
            *(sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"),
            *("--no-build-isolation", "--no-index", "--wheel-dir", str(out), str(source)),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    (wheel,) = out.glob("*.whl")
    return zipfile.ZipFile(wheel)


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of what the two project files build from (pip leaves no build/ in this checkout)."""
    copy = tmp_path_factory.mktemp("checkout")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("supervisor", "lab"):
        shutil.copytree(ROOT / name, copy / name, ignore=ignore)
    return copy


@pytest.mark.slow
def test_the_runtime_wheel_holds_the_runtime_only(checkout: Path, tmp_path: Path) -> None:
    with _wheel(checkout, tmp_path) as wheel:
        names = wheel.namelist()
        tops = {name.split("/")[0] for name in names}
        entry_points = wheel.read("fleet_supervisor-0.1.0.dist-info/entry_points.txt").decode()
    assert tops == {"supervisor", "fleet_supervisor-0.1.0.dist-info"}
    assert [name for name in names if "lab" in name.split("/")] == []
    assert "supervisor/py.typed" in names
    page = Path(__file__).resolve().parents[1] / "supervisor" / "tell" / "web" / "page"
    files = [*page.glob("templates/*.html"), *page.glob("static/*")]
    served = {f"supervisor/tell/web/page/{p.relative_to(page)}" for p in files}
    assert served <= set(names)  # the fleet page's templates, script and stylesheet
    assert entry_points == "[console_scripts]\nfleet-supervisor = supervisor.cli:main\n"


@pytest.mark.slow
def test_the_lab_wheel_holds_the_lab_and_registers_its_commands(
    checkout: Path, tmp_path: Path
) -> None:
    with _wheel(checkout / "lab", tmp_path) as wheel:
        tops = {name.split("/")[0] for name in wheel.namelist()}
        info = "fleet_lab-0.1.0.dist-info"
        entry_points = wheel.read(f"{info}/entry_points.txt").decode()
        requires = [
            line
            for line in wheel.read(f"{info}/METADATA").decode().splitlines()
            if line.startswith("Requires-Dist:")
        ]
        typed = "fleet_lab/py.typed" in wheel.namelist()
    assert tops == {"fleet_lab", info}
    assert typed
    assert requires == ["Requires-Dist: fleet-supervisor"]
    assert entry_points == (
        "[fleet_supervisor.commands]\ndemo = fleet_lab.demo.cli\nlab = fleet_lab.cli\n"
    )
