"""What the code takes from other people's packages: only their public API, and only from
packages it declares.

- No `._x` (one leading underscore) on an object that comes from a third-party module: a
  name imported from one, or a name or attribute assigned from an expression rooted in one
  (`t = httpx.AsyncHTTPTransport()`, then `t._pool`), or a parameter annotated with one of its
  types; nor `getattr(that, "_x")`, nor `from lib import _x`. In a class derived from a
  third-party class, `self._x` is the base's private unless the class itself defines `_x`.
  Our own privates (`self._x` elsewhere, our modules') are `tests/test_boundaries.py`'s.
- Every third-party top-level module `supervisor/` imports belongs to a distribution that
  pyproject.toml's `[project] dependencies` declares by name (not one that only comes along
  with another)."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from collections.abc import Iterator
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TREES = (ROOT / "supervisor", ROOT / "lab" / "fleet_lab")
PROJECT = frozenset({"supervisor", "fleet_lab", "tests"})
PUBLIC_UNDERSCORED = frozenset({"_replace", "_asdict", "_fields", "_make"})  # namedtuple API
ATTR_FUNCTIONS = frozenset({"getattr", "setattr", "hasattr", "delattr"})

#: a finding that cannot be removed, and why (and pyproject.toml bounds that dependency)
ALLOWED: dict[str, str] = {}


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def third_party(module: str) -> bool:
    top = module.split(".")[0]
    return top not in PROJECT and top not in sys.stdlib_module_names and top != "__future__"


def _chain(node: ast.expr) -> list[str] | None:
    """`a.b(x)[0].c` -> ["a", "a.b", "a.b.c"]: the dotted paths an expression is rooted in
    (calls and subscripts pass through); None when it is not rooted in a name."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Call):
            node = node.func
        elif isinstance(node, ast.Subscript | ast.Starred | ast.Await):
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        else:
            return None
    names = parts[::-1]
    return [".".join(names[: i + 1]) for i in range(len(names))]


def _path(target: ast.expr) -> str | None:
    """The dotted path an assignment target names (`x`, `self._client`), if it is one."""
    names: list[str] = []
    while isinstance(target, ast.Attribute):
        names.append(target.attr)
        target = target.value
    if not isinstance(target, ast.Name):
        return None
    return ".".join([target.id, *names[::-1]])


def _targets(target: ast.expr) -> Iterator[str]:
    if isinstance(target, ast.Tuple | ast.List):
        for element in target.elts:
            yield from _targets(element)
    elif isinstance(target, ast.Starred):
        yield from _targets(target.value)
    elif (path := _path(target)) is not None:
        yield path


class _Module:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.foreign: set[str] = set()  #: dotted paths holding third-party objects
        self.found: list[tuple[int, str]] = []

    def comes_from_outside(self, node: ast.expr) -> bool:
        if isinstance(node, ast.BoolOp):
            return any(self.comes_from_outside(v) for v in node.values)
        if isinstance(node, ast.IfExp):
            return self.comes_from_outside(node.body) or self.comes_from_outside(node.orelse)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):  # `T | None`
            return self.comes_from_outside(node.left) or self.comes_from_outside(node.right)
        if isinstance(node, ast.Constant) and isinstance(node.value, str):  # "T" annotation
            try:
                return self.comes_from_outside(ast.parse(node.value, mode="eval").body)
            except SyntaxError:
                return False
        chain = _chain(node)
        return chain is not None and any(path in self.foreign for path in chain)

    def imports(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    if third_party(alias.name):
                        self.foreign.add(alias.asname or alias.name.split(".")[0])
            elif (
                isinstance(node, ast.ImportFrom)
                and node.level == 0
                and node.module is not None
                and third_party(node.module)
            ):
                for alias in node.names:
                    self.foreign.add(alias.asname or alias.name)
                    if _private(alias.name):
                        self.found.append((node.lineno, f"from {node.module} import {alias.name}"))

    def assignments(self) -> None:
        """Spread `foreign` through assignments and annotations until nothing changes."""
        while True:
            before = len(self.foreign)
            for node in ast.walk(self.tree):
                for target, value in self._bindings(node):
                    if self.comes_from_outside(value):
                        self.foreign.update(_targets(target))
            if len(self.foreign) == before:
                return

    @staticmethod
    def _bindings(node: ast.AST) -> Iterator[tuple[ast.expr, ast.expr]]:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                yield target, node.value
        elif isinstance(node, ast.AnnAssign):
            yield node.target, node.annotation
            if node.value is not None:
                yield node.target, node.value
        elif isinstance(node, ast.NamedExpr):
            yield node.target, node.value
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            yield node.optional_vars, node.context_expr
        elif isinstance(node, ast.For | ast.AsyncFor | ast.comprehension):
            yield node.target, node.iter
        elif isinstance(node, ast.arg) and node.annotation is not None:
            yield ast.Name(id=node.arg), node.annotation

    def reach_ins(self) -> None:
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Attribute) and _private(node.attr):
                if node.attr not in PUBLIC_UNDERSCORED and self.comes_from_outside(node.value):
                    self.found.append((node.lineno, ast.unparse(node)))
            elif (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in ATTR_FUNCTIONS
                and len(node.args) >= 2
                and isinstance(name := node.args[1], ast.Constant)
                and isinstance(name.value, str)
                and _private(name.value)
                and self.comes_from_outside(node.args[0])
            ):
                self.found.append((node.lineno, ast.unparse(node)))
            elif isinstance(node, ast.ClassDef) and any(
                self.comes_from_outside(base) for base in node.bases
            ):
                self._inherited(node)

    def _inherited(self, cls: ast.ClassDef) -> None:
        """In a subclass of a third-party class: `self._x` the class does not define itself,
        and any `super()._x`."""
        own: set[str] = set()
        for node in ast.walk(cls):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                own.add(node.name)
            for target, _value in self._bindings(node):
                for path in _targets(target):
                    own.add(path.split(".")[-1])
        for node in ast.walk(cls):
            if not (isinstance(node, ast.Attribute) and _private(node.attr)):
                continue
            receiver = node.value
            inherited = (
                isinstance(receiver, ast.Name)
                and receiver.id in ("self", "cls")
                and node.attr not in own
            )
            via_super = (
                isinstance(receiver, ast.Call)
                and isinstance(receiver.func, ast.Name)
                and receiver.func.id == "super"
            )
            if inherited or via_super:
                self.found.append((node.lineno, ast.unparse(node)))


