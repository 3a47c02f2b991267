"""Each name means one thing in the runtime: no public class or function (module level) is
defined in two modules of `supervisor/`, except the protocol names below, each with why. A
reader who meets `Verdict` or `judge()` finds one definition, not two that mean different
things (private helpers, `_name`, are their module's own and may repeat)."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "supervisor"

#: names defined in several modules on purpose, and why
EXCEPTIONS = {
    "main": "each CLI command module's entry point (`supervisor.cli` calls `module.main(args)`)",
    "add_parser": "each CLI command module's argparse hook (the `ExtraCommand` protocol)",
    "upgrade": "Alembic's revision protocol: every revision script and the runner's own step",
    "downgrade": "Alembic's revision protocol: every revision script defines it",
}


def definitions(package: Path) -> dict[str, list[str]]:
    """Each public module-level class or function name, with the modules that define it."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        for node in ast.parse(path.read_text(encoding="utf-8")).body:
            defines = (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            if isinstance(node, defines) and not node.name.startswith("_"):
                found[node.name].append(module)
    return found


def twice(found: dict[str, list[str]]) -> list[str]:
    return [
        f"{name}: {', '.join(modules)}"
        for name, modules in sorted(found.items())
        if len(modules) > 1 and name not in EXCEPTIONS
    ]


def test_the_check_finds_a_name_defined_twice(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "a.py").write_text("class Verdict:\n    pass\n\ndef _helper():\n    pass\n")
    (package / "sub" / "b.py").write_text("def Verdict():\n    pass\n\ndef _helper():\n    pass\n")
    (package / "c.py").write_text("def main():\n    pass\n")
    (package / "d.py").write_text("def main():\n    pass\n")
    assert twice(definitions(package)) == ["Verdict: pkg.a, pkg.sub.b"]


def test_no_name_is_defined_twice_in_the_runtime() -> None:
    assert twice(definitions(PACKAGE)) == []


def test_every_exception_is_still_needed() -> None:
    found = definitions(PACKAGE)
    assert [name for name in EXCEPTIONS if len(found.get(name, [])) < 2] == []
