"""Compare case files with the released upstream code: ``python -m extender.tools.oracle PATH...``.

The oracle (tests/oracle, a Go program importing the released k8s.io/dynamic-resource-allocation)
answers a conformance case (tests/conformance/cases/FORMAT.md) with the released structured
allocator, in the variant kube-scheduler picks for the case's gates, and a CEL parity case
(tests/cel/cases.yaml) with the released CEL environment. For every case this reports where the
recorded answer differs from the release ("recorded"), and where our allocator or CEL engines
differ from it ("ours"). Exit status 1 when anything differs.

The oracle binary is ``--oracle PATH``, else ``$DRA_ORACLE``, else what scripts/oracle/build.sh
builds (and caches; it needs Go).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import IO, Any

import yaml

from extender.cel.engine import ENGINE_CHOICES
from extender.cel.environment import Environment
from extender.tools import cel_parity, conformance

REPO = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO / "scripts" / "oracle" / "build.sh"


class OracleUnavailable(Exception):
    """The oracle cannot be built or started (no Go, no source checkout, build failure)."""


# The releases an oracle can be built for (scripts/oracle/build.sh RELEASE), and the release of
# k8s.io/dynamic-resource-allocation each one answers with. 1.37 is the default.
ORACLE_RELEASES = {"1.37": "v0.37.2", "1.34": "v0.34.4"}
DEFAULT_ORACLE_RELEASE = "1.37"


def oracle_path(explicit: str | None = None, release: str = DEFAULT_ORACLE_RELEASE) -> str:
    """The oracle binary: ``explicit``, ``$DRA_ORACLE`` (for the default release), or the one
    build.sh builds or has cached for ``release``."""
    if release not in ORACLE_RELEASES:
        raise OracleUnavailable(f"no oracle for Kubernetes {release}; known: {', '.join(ORACLE_RELEASES)}")
    chosen = explicit or (os.environ.get("DRA_ORACLE") if release == DEFAULT_ORACLE_RELEASE else None)
    if chosen:
        return chosen
    if not BUILD_SCRIPT.is_file():
        raise OracleUnavailable(f"{BUILD_SCRIPT} not found: the oracle is built from a source checkout")
    run = subprocess.run(["bash", str(BUILD_SCRIPT), release], capture_output=True, text=True, check=False)
    if run.returncode != 0:
        raise OracleUnavailable(f"building the oracle failed:\n{run.stderr.strip()}")
    return run.stdout.strip().splitlines()[-1]


def _json_default(value: Any) -> Any:
    """YAML values JSON has no type for: timestamps (Kubernetes writes RFC 3339, UTC as Z)."""
    if isinstance(value, datetime):
        return value.isoformat().replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    raise TypeError(f"cannot send {type(value).__name__} to the oracle")


class Oracle:
    """One oracle process, asked one request at a time (JSON Lines both ways). ``release`` is the
    Kubernetes release whose released code it answers with (ORACLE_RELEASES)."""

    def __init__(self, path: str, release: str = DEFAULT_ORACLE_RELEASE) -> None:
        self.path = path
        self.release = release
        self.module_version = ORACLE_RELEASES[release]
        try:
            self._proc = subprocess.Popen(
                [path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1
            )
        except OSError as exc:
            raise OracleUnavailable(f"cannot start the oracle {path}: {exc}") from exc

    def ask(self, request: Mapping[str, Any]) -> dict[str, Any]:
        stdin: IO[str] | None = self._proc.stdin
        stdout: IO[str] | None = self._proc.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request, default=_json_default) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            raise OracleUnavailable(f"the oracle {self.path} stopped (exit status {self._proc.poll()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def allocate(self, case: Mapping[str, Any]) -> dict[str, Any]:
        return self.ask({**case, "mode": "allocate"})

    def cel(self, case: cel_parity.Case) -> dict[str, Any]:
        request = {"mode": "cel", "name": case.name, "expression": case.expression, "device": case.device}
        return self.ask(request)

    def close(self) -> None:
        if self._proc.stdin:
            self._proc.stdin.close()
        self._proc.wait(timeout=30)

    def __enter__(self) -> Oracle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- allocation ------------------------------------------------------------------------------------


def oracle_outcome(answer: Mapping[str, Any]) -> tuple[str, Any]:
    """The oracle's answer as conformance.run_case gives ours: (outcome, results | text)."""
    outcome = str(answer.get("outcome"))
    if outcome == "allocated":
        statuses = answer.get("nodeAllocatableResourceClaimStatuses") or []
        return outcome, conformance.Allocated(answer.get("results") or [], statuses)
    return outcome, answer.get("error", "")


