"""Every document the README or the command's help sends readers to is in the repository."""
import re
from pathlib import Path

import pytest

from meshshard.cli import COMMANDS, main

ROOT = Path(__file__).resolve().parent.parent
# a relative path into docs/ or to a .md file; URLs and ../shared/data (outside the repository) are not ours
_DOC = re.compile(r"(?<![\w/.:-])((?:docs/[\w./-]*\w)|(?:[\w./-]+\.md))\b")


def _doc_paths(text):
    return set(_DOC.findall(text))


def _help_texts():
    for command in [None, *COMMANDS]:
        argv = ["--help"] if command is None else [command, "--help"]
        yield " ".join(argv), argv


def _help(argv, capsys):
    with pytest.raises(SystemExit):
        main(argv)
    return capsys.readouterr().out


def test_readme_links_resolve():
    readme = (ROOT / "README.md").read_text()
    paths = _doc_paths(readme) | set(re.findall(r"\]\(((?!https?:)[^)#\s]+)", readme))
    assert {"docs/design.md", "docs/format.md"} <= paths
    missing = sorted(p for p in paths if not (ROOT / p).exists())
    assert not missing, f"README links to files that are not in the repository: {missing}"


def test_docs_links_resolve():
    for doc in sorted((ROOT / "docs").rglob("*.md")):
        for link in re.findall(r"\]\(((?!https?:)[^)#\s]+)", doc.read_text()):
            assert (doc.parent / link).exists(), f"{doc.name} links to {link}, which does not exist"


def test_cli_help_documents_resolve(capsys):
    seen = set()
    for name, argv in _help_texts():
        text = _help(argv, capsys)
        paths = _doc_paths(text)
        assert "DESIGN.md" not in text, name
        seen |= paths
        missing = sorted(p for p in paths if not (ROOT / p).exists())
        assert not missing, f"`meshshard {name}` names files that are not in the repository: {missing}"
    assert {"docs/design.md", "docs/format.md"} <= seen
