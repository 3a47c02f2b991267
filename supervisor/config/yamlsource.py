"""YAML text to plain Python data, keeping the line of every key and value.

PyYAML's safe loader builds the data; the composed node tree, walked beside it, gives each
document path (`('endpoints', 'ds4', 'units', 0)`) the 1-based line of its key and its value.
Duplicate keys, which PyYAML silently lets win, are reported. Nothing here raises anything but
`ConfigError`, whatever the text.

The text is parsed by LibYAML (PyYAML's C parser, about 8 times faster: a daemon, a CLI command
and a reload each read the config and every rule file) where PyYAML has it; a text it refuses
is parsed again by PyYAML's own parser, whose error (its words, its line) is the one reported.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache

import yaml
from yaml.constructor import ConstructorError, SafeConstructor
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from supervisor.config.errors import ConfigError, ConfigIssue, Loc, format_path

_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_MAX_INT_DIGITS = 4000  # Python refuses to convert longer digit strings (sys.int_info)
_MAX_NODES = 50_000  # enough for any fleet; stops alias bombs from walking forever
_MAX_DEPTH = 32  # deeper values (only reachable through alias loops) keep their parent's line
#: Deeper is refused, whichever parser read it (PyYAML's own recurses, and runs out of stack a few
#: hundred levels down; LibYAML does not): a fleet's files are a handful of levels deep.
_MAX_NESTING = 100
_TOO_DEEP = "YAML syntax error: the document is nested too deeply"


@dataclass(frozen=True)
class LineMap:
    """The 1-based line of each value and each mapping key, by document path."""

    values: Mapping[Loc, int] = field(default_factory=dict)
    keys: Mapping[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Loc) -> int | None:
        """The value's line; for a value that is not there, the line of what should hold it."""
        if loc in self.values:
            return self.values[loc]
        return self.owner_line(loc[:-1]) if loc else None

    def key_line(self, loc: Loc) -> int | None:
        """The line of the key that names `loc` (its value's line for list items)."""
        return self.keys.get(loc) or self.line_of(loc)

    def owner_line(self, loc: Loc) -> int | None:
        """The line that introduces `loc` (its key), or of its nearest present ancestor."""
        while True:
            if loc in self.keys:
                return self.keys[loc]
            if loc in self.values:
                return self.values[loc]
            if not loc:
                return None
            loc = loc[:-1]


@dataclass(frozen=True)
class YamlDocument:
    """Parsed data (None for an empty file), where each part came from, and duplicate keys."""

    data: object
    lines: LineMap
    issues: tuple[ConfigIssue, ...] = ()


def parse_yaml(text: str, file: str) -> YamlDocument:
    """Parse one YAML document; raises `ConfigError` for anything that is not valid YAML."""
    try:
        return _parse(text, file)
    except yaml.MarkedYAMLError as exc:
        raise ConfigError([_marked_issue(exc, file)]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1])
        reason = f"unacceptable character #x{code:04x}: {exc.reason}"
        raise ConfigError([ConfigIssue(file, line, "", f"YAML syntax error: {reason}")]) from None
    except RecursionError:
        raise ConfigError([ConfigIssue(file, None, "", _TOO_DEEP)]) from None
    except (yaml.YAMLError, ValueError, TypeError, OverflowError) as exc:
        message = f"YAML error: {_one_line(str(exc))}"
        raise ConfigError([ConfigIssue(file, None, "", message)]) from None


class _Loader(yaml.SafeLoader):
    """SafeLoader with YAML 1.2 booleans: only true/false (any case). YAML 1.1 also reads `on`,
    `off`, `yes`, `no`, `y`, `n` as booleans, which would turn a rule's `on: hosts` key into
    `True`; here they stay text."""


_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in resolvers if tag != "tag:yaml.org,2002:bool"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool",
    re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"),
    list("tTfF"),
)


@cache
def _fast_loader() -> type[yaml.CSafeLoader] | None:
    """`_Loader`'s resolvers on LibYAML's parser; None where PyYAML was built without it."""
    base: type[yaml.CSafeLoader] | None = getattr(yaml, "CSafeLoader", None)
    if base is None:
        return None
    return type("_CLoader", (base,), {"yaml_implicit_resolvers": _Loader.yaml_implicit_resolvers})


#: The exceptions after which the text is parsed again by PyYAML's own parser: LibYAML's errors,
#: a text that cannot be UTF-8 (a lone surrogate), and what building the data may raise.
_RETRY = (yaml.YAMLError, ValueError, TypeError, OverflowError, RecursionError)


def _parse(text: str, file: str) -> YamlDocument:
    fast = _fast_loader()
    if fast is not None:
        try:
            return _load(fast(text), file)
        except _RETRY:
            pass
    return _load(_Loader(text), file)


