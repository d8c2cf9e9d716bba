"""Pruning futile matchAttribute picks changes nothing the search returns, raises or explains.

Every case runs twice, with pruning and with ``pruner_for`` switched off, and the two
outcomes (devices per claim, the failure explanation, or the fatal error's text) must be
the same. The randomized cases mix what the pruning rules are about: counters, CEL runtime
errors on some devices, distinctAttribute beside matchAttribute, results over the size
limit from a later firstAvailable request, admin access, taints and committed devices.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from extender.allocator import AllocatedState, Failure
from extender.allocator import search as search_module
from extender.allocator.search import Search
from extender.allocator.selection import MatchPruner
from extender.model.features import DEFAULT_RELEASE
from tests.allocator.builders import allocator, claim, device_class, node, picked, request, resource_slice

ROOT = "driver-a/root"
NO_COMBINATION = "no combination of devices satisfies all requests and constraints"
OK = {"bool": True}
Outcome = tuple[Any, ...]


def _outcome(
    slices: list[Any],
    classes: list[Any],
    claims: list[Any],
    state: AllocatedState | None = None,
    release: str = DEFAULT_RELEASE,
) -> Outcome:
    alloc = allocator(slices, classes, state=state, release=release)
    results = alloc.allocate(node(), claims)
    if isinstance(results, Failure):
        reason = results.naming([c.key for c in claims]).reason
        return ("none" if results.kind == "nofit" else "error", reason)
    return ("done", picked(results))


def _both(monkeypatch: pytest.MonkeyPatch, *case: Any) -> tuple[Outcome, Outcome]:
    pruned = _outcome(*case)
    with monkeypatch.context() as m:
        m.setattr(search_module, "pruner_for", lambda *args: None)
        plain = _outcome(*case)
    return pruned, plain


def _gpu(name: str, root: str, **extra: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {"root": {"string": root}, **extra}}


def _count_calls(monkeypatch: pytest.MonkeyPatch, cls: type, name: str) -> list[int]:
    calls = [0]
    original = getattr(cls, name)

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls[0] += 1
        return original(*args, **kwargs)

    monkeypatch.setattr(cls, name, counted)
    return calls


def test_three_devices_per_root_fail_a_four_device_claim_without_trying_any(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Issue 15's unsatisfiable shape: 4 roots x 3 devices, roots alternating in slice order.
    slices = [resource_slice(devices=[_gpu(f"d{i:02d}", f"r{i % 4}") for i in range(12)])]
    claims = [claim(request(count=4), constraints=[{"matchAttribute": ROOT}])]
    pruned, plain = _both(monkeypatch, slices, [device_class()], claims)
    assert pruned == plain and pruned[0] == "none"
    picks = _count_calls(monkeypatch, Search, "try_pick")
    assert _outcome(slices, [device_class()], claims) == pruned
    assert picks[0] == 0


def test_a_cel_error_on_a_later_device_stays_fatal(monkeypatch: pytest.MonkeyPatch) -> None:
    # d00's root has no partner, and proving that the plain search evaluates d03, whose
    # selector fails; pruning d00 would find d01+d02 before the search ever reaches d03.
    devices = [_gpu("d00", "r0", ok=OK), _gpu("d01", "r1", ok=OK), _gpu("d02", "r1", ok=OK)]
    devices.append(_gpu("d03", "r2"))
    slices = [resource_slice(devices=devices)]
    classes = [device_class("class-a", 'device.attributes["driver-a"].ok')]
    claims = [claim(request(count=2), constraints=[{"matchAttribute": ROOT}])]
    pruned, plain = _both(monkeypatch, slices, classes, claims)
    assert pruned == plain
    assert pruned[0] == "error" and "d03" in pruned[1]


@pytest.mark.parametrize(
    ("release", "expected"),
    [
        # try_pick(d01): distinctAttribute accepts numa 1, matchAttribute refuses root r1, and
        # the removal forgets numa 0 of d00 (1.36's bookkeeping), so d02 with numa 0 joins.
        ("1.36", ("done", [[("req-0", "d00"), ("req-0", "d02"), ("req-0", "d03")]])),
        # 1.37 keeps every value: d02 repeats numa 0 and d03 alone is short of three.
        ("1.37", ("none", f"claims default/claim-0: {NO_COMBINATION}")),
    ],
)
def test_distinct_attribute_forgetting_on_a_refusal_is_kept(
    monkeypatch: pytest.MonkeyPatch, release: str, expected: Outcome
) -> None:
    devices = [
        _gpu("d00", "r0", numa={"int": 0}),
        _gpu("d01", "r1", numa={"int": 1}),
        _gpu("d02", "r0", numa={"int": 0}),
        _gpu("d03", "r0", numa={"int": 1}),
    ]
    slices = [resource_slice(devices=devices)]
    constraints = [{"distinctAttribute": "driver-a/numa"}, {"matchAttribute": ROOT}]
    claims = [claim(request(count=3), constraints=constraints)]
    pruned, plain = _both(monkeypatch, slices, [device_class()], claims, None, release)
    assert pruned == plain == expected


def test_a_cel_error_after_a_solution_is_never_reached(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = [_gpu(f"d{i:02d}", f"r{i % 2}", ok=OK) for i in range(4)]
    devices.append(_gpu("d04", "r0"))
    slices = [resource_slice(devices=devices)]
    classes = [device_class("class-a", 'device.attributes["driver-a"].ok')]
    claims = [claim(request(count=2), constraints=[{"matchAttribute": ROOT}])]
    pruned, plain = _both(monkeypatch, slices, classes, claims)
    assert pruned == plain == ("done", [[("req-0", "d00"), ("req-0", "d02")]])


def test_a_later_request_over_the_size_limit_still_falls_through(monkeypatch: pytest.MonkeyPatch) -> None:
    devices = [_gpu(f"d{i:02d}", f"r{i % 3}") for i in range(40)]
    slices = [resource_slice(devices=devices)]
    claims = [
        claim(
            request("req-0", count=4),
            {
                "name": "req-1",
                "firstAvailable": [
                    {"name": "many", "deviceClassName": "class-a", "count": 30},
                    {"name": "few", "deviceClassName": "class-a", "count": 2},
                ],
            },
            constraints=[{"requests": ["req-0"], "matchAttribute": ROOT}],
        )
    ]
    pruned, plain = _both(monkeypatch, slices, [device_class()], claims)
    assert pruned == plain and pruned[0] == "done"
    assert [r for r, _ in pruned[1][0]] == ["req-0"] * 4 + ["req-1/few"] * 2


def _random_case(rng: random.Random) -> tuple[list[Any], list[Any], list[Any], AllocatedState]:
    counters = rng.random() < 0.3
    devices = []
    for i in range(rng.randint(3, 14)):
        attrs: dict[str, Any] = {"numa": {"int": rng.randint(0, 1)}}
        kind = rng.random()
        if kind < 0.8:
            attrs["root"] = {"string": rng.choice(["r0", "r1", "r2"])}
        elif kind < 0.9:
            attrs["root"] = {"strings": ["r0", "r1"]}  # not a scalar: joins nothing
        if rng.random() < 0.9:
            attrs["ok"] = {"bool": rng.random() < 0.85}  # missing: the strict selector fails
        device: dict[str, Any] = {"name": f"d{i:02d}", "attributes": attrs}
        if counters and rng.random() < 0.6:
            use = str(rng.randint(1, 4))
            device["consumesCounters"] = [{"counterSet": "gpu", "counters": {"mem": {"value": use}}}]
        if rng.random() < 0.1:
            device["taints"] = [{"key": "k", "effect": "NoSchedule"}]
        devices.append(device)
    rng.shuffle(devices)
    if counters:
        shared = [{"name": "gpu", "counters": {"mem": {"value": str(rng.randint(3, 9))}}}]
        slices = [resource_slice("counters", [], sharedCounters=shared, count=2),
                  resource_slice("devices", devices, count=2)]
    else:
        cut = rng.randint(0, len(devices))
        slices = [
            resource_slice("s-a", devices[:cut], count=2),
            resource_slice("s-b", devices[cut:], count=2),
        ]
    strict = 'device.attributes["driver-a"].ok'
    lenient = '!has(device.attributes["driver-a"].ok) || device.attributes["driver-a"].ok'
    classes = [device_class("class-a", strict if rng.random() < 0.4 else lenient)]
    claims = []
    for c in range(rng.randint(1, 2)):
        requests: list[dict[str, Any]] = []
        for r in range(rng.randint(1, 3)):
            extra: dict[str, Any] = {}
            if rng.random() < 0.15:
                extra["tolerations"] = [{"key": "k", "operator": "Exists"}]
            if rng.random() < 0.15:
                requests.append({"name": f"req-{r}", "firstAvailable": [
                    {"name": "many", "deviceClassName": "class-a", "count": rng.choice([3, 31]), **extra},
                    {"name": "few", "deviceClassName": "class-a", "count": rng.randint(1, 2), **extra},
                ]})
            else:
                if rng.random() < 0.1:
                    extra["adminAccess"] = True
                requests.append(request(f"req-{r}", count=rng.randint(1, 4), **extra))
        constraints: list[dict[str, Any]] = []
        for _ in range(rng.randint(0, 2)):
            names = rng.sample([r["name"] for r in requests], rng.randint(1, len(requests)))
            kind = rng.choice(["matchAttribute", "matchAttribute", "distinctAttribute"])
            attribute = rng.choice([ROOT, ROOT, "driver-a/numa"])
            scope = {"requests": names} if rng.random() < 0.5 else {}
            constraints.append({**scope, kind: attribute})
        claims.append(claim(*requests, name=f"claim-{c}", constraints=constraints))
    taken = {("driver-a", "pool-1", d["name"]) for d in devices if rng.random() < 0.15}
    return slices, classes, claims, AllocatedState(allocated_devices=taken)


def test_randomized_cases_answer_as_the_plain_search(monkeypatch: pytest.MonkeyPatch) -> None:
    skipped = _count_skips(monkeypatch)
    kinds: set[str] = set()
    for seed in range(600):
        case = _random_case(random.Random(seed))
        pruned, plain = _both(monkeypatch, *case)
        assert pruned == plain, f"seed {seed}"
        kinds.add(pruned[0])
    # The cases must exercise the rules: every outcome kind, and subtrees actually skipped.
    assert kinds == {"done", "none", "error"}
    assert skipped[0] > 100


def _count_skips(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How often ``futile`` skipped a pick that the constraints admit (a pruned subtree)."""
    skipped = [0]
    original = MatchPruner.futile

    def counted(self: MatchPruner, index: int, need: int) -> bool:
        futile = original(self, index, need)
        device = self._search.candidates[index].device
        skipped[0] += futile and all(c.admits(device) for c in self._constraints)
        return futile

    monkeypatch.setattr(MatchPruner, "futile", counted)
    return skipped
