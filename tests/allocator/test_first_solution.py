"""Property: the search returns exactly the first valid assignment in upstream's order.

For small random scenarios a brute force enumerates, request by request, the device
combinations in ascending order (what a depth-first search with a start position visits)
and takes the first that satisfies selectors, availability and matchAttribute. The allocator
must agree on existence and on every picked device.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

from hypothesis import given, settings
from hypothesis import strategies as st

from extender.allocator import AllocatedState, Failure
from tests.allocator.builders import allocator, claim, dev, node, picked, request, resource_slice

FAST = [{"cel": {"expression": 'device.attributes["driver-a"].fast'}}]


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 6))
    devices = [(draw(st.integers(0, 2)), draw(st.booleans())) for _ in range(n)]
    taken = draw(st.sets(st.integers(0, n - 1), max_size=2))
    requests = [(draw(st.integers(1, 3)), draw(st.booleans())) for _ in range(draw(st.integers(1, 3)))]
    constrained = draw(st.sets(st.integers(0, len(requests) - 1)))
    return {"devices": devices, "taken": taken, "requests": requests, "constrained": constrained}


def brute_force(s: dict) -> list[tuple[str, str]] | None:
    devices, requests = s["devices"], s["requests"]
    free = [i for i in range(len(devices)) if i not in s["taken"]]

    def assignments(r: int, used: frozenset[int]) -> Iterator[list[tuple[int, tuple[int, ...]]]]:
        if r == len(requests):
            yield []
            return
        count, fast_only = requests[r]
        pool = [i for i in free if i not in used and (devices[i][1] or not fast_only)]
        for combo in itertools.combinations(pool, count):
            for rest in assignments(r + 1, used | set(combo)):
                yield [(r, combo), *rest]

    for assignment in assignments(0, frozenset()):
        numas = {devices[i][0] for r, combo in assignment if r in s["constrained"] for i in combo}
        if len(numas) <= 1:
            return [(f"req-{r}", f"d{i}") for r, combo in assignment for i in combo]
    return None


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_allocator_finds_the_first_solution_in_search_order(s: dict) -> None:
    slices = [
        resource_slice(
            devices=[dev(f"d{i}", numa=numa, fast=fast) for i, (numa, fast) in enumerate(s["devices"])]
        )
    ]
    state = AllocatedState(allocated_devices={("driver-a", "pool-1", f"d{i}") for i in s["taken"]})
    constraints = []
    if s["constrained"]:
        names = [f"req-{r}" for r in sorted(s["constrained"])]
        constraints = [{"matchAttribute": "driver-a/numa", "requests": names}]
    c = claim(
        *(
            request(f"req-{r}", count=count, **({"selectors": FAST} if fast_only else {}))
            for r, (count, fast_only) in enumerate(s["requests"])
        ),
        constraints=constraints,
    )
    results = allocator(slices, state=state).allocate(node(), [c])
    expected = brute_force(s)
    if expected is None:
        assert isinstance(results, Failure) and results.kind == "nofit"
    else:
        assert picked(results) == [expected]


@st.composite
def multi_claim_scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 6))
    devices = [(draw(st.integers(0, 2)), draw(st.booleans())) for _ in range(n)]
    variant = st.tuples(st.integers(1, 3), st.booleans())
    claims = []
    for _ in range(draw(st.integers(1, 2))):
        requests = [draw(st.lists(variant, min_size=1, max_size=2)) for _ in range(draw(st.integers(1, 2)))]
        constrained = draw(st.sets(st.integers(0, len(requests) - 1)))
        claims.append({"requests": requests, "constrained": constrained})
    return {"devices": devices, "claims": claims}


def brute_force_claims(s: dict) -> list[list[tuple[str, str]]] | None:
    devices = s["devices"]
    slots = [(c, r) for c, cl in enumerate(s["claims"]) for r in range(len(cl["requests"]))]

    def search(k: int, used: frozenset[int], picks: list) -> list | None:
        if k == len(slots):
            for c, cl in enumerate(s["claims"]):
                numas = {
                    devices[i][0]
                    for (pc, r, _, combo) in picks
                    if pc == c and r in cl["constrained"]
                    for i in combo
                }
                if len(numas) > 1:
                    return None
            return picks
        c, r = slots[k]
        variants = s["claims"][c]["requests"][r]
        for v, (count, fast_only) in enumerate(variants):
            pool = [i for i in range(len(devices)) if i not in used and (devices[i][1] or not fast_only)]
            for combo in itertools.combinations(pool, count):
                found = search(
                    k + 1, used | set(combo), [*picks, (c, r, v if len(variants) > 1 else None, combo)]
                )
                if found is not None:
                    return found
        return None

    picks = search(0, frozenset(), [])
    if picks is None:
        return None
    out: list[list[tuple[str, str]]] = [[] for _ in s["claims"]]
    for c, r, v, combo in picks:
        name = f"req-{r}" if v is None else f"req-{r}/sub-{v}"
        out[c].extend((name, f"d{i}") for i in combo)
    return out


def _request(r: int, variants: list[tuple[int, bool]]) -> dict:
    if len(variants) == 1:
        count, fast_only = variants[0]
        return request(f"req-{r}", count=count, **({"selectors": FAST} if fast_only else {}))
    return {
        "name": f"req-{r}",
        "firstAvailable": [
            {
                "name": f"sub-{v}",
                "deviceClassName": "class-a",
                "count": count,
                **({"selectors": FAST} if fast else {}),
            }
            for v, (count, fast) in enumerate(variants)
        ],
    }


@settings(max_examples=150, deadline=None)
@given(multi_claim_scenarios())
def test_first_solution_across_claims_and_subrequests(s: dict) -> None:
    slices = [
        resource_slice(
            devices=[dev(f"d{i}", numa=numa, fast=fast) for i, (numa, fast) in enumerate(s["devices"])]
        )
    ]
    claims = []
    for c, cl in enumerate(s["claims"]):
        constraints = []
        if cl["constrained"]:
            names = [f"req-{r}" for r in sorted(cl["constrained"])]
            constraints = [{"matchAttribute": "driver-a/numa", "requests": names}]
        claims.append(
            claim(
                *(_request(r, v) for r, v in enumerate(cl["requests"])),
                name=f"claim-{c}",
                constraints=constraints,
            )
        )
    results = allocator(slices).allocate(node(), claims)
    expected = brute_force_claims(s)
    if expected is None:
        assert isinstance(results, Failure) and results.kind == "nofit"
    else:
        assert picked(results) == expected
