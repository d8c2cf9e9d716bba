"""Prioritize's node key: one integer that orders nodes as its three keys in turn would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from extender.scheduling.score import _UNCONTENDED, node_key

# The packing key's range: ``CompactRanker.rank`` is above -2**120; binpack and spread give a
# count of devices either way.
packing = st.integers(min_value=-(2**120) + 1, max_value=2**120 - 1)
keys = st.tuples(st.integers(min_value=0, max_value=8 * 128), st.booleans(), packing)


def as_int(key: tuple[int, bool, int]) -> int:
    prioritized, contended, packed = key
    return node_key(prioritized, packed) - (_UNCONTENDED if contended else 0)


@given(keys, keys)
def test_the_integer_orders_as_the_keys(a: tuple[int, bool, int], b: tuple[int, bool, int]) -> None:
    as_tuple = (a[0], not a[1], a[2]), (b[0], not b[1], b[2])
    assert (as_int(a) < as_int(b)) == (as_tuple[0] < as_tuple[1])
    assert (as_int(a) == as_int(b)) == (as_tuple[0] == as_tuple[1])


def test_the_extremes_of_each_key() -> None:
    lowest, highest = -(2**120) + 1, 2**120 - 1
    assert node_key(0, highest) < node_key(1, lowest)
    assert node_key(0, highest) - _UNCONTENDED < node_key(0, lowest)
    assert node_key(1, lowest) - _UNCONTENDED > node_key(0, highest)