def oracle_expect(answer: Mapping[str, Any]) -> dict[str, Any]:
    """The oracle's answer written as a case's ``expect`` (results without their random or
    time-dependent parts: shareIDs become a fixed marker, allocationTimestamp goes)."""
    outcome = str(answer.get("outcome"))
    expect: dict[str, Any] = {"outcome": outcome}
    if outcome == "allocated":
        expect["results"] = [_clean_result(r) for r in answer.get("results") or []]
        if answer.get("nodeAllocatableResourceClaimStatuses"):
            expect["nodeAllocatableResourceClaimStatuses"] = answer["nodeAllocatableResourceClaimStatuses"]
    elif outcome == "error":
        expect["error"] = answer.get("error", "")
    return expect


def _clean_result(result: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in result.items() if k != "allocationTimestamp"}
    devices = dict(out.get("devices") or {})
    devices["results"] = [
        {**r, "shareID": "share-id"} if r.get("shareID") else dict(r) for r in devices.get("results") or []
    ]
    out["devices"] = devices
    return out


@dataclass
class Finding:
    """One case's disagreements: the recorded answer vs the release, ours vs the release."""

    file: str
    name: str
    variant: str = ""
    recorded: list[str] = field(default_factory=list)
    ours: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def agrees(self) -> bool:
        return not self.recorded and not self.ours


def oracle_request(case: Mapping[str, Any]) -> dict[str, Any]:
    """The case as the oracle reads it. Slices go by name: kube-scheduler lists them in no
    particular order (its informer's), and by name is the order the extender takes them in."""
    slices = sorted(case.get("resourceSlices") or [], key=_slice_name)
    return {**case, "resourceSlices": slices}


def _slice_name(slice_: Mapping[str, Any]) -> str:
    return str((slice_.get("metadata") or {}).get("name"))


