"""matchAttribute and distinctAttribute, one constraint at a time (extender/allocator/constraints.py).

The search calls ``add`` for every pick and ``remove`` for every undo, last in first out. A
constraint that accepts a device it should refuse allocates devices that do not belong together;
one that refuses wrongly, or forgets an undo, leaves a pod unscheduled that fits."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator.constraints import (
    ConstraintState,
    DistinctAttribute,
    MatchAttribute,
    MatchAttributeSets,
    applies,
    new_state,
)
from extender.model import AttributeValue, Constraint, Device
from tests.allocator.builders import allocator, claim, dev, node, picked, request, resource_slice

NAME = "driver-a/m"


def device(value: dict[str, Any] | None = None, name: str = "d") -> Device:
    """A device whose attribute ``m`` is ``value`` (an API attribute, e.g. {"int": 1}), or none."""
    attributes = {} if value is None else {"m": value}
    return resource_slice(devices=[{"name": name, "attributes": attributes}]).devices[0]


def value(api: dict[str, Any] | None) -> AttributeValue | None:
    """What the search hands a constraint for a device whose attribute ``m`` is ``api``."""
    return device(api).attribute(NAME)


S = {"string": "a"}
S_B = {"string": "b"}
INT_1 = {"int": 1}
BOOL_TRUE = {"bool": True}  # equal to 1 in Python, a different type to the API
LIST_A = {"strings": ["a"]}
UNTYPED = {"unknown": "a"}


def accepted(state: ConstraintState, *values: dict[str, Any] | None) -> list[bool]:
    """``add`` of a device per value for request "r", in order; each accepted one stays added."""
    return [state.add("r", value(v)) for v in values]


# --- matchAttribute ------------------------------------------------------------------------


def test_match_the_first_device_sets_the_value_the_others_must_have() -> None:
    assert accepted(MatchAttribute(NAME), S, S, S_B, None, INT_1, LIST_A, UNTYPED, S) == [
        True, True, False, False, False, False, False, True,
    ]


def test_match_compares_the_type_too() -> None:
    got = accepted(MatchAttribute(NAME), INT_1, BOOL_TRUE, {"string": "1"}, INT_1)
    assert got == [True, False, False, True]


@pytest.mark.parametrize("first", [LIST_A, UNTYPED], ids=["list", "untyped"])
def test_match_a_first_value_that_is_not_a_scalar_admits_no_second(first: dict[str, Any]) -> None:
    assert accepted(MatchAttribute(NAME), first, first, S) == [True, False, False]


def test_match_a_device_without_the_attribute_is_never_first() -> None:
    match = MatchAttribute(NAME)
    assert accepted(match, None, S_B) == [False, True]
    assert match.add("r", value(S)) is False  # the refused device set nothing


def test_match_undoing_every_pick_lets_the_next_device_set_a_new_value() -> None:
    match = MatchAttribute(NAME)
    assert accepted(match, S, S) == [True, True]
    match.remove("r")
    assert match.add("r", value(S_B)) is False  # one pick of "a" is still in
    match.remove("r")
    assert accepted(match, S_B, S_B, S) == [True, True, False]


@pytest.mark.parametrize(
    "values", [(S, S, S_B, None), (INT_1, BOOL_TRUE, INT_1), (LIST_A, LIST_A), (None, UNTYPED, S), ()]
)
def test_match_admits_and_key_answer_as_add_would(values: tuple[dict[str, Any] | None, ...]) -> None:
    """The pruner asks ``admits`` and compares ``key``s instead of calling ``add``."""
    match = MatchAttribute(NAME)
    accepted(match, *values)
    for candidate in (S, S_B, INT_1, BOOL_TRUE, LIST_A, UNTYPED, None):
        admitted = match.admits(device(candidate))
        trial = MatchAttribute(NAME)
        accepted(trial, *values)
        assert admitted == trial.add("r", value(candidate)), candidate
    assert match.key(device(S)) == ("string", "a")
    assert match.key(device(BOOL_TRUE)) == ("bool", True) != match.key(device(INT_1))
    assert [match.key(device(v)) for v in (None, LIST_A, UNTYPED)] == [None, None, None]


# --- matchAttribute with DRAListTypeAttributes -----------------------------------------------


def test_match_sets_narrow_to_what_every_device_has_and_undo_widens_again() -> None:
    sets = MatchAttributeSets(NAME)
    ab, bc = {"strings": ["a", "b"]}, {"strings": ["b", "c"]}
    got = accepted(sets, ab, bc, {"strings": ["a"]}, S_B, {"strings": ["c", "b"]})
    assert got == [True, True, False, True, True]
    for _ in range(3):
        sets.remove("r")
    assert sets.add("r", value(S)) is True  # back to {a, b}
    sets.remove("r")
    sets.remove("r")
    assert sets.add("r", value(INT_1)) is True  # empty again: any type may start


def test_match_sets_refuse_another_type_and_a_missing_or_untyped_value() -> None:
    sets = MatchAttributeSets(NAME)
    assert accepted(sets, None, UNTYPED, {"ints": [1, 2]}, {"strings": ["1"]}, BOOL_TRUE, INT_1) == [
        False, False, True, False, False, True,
    ]
    # The refusals pushed nothing: one undo takes back the last accepted device, {1}.
    sets.remove("r")
    assert sets.add("r", value({"int": 2})) is True


# --- distinctAttribute -----------------------------------------------------------------------


@pytest.mark.parametrize("keep_all", [True, False], ids=["1.37", "before"])
def test_distinct_values_must_differ(keep_all: bool) -> None:
    distinct = DistinctAttribute(NAME, sets=False, keep_all=keep_all)
    picks = [("r0", S), ("r1", S), ("r1", S_B), ("r2", None), ("r2", INT_1)]
    assert [distinct.add(r, value(v)) for r, v in picks] == [True, False, True, False, True]
    # Another type is another value; a value of no known type or a list cannot be shown to differ.
    assert distinct.add("r3", value(UNTYPED)) is False
    assert distinct.add("r3", value(LIST_A)) is False
    assert distinct.add("r3", value(BOOL_TRUE)) is True


def test_distinct_from_1_37_compares_with_every_value_and_undo_forgets_the_last() -> None:
    distinct = DistinctAttribute(NAME, sets=False, keep_all=True)
    assert accepted(distinct, S, S_B, S) == [True, True, False]
    distinct.remove("r")
    assert distinct.add("r", value(S_B)) is True  # "b" was taken back
    assert distinct.add("r", value(S)) is False  # "a" was not


def test_distinct_before_1_37_remembers_the_last_value_per_request_and_undo_forgets_it() -> None:
    distinct = DistinctAttribute(NAME, sets=False, keep_all=False)
    assert accepted(distinct, S, S_B, S) == [True, True, True]  # "a" was overwritten by "b"
    assert [distinct.add("other", value(v)) for v in (S, S_B)] == [False, True]
    distinct.remove("other")
    distinct.remove("r")
    distinct.remove("r")  # a second undo of the request finds nothing left: no error
    assert accepted(distinct, S_B) == [True]


def test_distinct_sets_must_be_disjoint_and_from_1_37_typed_even_first() -> None:
    new = DistinctAttribute(NAME, sets=True, keep_all=True)
    ab, b, one, c = {"strings": ["a", "b"]}, {"strings": ["b"]}, {"ints": [1]}, {"strings": ["c"]}
    got = accepted(new, UNTYPED, ab, b, one, S_B, c)
    assert got == [False, True, False, True, False, True]
    old = DistinctAttribute(NAME, sets=True, keep_all=False)
    picks = [("r0", UNTYPED), ("r1", S), ("r2", UNTYPED)]
    assert [old.add(r, value(v)) for r, v in picks] == [True, True, False]


# --- which requests, and which state --------------------------------------------------------


@pytest.mark.parametrize(
    ("requests", "parent", "sub", "expected"),
    [
        ((), "a", None, True),
        (("a",), "a", None, True),
        (("a",), "a", "x", True),  # the main request covers its subrequests
        (("a/x",), "a", "x", True),
        (("a/x",), "a", "y", False),
        (("a/x",), "a", None, False),
        (("b",), "a", None, False),
        (("b", "a/x"), "a", "x", True),
    ],
)
def test_a_constraint_applies_to_the_requests_it_names(
    requests: tuple[str, ...], parent: str, sub: str | None, expected: bool
) -> None:
    constraint = Constraint(requests=requests, match_attribute=NAME, distinct_attribute=None)
    assert applies(constraint, parent, sub) is expected


def test_each_constraint_gets_the_state_its_kind_and_the_features_call_for() -> None:
    match = Constraint(requests=(), match_attribute=NAME, distinct_attribute=None)
    distinct = Constraint(requests=(), match_attribute=None, distinct_attribute=NAME)
    assert type(new_state(match, False, True)) is MatchAttribute
    assert type(new_state(match, True, False)) is MatchAttributeSets
    state = new_state(distinct, True, False)
    assert isinstance(state, DistinctAttribute)
    assert (state._sets, state._keep_all) == (True, False)
    assert new_state(distinct, False, True).add("r", value(UNTYPED)) is True  # scalars, from 1.37
    with pytest.raises(ValueError, match=r"^constraint without matchAttribute or distinctAttribute$"):
        new_state(Constraint(requests=(), match_attribute=None, distinct_attribute=None), False, False)


# --- through the search ----------------------------------------------------------------------


def _role(name: str) -> list[dict[str, Any]]:
    return [{"cel": {"expression": f'device.attributes["driver-a"].{name}'}}]


@pytest.mark.parametrize("release", ["1.36", "1.37"])
def test_distinct_backtracking_past_a_request_forgets_its_value(release: str) -> None:
    """w takes A ("a"), x takes B then C, y finds nothing (it needs A): the search backtracks
    to w, which takes B ("b"); x must then be free to take C ("c") again, so y gets A."""
    slices = [
        resource_slice(
            devices=[
                dev("A", m="a", w=True, x=False, y=True),
                dev("B", m="b", w=True, x=True, y=False),
                dev("C", m="c", w=False, x=True, y=False),
            ]
        )
    ]
    c = claim(
        request("w", selectors=_role("w")),
        request("x", selectors=_role("x")),
        request("y", selectors=_role("y")),
        constraints=[{"distinctAttribute": NAME}],
    )
    results = allocator(slices, release=release).allocate(node(), [c])
    assert picked(results) == [[("w", "B"), ("x", "C"), ("y", "A")]]


def test_match_sets_backtracking_widens_the_intersection() -> None:
    """p takes P {a, b}, q takes Q1 {b}: r's R {a, c} shares nothing with {b}. Undoing Q1 must
    widen the intersection back to {a, b}, so that q takes Q2 {a} and r gets R."""

    def listed(name: str, role: str, *values: str) -> dict[str, Any]:
        roles = {r: {"bool": r == role} for r in "pqr"}
        return {"name": name, "attributes": {"m": {"strings": list(values)}, **roles}}

    slices = [
        resource_slice(
            devices=[
                listed("P", "p", "a", "b"),
                listed("Q1", "q", "b"),
                listed("Q2", "q", "a"),
                listed("R", "r", "a", "c"),
            ]
        )
    ]
    c = claim(
        *(request(r, selectors=_role(r)) for r in "pqr"),
        constraints=[{"matchAttribute": NAME}],
    )
    results = allocator(slices, gates=["DRAListTypeAttributes"], release="1.37").allocate(node(), [c])
    assert picked(results) == [[("p", "P"), ("q", "Q2"), ("r", "R")]]
