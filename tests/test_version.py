"""One version, pyproject.toml's: the installed package, `dra-extender --version`, the image's
label and the dra_extender_build_info metric all report it, and the changelog has an Unreleased
section above the last release, which is this version."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from extender import __version__
from extender.metrics import Metrics
from tests.manifests.test_dockerfile import stage_args, stages

ROOT = Path(__file__).resolve().parents[1]
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def test_the_installed_package_is_this_tree_version() -> None:
    assert __version__ == VERSION


def test_the_command_prints_it() -> None:
    command = [sys.executable, "-c", "from extender.cli import main; main()", "--version"]
    out = subprocess.run(command, capture_output=True, text=True, check=True, cwd=ROOT).stdout
    assert out.strip() == f"dra-extender {VERSION}"


def test_the_image_label_defaults_to_it() -> None:
    assert stage_args(stages()[-1])["VERSION"] == VERSION


def test_the_build_info_metric_reports_it() -> None:
    from prometheus_client import generate_latest

    text = generate_latest(Metrics().registry).decode()
    (family,) = [f for f in text_string_to_metric_families(text) if f.name == "dra_extender_build_info"]
    assert [(s.labels, s.value) for s in family.samples] == [({"version": VERSION}, 1.0)]


def test_the_changelog_has_unreleased_above_this_release() -> None:
    headings = re.findall(r"^## (.+)$", (ROOT / "CHANGELOG.md").read_text(), re.M)
    assert headings[0] == "Unreleased"
    assert re.match(rf"{re.escape(VERSION)} - \d{{4}}-\d\d-\d\d$", headings[1]), headings[1]
