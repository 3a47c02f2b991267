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


#: packages whose `__init__` is their one public door: the parts are private modules (`_x.py`,
#: composed by the package's main class), and the `__init__` names what the rest may use
FACADES = {
    "supervisor.control": "ControlApi composes the desk, pauses and silences (private parts)",
    "supervisor.repair": "Remediator composes automatic repairs, notes and tasks (private parts)",
    "supervisor.runtime": "Daemon composes the schedule, restore and reconcile (private parts)",
    "supervisor.worker": "EndpointWorker composes its queue, probing and record (private parts)",
    "supervisor.tell.telegram.bot": "the bot's commands and their shared App (private parts)",
}


def reexporters(package: Path) -> dict[str, list[str]]:
    """Each module that only re-exports (imports and `__all__`, nothing of its own), with the
    modules it imports names from."""
    found: dict[str, list[str]] = {}
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        if module.endswith(".__init__"):
            module = module.removesuffix(".__init__")
        body = ast.parse(path.read_text(encoding="utf-8")).body
        sources: list[str] = []
        own = False
        for node in body:
            if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
                continue  # the docstring
            if isinstance(node, ast.ImportFrom) and node.module:
                if node.module != "__future__":
                    sources.append(node.module)
                continue
            if isinstance(node, ast.Import):
                continue
            targets = node.targets if isinstance(node, ast.Assign) else []
            if [t for t in targets if isinstance(t, ast.Name) and t.id == "__all__"]:
                continue
            own = True
        if sources and not own:
            found[module] = sources
    return found


def re_exported_wrongly(found: dict[str, list[str]]) -> list[str]:
    """A module that only re-exports, unless it is a listed facade naming its own private parts."""
    wrong = []
    for module, sources in sorted(found.items()):
        private = all(s.startswith(module + "._") for s in sources)
        if module not in FACADES or not private:
            wrong.append(f"{module}: re-exports from {', '.join(sorted(set(sources)))}")
    return wrong


def test_the_check_finds_a_module_that_only_re_exports(tmp_path: Path) -> None:
    package = tmp_path / "pkg"
    (package / "sub").mkdir(parents=True)
    (package / "sub" / "__init__.py").write_text(
        '"""Doc."""\nfrom pkg.sub.model import Verdict\n\n__all__ = ["Verdict"]\n'
    )
    (package / "sub" / "model.py").write_text("class Verdict:\n    pass\n")
    (package / "own.py").write_text("from pkg.sub.model import Verdict\n\nX = Verdict()\n")
    assert re_exported_wrongly(reexporters(package)) == ["pkg.sub: re-exports from pkg.sub.model"]


def test_no_module_only_re_exports_except_the_facades() -> None:
    assert re_exported_wrongly(reexporters(PACKAGE)) == []


def test_every_facade_is_still_one() -> None:
    found = reexporters(PACKAGE)
    assert [name for name in FACADES if name not in found] == []