def answers(answer: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    """The oracle's answer and its alternatives (equally right answers of the same variant)."""
    return [answer, *(answer.get("alternatives") or [])]


def check_allocation_case(path: Path, case: Mapping[str, Any], oracle: Oracle, cel: Environment) -> Finding:
    """The recorded answer against the release's, and ours, allocating as the oracle's release
    does, against the release's."""
    answer = oracle.allocate(oracle_request(case))
    finding = Finding(str(path), str(case.get("name", path.stem)), str(answer.get("variant", "")))
    outcome, detail = oracle_outcome(answer)
    if outcome in ("invalid", "timeout"):
        finding.recorded.append(f"the oracle could not answer ({outcome}): {detail}")
        return finding
    if answer.get("unknownFields"):
        finding.notes.append("fields the released API lacks: " + "; ".join(answer["unknownFields"]))
    expect = case.get("expect") or {}
    released = answers(answer)
    if len(released) > 1:
        finding.notes.append(f"the release gives {len(released)} different answers (pool order)")
    ours, our_detail = conformance.run_case(case, cel, oracle.release)
    finding.recorded = _first_or_none([conformance.compare(expect, *oracle_outcome(a)) for a in released])
    finding.ours = _first_or_none([conformance.compare(oracle_expect(a), ours, our_detail) for a in released])
    if outcome == "error" and expect.get("outcome") == "error":
        hint = str(expect.get("error") or "")
        if hint and hint not in str(detail):
            finding.notes.append(f"error text differs: recorded {hint!r}, release {detail!r}")
    if outcome == "error" and answer.get("nodeOnly"):
        finding.notes.append("the release's error is node-only (ErrFailedAllocationOnNode)")
    return finding


def _first_or_none(problems: Sequence[list[str]]) -> list[str]:
    """No problem if any answer agrees, else the problems with the first answer."""
    return [] if any(not p for p in problems) else list(problems[0])


# -- CEL -------------------------------------------------------------------------------------------


def check_cel_case(
    path: Path, case: cel_parity.Case, oracle: Oracle, engines: Sequence[Environment]
) -> Finding:
    answer = oracle.cel(case)
    finding = Finding(str(path), case.name)
    released = str(answer.get("outcome"))
    detail = answer.get("detail", "")
    if released == "invalid":
        finding.recorded.append(f"the oracle could not answer: {detail}")
        return finding
    if released != case.expect:
        why = f": {detail}" if detail else ""
        finding.recorded.append(f"recorded {case.expect}, release {released}{why}")
    for env in engines:
        got = cel_parity.run_case(case, env)
        if got.kind != released:
            extra = f": {got.detail}" if got.detail else ""
            finding.ours.append(f"{env.engine_name} engine {got.kind}{extra}, release {released}")
    max_cost, limit = answer.get("maxCost"), answer.get("costLimit")
    if max_cost is not None and limit is not None and max_cost > limit:
        finding.notes.append(f"estimated cost {max_cost} over the limit {limit}: the API server refuses it")
    return finding


# -- files -----------------------------------------------------------------------------------------


def check_files(
    paths: Sequence[str], oracle: Oracle, cel: Environment, engines: Sequence[Environment]
) -> Iterator[Finding]:
    """Every case in ``paths``: conformance case files (a mapping with ``expect``) and CEL parity
    files (a list of cases); other YAML files are skipped."""
    for path in conformance.case_files(paths):
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
        if isinstance(doc, Mapping) and "expect" in doc:
            yield check_allocation_case(path, doc, oracle, cel)
        elif isinstance(doc, list):
            for case in cel_parity.load_cases(path):
                yield check_cel_case(path, case, oracle, engines)


def report(findings: Sequence[Finding], out: IO[str], verbose: bool = False) -> None:
    for f in findings:
        if f.agrees and not (verbose and f.notes):
            continue
        where = f" [{f.variant}]" if f.variant else ""
        print(f"{'DIFF' if not f.agrees else 'NOTE'} {f.file}: {f.name}{where}", file=out)
        for line in f.recorded:
            print("  recorded vs release: " + line.replace("\n", "\n    "), file=out)
        for line in f.ours:
            print("  ours vs release: " + line.replace("\n", "\n    "), file=out)
        if verbose:
            for line in f.notes:
                print("  note: " + line, file=out)
    recorded = sum(1 for f in findings if f.recorded)
    ours = sum(1 for f in findings if f.ours)
    print(
        f"{len(findings)} cases: {len(findings) - recorded} recorded answers agree with the release, "
        f"{recorded} differ; ours differ on {ours}",
        file=out,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m extender.tools.oracle", description=__doc__.splitlines()[0]
    )
    parser.add_argument("paths", nargs="+", help="case files or directories (conformance or CEL parity)")
    parser.add_argument("--oracle", help="the oracle binary (default: $DRA_ORACLE, else build it)")
    parser.add_argument(
        "--release", choices=sorted(ORACLE_RELEASES), default=DEFAULT_ORACLE_RELEASE,
        help="the Kubernetes release whose released allocator answers; ours allocates as that "
        "release's kube-scheduler does (default %(default)s)",
    )
    parser.add_argument(
        "--cel-engine", action="append", choices=[c for c in ENGINE_CHOICES if c != "auto"],
        help="CEL engine(s) to compare with the release (repeatable; default: every installed one)",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="also print notes")
    args = parser.parse_args(argv)
    try:
        path = oracle_path(args.oracle, args.release)
        engines = engine_environments(args.cel_engine)
        with Oracle(path, args.release) as oracle:
            findings = list(check_files(args.paths, oracle, Environment.create(), engines))
    except (OracleUnavailable, FileNotFoundError, cel_parity.CaseFileError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    report(findings, sys.stdout, args.verbose)
    return 0 if all(f.agrees for f in findings) else 1


def engine_environments(names: Sequence[str] | None) -> list[Environment]:
    """One environment per named engine; without names, every engine that is installed."""
    if names:
        return [Environment.create(name) for name in names]
    envs = []
    for name in ENGINE_CHOICES:
        if name == "auto":
            continue
        try:
            envs.append(Environment.create(name))
        except ImportError:
            continue
    return envs


if __name__ == "__main__":
    sys.exit(main())
