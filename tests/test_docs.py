"""README's and docs' numbers, relative links and paths agree with the tree, so they cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from extender.tools.cel_parity import load_cases

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
README = (ROOT / "README.md").read_text()


def _count(pattern: str) -> int:
    match = re.search(pattern, README.replace("\n", " "))
    assert match, pattern
    return int(match[1])


def test_readme_counts_the_shipped_cases() -> None:
    given = [p for p in (ROOT / "tests/conformance/cases").glob("*.yaml")]
    upstream = list((ROOT / "tests/conformance/upstream").glob("*.yaml"))
    assert _count(r"runs the\s+(\d+) given allocation scenarios") == len(given)
    assert _count(r"`tests/conformance/upstream/` holds (\d+) more") == len(upstream)
    assert _count(r"the (\d+) given selector parity cases") == len(load_cases(ROOT / "tests/cel/cases.yaml"))
    assert _count(r"`tests/cel/upstream_cases.yaml` adds (\d+)") == len(
        load_cases(ROOT / "tests/cel/upstream_cases.yaml"))


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_into_the_tree(doc: Path) -> None:
    text = doc.read_text()
    broken = [target for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
              if not re.match(r"[a-z]+:", target) and not (doc.parent / target).exists()]
    assert not broken, f"{doc.name}: links to nothing: {broken}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_in_code_spans_exist(doc: Path) -> None:
    text = doc.read_text()
    paths = {span for span in re.findall(r"`([\w./-]+/[\w./-]+\.(?:py|yaml|md|json|sh|lock))`", text)
             if not span.startswith(("/", "~", "http"))}
    # A path may be relative to extender/ or one of its rooms ("api/routes.py"); Kubernetes' own
    # paths start with test/ or pkg/, and DIR/ is a placeholder.
    tree = {str(f.relative_to(ROOT)) for f in ROOT.rglob("*")
            if not {".venv", ".git"} & set(f.parts)}
    missing = sorted(p for p in paths if not p.startswith(("test/", "pkg/", "DIR/"))
                     and not any(t == p or t.endswith("/" + p) for t in tree))
    assert not missing, f"{doc.name}: no such file: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_citation_of_documents_not_in_the_repository(doc: Path) -> None:
    for name in ("dra-scheduling.md", "extender-protocol.md"):
        assert name not in doc.read_text(), f"{doc.name} cites {name}, which is not in the repository"


def test_every_doc_is_linked_from_the_readme_or_another_doc() -> None:
    linked = {m for doc in DOCS for m in re.findall(r"([\w-]+\.md)\)", doc.read_text())}
    assert not [d.name for d in DOCS[1:] if d.name not in linked]
