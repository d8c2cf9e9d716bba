"""Random differential testing against the released upstream code.

    python -m extender.tools.differential --seed S --count N [--cel] [--out DIR]

Makes N random cases from seed S (extender/tools/random_cases.py), answers each with our
allocator (or, with --cel, our CEL engines) and with the oracle (extender/tools/oracle.py),
and prints ``N passed, M failed``. Each disagreement is written to DIR as a case file ready
to commit, its ``expect`` the release's answer: a conformance case (for tests/conformance/upstream)
or a one-case CEL parity file (to append to tests/cel/upstream_cases.yaml). Without --seed a
fresh seed is drawn; it is printed first either way.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from extender.cel.engine import ENGINE_CHOICES
from extender.cel.environment import Environment
from extender.tools import cel_parity, conformance, random_cases
from extender.tools.oracle import (
    DEFAULT_ORACLE_RELEASE,
    ORACLE_RELEASES,
    Oracle,
    OracleUnavailable,
    answers,
    engine_environments,
    oracle_expect,
    oracle_path,
    oracle_request,
)


def allocation_mismatch(
    case: Mapping[str, Any], oracle: Oracle, cel: Environment
) -> tuple[str, dict[str, Any] | None]:
    """("pass" | "fail" | "skip", the case with the release's answer when it failed)."""
    case = _with_release(case, oracle.release)
    answer = oracle.allocate(oracle_request(case))
    if answer.get("outcome") in ("invalid", "timeout"):
        return "skip", None
    ours, detail = conformance.run_case(case, cel)
    problems = [conformance.compare(oracle_expect(a), ours, detail) for a in answers(answer)]
    if any(not p for p in problems):
        return "pass", None
    found = dict(case)
    found["description"] = (
        f"{case.get('description', '')}; found by make differential, answer from "
        f"k8s.io/dynamic-resource-allocation {oracle.module_version} ({answer.get('variant')} allocator). "
        f"Ours was: {_short(ours, detail)}"
    )
    found["expect"] = oracle_expect(answer)
    return "fail", found


def _with_release(case: Mapping[str, Any], release: str) -> dict[str, Any]:
    """The case answered for ``release`` (FORMAT.md, kubernetesVersion), named after its gates."""
    out: dict[str, Any] = {}
    for key, value in case.items():
        if key != "kubernetesVersion":
            out[key] = value
        if key == "features":
            out["kubernetesVersion"] = release
    out.setdefault("kubernetesVersion", release)
    return out


def cel_mismatch(
    case: Mapping[str, Any], oracle: Oracle, engines: Sequence[Environment]
) -> tuple[str, dict[str, Any] | None]:
    answer = oracle.ask({**case, "mode": "cel"})
    released = str(answer.get("outcome"))
    if released == "invalid":
        return "skip", None
    parity = cel_parity.Case(str(case["name"]), str(case["expression"]), case["device"], released)
    wrong = []
    for env in engines:
        got = cel_parity.run_case(parity, env)
        if got.kind != released:
            wrong.append(f"{env.engine_name}: {got.kind}" + (f" ({got.detail})" if got.detail else ""))
    if not wrong:
        return "pass", None
    found = {**case, "expect": released if released not in ("true", "false") else released == "true"}
    found["name"] = f"{case['name']} ({'; '.join(wrong)}; release {released})"[:200]
    return "fail", found


def _short(outcome: str, detail: Any, limit: int = 300) -> str:
    if outcome == "allocated":
        picks = [
            f"{d.get('request')}={d.get('driver')}/{d.get('pool')}/{d.get('device')}"
            for result in detail.results
            for d in (result.get("devices") or {}).get("results") or []
        ]
        text = f"allocated [{', '.join(picks)}]"
    else:
        text = f"{outcome}" + (f": {detail}" if detail else "")
    return text if len(text) <= limit else text[:limit] + " ..."


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m extender.tools.differential", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")
    parser.add_argument("--count", type=int, default=100, help="number of cases (default 100)")
    parser.add_argument("--cel", action="store_true", help="CEL selectors instead of allocations")
    parser.add_argument(
        "--cel-engine", action="append", choices=[c for c in ENGINE_CHOICES if c != "auto"],
        help="with --cel: engine(s) to test (repeatable; default every installed one); "
        "for allocations: the engine our allocator runs selectors and derived attributes on "
        "(the first named; default auto)",
    )
    parser.add_argument("--out", type=Path, default=Path("build/differential"),
                        help="where disagreements are written (default build/differential)")
    parser.add_argument("--oracle", help="the oracle binary (default: $DRA_ORACLE, else build it)")
    parser.add_argument(
        "--release", choices=sorted(ORACLE_RELEASES), default=DEFAULT_ORACLE_RELEASE,
        help="the Kubernetes release to compare with (default %(default)s)",
    )
    parser.add_argument("-q", "--quiet", action="store_true", help="print only the seed and the totals")
    args = parser.parse_args(argv)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1, 2**31)
    print(f"seed {seed}", flush=True)
    try:
        path = oracle_path(args.oracle, args.release)
        engines = engine_environments(args.cel_engine)
        cel = Environment.create(args.cel_engine[0] if args.cel_engine and not args.cel else "auto")
        with Oracle(path, args.release) as oracle:
            counts = run(args, seed, oracle, cel, engines)
    except OracleUnavailable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    passed, failed, skipped = counts
    if skipped:
        print(f"{skipped} skipped (the oracle could not answer)")
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


def run(
    args: argparse.Namespace, seed: int, oracle: Oracle, cel: Environment, engines: Sequence[Environment]
) -> tuple[int, int, int]:
    passed = failed = skipped = 0
    started = time.monotonic()
    for index in range(args.count):
        if args.cel:
            case = random_cases.cel_case(seed, index)
            verdict, found = cel_mismatch(case, oracle, engines)
            target = args.out / f"differential-cel-{seed}-{index}.yaml"
            body = [found] if found else None
        else:
            case = random_cases.allocation_case(seed, index)
            verdict, found = allocation_mismatch(case, oracle, cel)
            target = args.out / f"differential-{seed}-{index}.yaml"
            body = found  # type: ignore[assignment]
        if verdict == "pass":
            passed += 1
        elif verdict == "skip":
            skipped += 1
        else:
            failed += 1
            args.out.mkdir(parents=True, exist_ok=True)
            target.write_text(yaml.safe_dump(body, sort_keys=False, width=100), encoding="utf-8")
            if not args.quiet:
                print(f"FAIL {target}", flush=True)
    if not args.quiet:
        print(f"{args.count} cases in {time.monotonic() - started:.1f}s")
    return passed, failed, skipped


if __name__ == "__main__":
    sys.exit(main())
