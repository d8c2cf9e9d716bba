"""README's and docs' numbers, relative links and paths agree with the tree, so they cannot drift."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

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


def _rbac_table() -> dict[tuple[str, str], set[str]]:
    """deploy.md's RBAC table: (API group, resource) → verbs, the core group as ""."""
    text = (ROOT / "docs/deploy.md").read_text()
    section = text.split("## RBAC, and why each rule is there", 1)[1].split("\n## ", 1)[0]
    rows = [line.split(" | ") for line in section.splitlines() if line.startswith("| `")]
    table: dict[tuple[str, str], set[str]] = {}
    for resources, group, verbs, _ in rows:
        group = "" if group.startswith("core") else group.strip("`")
        for resource in re.findall(r"`([\w/]+)`", resources.split("(")[0]):
            table.setdefault((group, resource), set()).update(v.strip() for v in verbs.split(","))
    return table


def test_the_rbac_table_lists_every_grant_of_the_shipped_extender_rbac() -> None:
    granted: dict[tuple[str, str], set[str]] = {}
    for doc in yaml.safe_load_all((ROOT / "manifests/base/extender-rbac.yaml").read_text()):
        if doc and doc["kind"] in ("ClusterRole", "Role"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        granted.setdefault((group, resource), set()).update(rule["verbs"])
    assert ("", "pods/eviction") in granted and ("coordination.k8s.io", "leases") in granted
    assert _rbac_table() == granted


def test_no_file_points_outside_the_repository() -> None:
    # A test or doc reading or citing a sibling checkout (../shared, /work/...) passes or skips only
    # on the machine that has it.
    files = [p for top in ("extender", "tests", "docs", "loadtest", "manifests", "charts")
             for p in (ROOT / top).rglob("*") if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".txt"}]
    pattern = re.compile(r"\.\./shared|/work/(?:shared|main)\b")
    pointing = [str(p.relative_to(ROOT)) for p in [*files, ROOT / "README.md"]
                if p != Path(__file__).resolve() and pattern.search(p.read_text())]
    assert not pointing