def reach_ins(source: str) -> list[str]:
    """Every private part of a third-party object that `source` uses, as `line N: expr`."""
    module = _Module(ast.parse(source))
    module.imports()
    module.assignments()
    module.reach_ins()
    return [f"line {line}: {what}" for line, what in sorted(set(module.found))]


REACH_CASES = [
    pytest.param(
        "import httpx\nt = httpx.AsyncHTTPTransport()\npool = t._pool\npool._network_backend\n",
        ["line 3: t._pool", "line 4: pool._network_backend"],
        id="assigned-from-a-library",
    ),
    pytest.param("import a.b as c\nc._x\n", ["line 2: c._x"], id="module-attr"),
    pytest.param("from lib import _helper\n", ["line 1: from lib import _helper"], id="import"),
    pytest.param(
        "from lib import Conn\ndef f(c: Conn | None):\n    return c._sock\n",
        ["line 3: c._sock"],
        id="annotated-parameter",
    ),
    pytest.param(
        "import lib\nclass A:\n    def __init__(self):\n        self._c = lib.Client()\n"
        "    def f(self):\n        return self._c._pool\n",
        ["line 6: self._c._pool"],
        id="our-attribute-holding-theirs",
    ),
    pytest.param(
        "import lib\ndef f():\n    with lib.open() as h:\n        return getattr(h, '_fd')\n",
        ["line 4: getattr(h, '_fd')"],
        id="getattr",
    ),
    pytest.param(
        "from lib import Base\nclass A(Base):\n    def __init__(self):\n        self._mine = 1\n"
        "    def f(self):\n        return self._mine, self._theirs, super()._x\n",
        ["line 6: self._theirs", "line 6: super()._x"],
        id="subclass",
    ),
    pytest.param(
        "import lib\nclass A:\n    def __init__(self):\n        self._x = 1\n"
        "    def f(self):\n        return self._x\n",
        [],
        id="our-own-private",
    ),
    pytest.param("import os\nos._exit(0)\n", [], id="standard-library"),
    pytest.param("from supervisor.x import y\ny._z\n", [], id="our-module"),
    pytest.param("import lib\nrow = lib.make()\nrow._replace(a=1)\n", [], id="namedtuple-api"),
]


@pytest.mark.parametrize(("source", "expected"), REACH_CASES)
def test_the_walk_finds_reach_ins_into_libraries(source: str, expected: list[str]) -> None:
    assert reach_ins(source) == expected


def test_no_code_reaches_into_a_librarys_private_parts() -> None:
    found = [
        f"{path.relative_to(ROOT)}: {hit}"
        for tree in TREES
        for path in sorted(tree.rglob("*.py"))
        for hit in reach_ins(path.read_text())
    ]
    assert [hit for hit in found if hit not in ALLOWED] == []
    assert sorted(set(ALLOWED) - set(found)) == []  # an entry that no longer applies goes


def imported(source: str) -> set[str]:
    """The third-party top-level modules `source` imports (wherever: a lazy import counts)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module is not None:
            names.add(node.module)
    return {name.split(".")[0] for name in names if third_party(name)}


IMPORT_CASES = [
    pytest.param("import httpx\nimport os\n", {"httpx"}, id="plain"),
    pytest.param("from telegram.error import Conflict\n", {"telegram"}, id="from"),
    pytest.param("def f():\n    import asyncpg\n", {"asyncpg"}, id="lazy"),
    pytest.param("from . import x\nfrom supervisor.core import y\n", set(), id="ours"),
    pytest.param("from __future__ import annotations\nimport json\n", set(), id="stdlib"),
]


@pytest.mark.parametrize(("source", "expected"), IMPORT_CASES)
def test_the_walk_finds_third_party_imports(source: str, expected: set[str]) -> None:
    assert imported(source) == expected


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    names = (re.match(r"[A-Za-z0-9._-]+", spec) for spec in project["dependencies"])
    return {_normal(name.group()) for name in names if name is not None}


def test_every_library_the_runtime_imports_is_declared() -> None:
    distributions = packages_distributions()
    modules = sorted(
        set().union(*(imported(p.read_text()) for p in (ROOT / "supervisor").rglob("*.py")))
    )
    undeclared = {
        module: sorted(distributions.get(module, ["(not installed)"]))
        for module in modules
        if not declared() & {_normal(d) for d in distributions.get(module, [])}
    }
    assert undeclared == {}