def _load(loader: _Loader | yaml.CSafeLoader, file: str) -> YamlDocument:
    try:
        node = loader.get_single_node()
        if node is None:
            return YamlDocument(data=None, lines=LineMap())
        fatal, duplicates = _check_nodes(node, file)
        if fatal:
            raise ConfigError(fatal)
        data = loader.construct_document(node)
        return YamlDocument(data=data, lines=_map_lines(node), issues=tuple(duplicates))
    finally:
        loader.dispose()


def _marked_issue(exc: yaml.MarkedYAMLError, file: str) -> ConfigIssue:
    mark = exc.problem_mark or exc.context_mark
    problem = exc.problem or exc.context or "not valid YAML"
    if exc.context and problem.startswith("but "):
        problem = f"{exc.context}, {problem}"
    if "'\\t'" in problem:
        problem += " (indent with spaces, not tabs)"
    label = "YAML error" if isinstance(exc, ConstructorError) else "YAML syntax error"
    line = mark.line + 1 if mark is not None else None
    return ConfigIssue(file, line, "", f"{label}: {_one_line(problem)}")


def _one_line(text: str) -> str:
    return " ".join(text.split())


_NO_KEY = object()  # a mapping key that is not a scalar (the loader rejects those itself)


def _key_of(node: Node) -> object:
    """The Python value of a scalar mapping key as the safe loader builds it, else `_NO_KEY`."""
    if not isinstance(node, ScalarNode):
        return _NO_KEY
    try:
        key: object = SafeConstructor().construct_object(node)
        hash(key)
    except (yaml.YAMLError, ValueError, TypeError, OverflowError):
        return str(node.value)
    return key


def _children(loc: Loc, node: Node) -> Iterator[tuple[Loc, Node, Node | None]]:
    """(path, value node, key node or None) for each child of a mapping or sequence."""
    if isinstance(node, MappingNode):
        for key_node, value_node in node.value:
            if key_node.tag == _MERGE_TAG:
                yield loc, value_node, None  # merged in: its keys belong to this mapping
                continue
            key = _key_of(key_node)
            if key is not _NO_KEY:
                yield (*loc, key), value_node, key_node
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            yield (*loc, index), item, None


def _check_nodes(root: Node, file: str) -> tuple[list[ConfigIssue], list[ConfigIssue]]:
    """Duplicate keys, integers too long to convert and nesting too deep, before the loader
    builds anything."""
    fatal: list[ConfigIssue] = []  # the loader could not even build the data
    duplicates: list[ConfigIssue] = []
    seen_nodes: set[int] = set()
    stack: list[tuple[Loc, Node]] = [((), root)]
    while stack:
        loc, node = stack.pop()
        if id(node) in seen_nodes:
            continue
        seen_nodes.add(id(node))
        if len(loc) > _MAX_NESTING:
            return [ConfigIssue(file, None, "", _TOO_DEEP)], []
        if isinstance(node, ScalarNode) and node.tag == _INT_TAG:
            if len(node.value) > _MAX_INT_DIGITS:
                line = node.start_mark.line + 1
                message = f"YAML error: a number with more than {_MAX_INT_DIGITS} digits"
                fatal.append(ConfigIssue(file, line, "", message))
            continue
        first_lines: dict[object, int] = {}
        for child_loc, child, key_node in _children(loc, node):
            if key_node is not None:
                line = key_node.start_mark.line + 1
                key = child_loc[-1]
                if key in first_lines:
                    message = f"duplicate key (first at line {first_lines[key]})"
                    duplicates.append(ConfigIssue(file, line, format_path(child_loc), message))
                else:
                    first_lines[key] = line
            stack.append((child_loc, child))
    return fatal, duplicates


def _map_lines(root: Node) -> LineMap:
    """Walk the (merge-flattened) node tree; later duplicate keys win, as in the data."""
    values: dict[Loc, int] = {(): root.start_mark.line + 1}
    keys: dict[Loc, int] = {}
    stack: list[tuple[Loc, Node]] = [((), root)]
    budget = _MAX_NODES
    while stack and budget > 0:
        loc, node = stack.pop()
        budget -= 1
        winners = {  # a repeated key: the last one is what the data holds
            child_loc: (child, key_node)
            for child_loc, child, key_node in _children(loc, node)
            if child_loc != loc  # a merge the loader has not flattened: nothing to place
        }
        for child_loc, (child, key_node) in winners.items():
            values[child_loc] = child.start_mark.line + 1
            if key_node is not None:
                keys[child_loc] = key_node.start_mark.line + 1
            if len(child_loc) < _MAX_DEPTH:
                stack.append((child_loc, child))
    return LineMap(values=values, keys=keys)
