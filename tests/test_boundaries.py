"""No module reaches into another's private names: no `from supervisor.x import _y`, and no
`thing._y` on anything but `self` or `cls` (a module, a daemon, a runner: their private parts
stay theirs; what others need gets a public name). The import contracts themselves (layers,
forbidden imports, no cycles) are `lint-imports`, run by scripts/test.sh."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "supervisor"
#: public API whose name starts with an underscore: namedtuple's, and `os._exit` (documented: an
#: exit without clean-up, for a stop whose leftover tasks will not end, `supervisor.cli.run`)
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make", "_exit"})


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def reach_ins(source: str, module: str) -> list[str]:
    """Every private name of another module or object that `source` (module `module`) uses."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module != module:
            found += [
                f"line {node.lineno}: from {node.module} import {alias.name}"
                for alias in node.names
                if _private(alias.name)
            ]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            receiver = node.value
            if isinstance(receiver, ast.Name) and receiver.id in ("self", "cls"):
                continue
            if node.attr not in PUBLIC_UNDERSCORED:
                found.append(f"line {node.lineno}: {ast.unparse(node)}")
    return found


CASES = [
    pytest.param(
        "from supervisor.runtime.daemon import _current\n",
        ["line 1: from supervisor.runtime.daemon import _current"],
        id="private-import",
    ),
    pytest.param(
        "import supervisor.runtime.daemon as d\nd._current\n",
        ["line 2: d._current"],
        id="module-attr",
    ),
    pytest.param(
        "def f(daemon):\n    return daemon._schedule\n",
        ["line 2: daemon._schedule"],
        id="object-attr",
    ),
    pytest.param("class A:\n    def f(self):\n        return self._x\n", [], id="own-attr"),
    pytest.param("from supervisor.x import _y\n", [], id="own-module"),
    pytest.param("def f(row):\n    return row._replace(a=1)\n", [], id="namedtuple-api"),
    pytest.param("from supervisor.runtime.daemon import Daemon\n", [], id="public-import"),
]


@pytest.mark.parametrize(("source", "expected"), CASES)
def test_the_check_finds_reach_ins(source: str, expected: list[str]) -> None:
    assert reach_ins(source, "supervisor.x") == expected


def test_no_module_reaches_into_another() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        module = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found += [f"{module}: {hit}" for hit in reach_ins(path.read_text(), module)]
    assert found == []
