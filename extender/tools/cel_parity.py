"""Parity runner: replay CEL selector cases whose answers come from Kubernetes.

    python -m extender.tools.cel_parity CASES.yaml [--engine auto|cpp|python]

Each case is ``{name, expression, device: {driver, attributes, capacity,
allowMultipleAllocations}, expect: true|false|error|compile-error}``. Cases go through the
same path as the allocator (``Environment.compile_selector`` then ``Selector.matches``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from extender.cel import CelCompileError, CelRuntimeError
from extender.cel.device import PlainDevice
from extender.cel.engine import ENGINE_CHOICES
from extender.cel.environment import Environment

OUTCOMES = ("true", "false", "error", "compile-error")


class CaseFileError(Exception):
    """The case file cannot be read or a case is malformed."""


@dataclass(frozen=True)
class Case:
    name: str
    expression: str
    device: Mapping[str, Any]
    expect: str

    def new_device(self) -> PlainDevice:
        """A fresh device each time, so no memo leaks between runs or engines."""
        return PlainDevice(
            driver=self.device.get("driver", ""),
            attributes=self.device.get("attributes") or {},
            capacity=self.device.get("capacity") or {},
            allow_multiple_allocations=bool(self.device.get("allowMultipleAllocations", False)),
        )


@dataclass(frozen=True)
class Outcome:
    kind: str  # one of OUTCOMES
    detail: str = ""


def _expect(raw: object, where: str) -> str:
    if isinstance(raw, bool):
        return "true" if raw else "false"
    if raw in OUTCOMES:
        return str(raw)
    raise CaseFileError(f"{where}: expect must be one of {', '.join(OUTCOMES)}, not {raw!r}")


def _case(raw: object, index: int) -> Case:
    where = f"case #{index}"
    if not isinstance(raw, Mapping):
        raise CaseFileError(f"{where}: must be a mapping, not {type(raw).__name__}")
    name = raw.get("name")
    if not isinstance(name, str) or not name:
        raise CaseFileError(f"{where}: name must be a non-empty string")
    where = f"case {name!r}"
    expression = raw.get("expression")
    if not isinstance(expression, str):
        raise CaseFileError(f"{where}: expression must be a string")
    device = raw.get("device")
    if not isinstance(device, Mapping):
        raise CaseFileError(f"{where}: device must be a mapping")
    for key in ("attributes", "capacity"):
        if not isinstance(device.get(key) or {}, Mapping):
            raise CaseFileError(f"{where}: device.{key} must be a mapping")
    if not isinstance(device.get("driver", ""), str):
        raise CaseFileError(f"{where}: device.driver must be a string")
    return Case(name, expression, device, _expect(raw.get("expect"), where))


def load_cases(path: str | Path) -> list[Case]:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise CaseFileError(f"cannot read {path}: {exc}") from exc
    if not isinstance(raw, list):
        raise CaseFileError(f"{path}: expected a list of cases")
    cases = [_case(item, i) for i, item in enumerate(raw)]
    seen: set[str] = set()
    for case in cases:
        if case.name in seen:
            raise CaseFileError(f"{path}: duplicate case name {case.name!r}")
        seen.add(case.name)
    return cases


def run_case(case: Case, cel: Environment) -> Outcome:
    """Evaluate one case in ``cel``."""
    try:
        selector = cel.compile_selector(case.expression)
    except CelCompileError as exc:
        return Outcome("compile-error", exc.message)
    try:
        return Outcome("true" if selector.matches(case.new_device()) else "false")
    except CelRuntimeError as exc:
        return Outcome("error", exc.message)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m extender.tools.cel_parity", description=__doc__.split("\n")[0]
    )
    parser.add_argument("path", help="YAML file of CEL parity cases")
    parser.add_argument("--engine", choices=ENGINE_CHOICES, default="auto")
    args = parser.parse_args(argv)
    try:
        cases = load_cases(args.path)
        cel = Environment.create(args.engine)
    except (CaseFileError, ImportError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(f"engine: {cel.engine_name}")
    failed = 0
    for case in cases:
        got = run_case(case, cel)
        if got.kind == case.expect:
            print(f"PASS {case.name}")
        else:
            failed += 1
            detail = f": {got.detail}" if got.detail else ""
            print(f"FAIL {case.name} (expected {case.expect}, got {got.kind}{detail})")
    print(f"{len(cases) - failed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
