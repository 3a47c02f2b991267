"""Nothing in the runtime reads meaning back out of a sentence the supervisor wrote: a record's
`summary`, a transition's `note`, a command's `error`, a verdict, a stream's status words. What
code needs is a typed field (an enum, an exit code, a failure cause, an id); the words are for
people. The one reader left is the one-time migration of schema-1 rows
(`supervisor/record/timeline/migrate.py`), whose rows held nothing but words.

The check walks every module's syntax tree for a string method (`startswith`, `partition`,
`split`, ...), a regex, or an `in` test whose subject is one of those sentences: an attribute
named like one (`x.summary`, `result.error`), `x.summary()`, or `str(exc)`."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "supervisor"

MIGRATION = PACKAGE / "record" / "timeline" / "migrate.py"
"""The one place allowed to read old words: schema-1 rows and version-1 payloads."""

SENTENCES = frozenset(
    {
        "answer",
        "cause",
        "error",
        "events",
        "line",
        "message",
        "note",
        "reason",
        "resolution",
        "said",
        "summary",
        "symptom",
        "text",
        "verdict",
        "who",
        "why",
    }
)
"""Names the supervisor gives to the words it writes for people."""

NAMED = frozenset({"summary", "note", "verdict"})
"""Local names that hold nothing but such words (`summary = row.summary`)."""

STRING_METHODS = frozenset(
    {
        "startswith",
        "endswith",
        "removeprefix",
        "removesuffix",
        "partition",
        "rpartition",
        "split",
        "rsplit",
        "find",
        "rfind",
        "index",
        "count",
    }
)
REGEX = frozenset({"match", "search", "fullmatch", "findall", "finditer", "sub"})
ERRORS = frozenset({"exc", "err", "error", "e"})
"""Names an exception is caught as: `str(exc)` is its message."""

EXCEPTIONS = {
    ("supervisor/record/store/engine.py", "str(err)"): (
        "SQLite says 'another operation is in progress' in words only (no error code for it)"
    ),
    ("supervisor/hear/streams/recognise.py", "entry.message"): (
        "systemd's own journal messages: what the event stream exists to recognise"
    ),
}
"""(module, the sentence read) -> why it may be read: words that come from outside the
supervisor, with no code to read instead."""


def _key(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and node.value in SENTENCES


def _sentence(node: ast.expr) -> bool:
    """`node` is one of our sentences: `x.summary`, `x.summary()`, `summary`, `str(exc)`,
    `doc["events"]`, `doc.get("events")`, `str(doc.get("events") or "")`."""
    if isinstance(node, ast.Name):
        return node.id in NAMED
    if isinstance(node, ast.Attribute):
        return node.attr in SENTENCES
    if isinstance(node, ast.Subscript):
        return _key(node.slice)
    if isinstance(node, ast.BoolOp):
        return any(_sentence(value) for value in node.values)
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in SENTENCES:
            return True
        if isinstance(func, ast.Attribute) and func.attr == "get" and node.args:
            return _key(node.args[0])
        if not (isinstance(func, ast.Name) and func.id == "str" and len(node.args) == 1):
            return False
        (arg,) = node.args
        return (isinstance(arg, ast.Name) and arg.id in ERRORS) or _sentence(arg)
    return False


def readings(source: str) -> list[tuple[int, str]]:
    """Each place `source` reads meaning out of a sentence: (line, the sentence read)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            method, receiver = node.func.attr, node.func.value
            if method in STRING_METHODS and _sentence(receiver):
                found.append((node.lineno, ast.unparse(receiver)))
            is_re = isinstance(receiver, ast.Name) and receiver.id == "re"
            read = node.args[1:2] if is_re else node.args[:1]  # re.f(p, s), pattern.f(s)
            if method in REGEX and any(_sentence(a) for a in read):
                found += [(node.lineno, ast.unparse(a)) for a in read if _sentence(a)]
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            for op, left, right in zip(node.ops, sides[:-1], sides[1:], strict=True):
                literal = isinstance(left, ast.Constant) and isinstance(left.value, str)
                if isinstance(op, ast.In | ast.NotIn) and literal and _sentence(right):
                    found.append((node.lineno, ast.unparse(right)))
                if isinstance(op, ast.Eq | ast.NotEq):
                    for one, other in ((left, right), (right, left)):
                        said = isinstance(one, ast.Attribute) and one.attr == "summary"
                        if said and isinstance(other, ast.Constant):
                            found.append((node.lineno, ast.unparse(one)))
    return sorted(set(found))


@pytest.mark.parametrize(
    ("source", "found"),
    [
        ('if "exit" in row.summary:\n    pass\n', [(1, "row.summary")]),
        ('ok = result.error.startswith("timed out")\n', [(1, "result.error")]),
        ('head, _, rest = record.note.partition(": ")\n', [(1, "record.note")]),
        ('m = re.match(r"polling: (.*)", stream.status.text)\n', [(1, "stream.status.text")]),
        ('transient = str(exc).startswith("cannot connect")\n', [(1, "str(exc)")]),
        ("x = PATTERN.search(entry.message)\n", [(1, "entry.message")]),
        ('same = row.summary == "healthy"\n', [(1, "row.summary")]),
        (
            'warn = str(h.get("events") or "").startswith("polling")\n',
            [(1, "str(h.get('events') or '')")],
        ),
        ('figures = line_of(r).split(": ", 1)\n', []),  # a call's result: not known to be ours
        ('found = re.findall(r"\\{(\\w+)\\.", str(document))\n', []),  # str() of a document
        ("ok = result.failure is Failure.TIMED_OUT\n", []),
        ('values = dict(x.partition("=") for x in stdout.splitlines())\n', []),
    ],
    ids=[
        "in-summary",
        "error-prefix",
        "note-partition",
        "regex-on-status",
        "str-of-exception",
        "compiled-regex",
        "summary-equality",
        "a-document-key",
        "a-call",
        "str-of-a-document",
        "typed-field",
        "command-output",
    ],
)
def test_the_check_finds_a_sentence_read(source: str, found: list[tuple[int, str]]) -> None:
    assert readings(source) == found


def test_no_sentence_is_parsed_outside_the_migration() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == MIGRATION:
            continue
        module = str(path.relative_to(PACKAGE.parent))
        for line, said in readings(path.read_text()):
            if (module, said) not in EXCEPTIONS:
                found.append(f"{module}:{line}: reads {said}")
    assert found == []


def test_the_migration_is_where_old_words_are_read() -> None:
    """The exemption is not idle: the migration does read sentences (and nothing else does)."""
    assert readings(MIGRATION.read_text())
