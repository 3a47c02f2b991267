"""The YAML reader: LibYAML parses, PyYAML's own parser reads again what LibYAML refuses, and both
give the same data, lines and duplicate-key issues."""

from __future__ import annotations

from pathlib import Path

import pytest

from supervisor.config import yamlsource
from supervisor.config.errors import ConfigError
from supervisor.config.yamlsource import YamlDocument, parse_yaml

REPO = Path(__file__).resolve().parents[1]
SHIPPED = sorted(
    [
        *REPO.glob("playbooks/*.yaml"),
        *REPO.glob("deploy/*.yaml"),
        *REPO.glob("tests/data/**/*.yaml"),
    ]
)
SNIPPETS = {
    "anchors and a merge": "base: &b {a: 1, b: [x, y]}\nthere:\n  <<: *b\n  b: 2\n",
    "YAML 1.1 booleans stay text": "on: hosts\nyes: no\ny: n\nreal: true\nFalse: x\n",
    "block scalars": "folded: >\n  one\n  two\nliteral: |\n  a\n   b\nkeep: |+\n  c\n\n",
    "quoted escapes": "d: \"tab\\there \\u00e9 \\x41 \\N\"\ns: 'it''s'\n",
    "duplicate keys": "a: 1\nb:\n  c: 2\n  c: 3\na: 4\n",
    "numbers": "i: 0x1F\no: 0o17\nf: 1.5e3\nn: .nan\nbig: 123456789012345678901234567890\n",
    "empty": "",
    "comments only": "# nothing\n",
    "nested lists": "a:\n  - - 1\n    - {b: [2, {c: 3}]}\n  - x\n",
}


@pytest.fixture(params=["libyaml", "pyyaml"])
def parser(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Which parser reads first: LibYAML (the default), or PyYAML's own (as where PyYAML was
    built without LibYAML)."""
    if request.param == "pyyaml":
        monkeypatch.setattr(yamlsource, "_fast_loader", lambda: None)
    return str(request.param)


def _both(text: str, monkeypatch: pytest.MonkeyPatch) -> tuple[YamlDocument, YamlDocument]:
    fast = parse_yaml(text, "f.yaml")
    with monkeypatch.context() as patch:
        patch.setattr(yamlsource, "_fast_loader", lambda: None)
        own = parse_yaml(text, "f.yaml")
    return fast, own


def test_pyyaml_here_has_libyaml() -> None:
    assert yamlsource._fast_loader() is not None


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: str(p.relative_to(REPO)))
def test_both_parsers_read_the_shipped_files_alike(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fast, own = _both(path.read_text(), monkeypatch)
    assert fast == own


@pytest.mark.parametrize("text", SNIPPETS.values(), ids=list(SNIPPETS))
def test_both_parsers_read_the_snippets_alike(text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, own = _both(text, monkeypatch)
    assert fast == own


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("a: [1, 2\n", "f.yaml:2: YAML syntax error: expected ',' or ']', but got '<stream end>'"),
        ("a:\n\tb: 1\n", "f.yaml:2: YAML syntax error: found character '\\t' that cannot start "
         "any token (indent with spaces, not tabs)"),
        ("a: *x\n", "f.yaml:1: YAML syntax error: found undefined alias 'x'"),
        ("a: \ud800\n", "f.yaml:1: YAML syntax error: unacceptable character #xd800: special "
         "characters are not allowed"),
    ],
    ids=["unclosed", "tab", "alias", "surrogate"],
)  # fmt: skip
def test_what_libyaml_refuses_is_told_in_pyyamls_words(
    parser: str, text: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_yaml(text, "f.yaml")
    assert str(caught.value) == expected


@pytest.mark.parametrize(("depth", "refused"), [(100, False), (101, True), (5000, True)])
def test_nesting_deeper_than_100_is_refused_by_either_parser(
    parser: str, depth: int, refused: bool
) -> None:
    text = "a: " + "[" * depth + "]" * depth + "\n"
    if refused:
        with pytest.raises(ConfigError) as caught:
            parse_yaml(text, "f.yaml")
        assert str(caught.value) == "f.yaml: YAML syntax error: the document is nested too deeply"
    else:
        assert parse_yaml(text, "f.yaml").lines.line_of(("a",)) == 1
