"""The full-Node text cache: least recently used out first, sized by its keys' bytes."""

from __future__ import annotations

from extender.api.text_cache import TextCache


def test_the_least_recently_used_texts_go_once_the_budget_is_passed():
    cache: TextCache[int] = TextCache(budget=10, largest=10)
    cache.put(b"aaaa", 1)
    cache.put(b"bbbb", 2)
    assert cache.get(b"aaaa") == 1  # now the most recently used
    cache.put(b"cccc", 3)  # 12 bytes: b"bbbb" goes
    assert b"bbbb" not in cache and cache.get(b"aaaa") == 1 and cache.get(b"cccc") == 3
    cache.put(b"cccc", 4)  # replaced, not counted twice
    cache.put(b"dd", 5)
    assert len(cache) == 3 and cache.get(b"cccc") == 4


def test_a_text_longer_than_the_largest_is_not_kept():
    cache: TextCache[int] = TextCache(budget=100, largest=5)
    cache.put(b"x" * 6, 1)
    cache.put(b"y" * 5, 2)
    assert cache.get(b"x" * 6) is None and cache.get(b"y" * 5) == 2


def test_texts_with_one_prefix_take_turns_and_are_never_mistaken():
    cache: TextCache[int] = TextCache(budget=40, largest=40, prefix=5)
    cache.put(b"nodeA-v1", 1)
    assert cache.get(b"nodeA-v2") is None  # same prefix, other text: not the value of another
    cache.put(b"nodeA-v2", 2)
    assert cache.get(b"nodeA-v2") == 2 and cache.get(b"nodeA-v1") is None
    assert b"nodeA-v1" not in cache and len(cache) == 1
    cache.put(b"nodeB-v1-longer", 3)
    cache.put(b"nodeA-v3-much-longer-text", 4)  # replaces v2: 15 + 25 bytes held, within 40
    assert cache.get(b"nodeB-v1-longer") == 3 and cache.get(b"nodeA-v3-much-longer-text") == 4


def test_a_chain_of_texts_is_found_in_place_up_to_the_first_not_here():
    cache: TextCache[int] = TextCache(budget=100, largest=100, prefix=3)
    cache.put(b"abc-1", 1)
    cache.put(b"xyz-22", 2)
    body = b"[abc-1,xyz-22,abc-1]"
    every = [(b"abc-1", 1), (b"xyz-22", 2), (b"abc-1", 1)]
    assert cache.chain(body, 1, len(body) - 1, ord(",")) == (every, 19)
    assert cache.chain(body, 1, 13, ord(",")) == ([(b"abc-1", 1), (b"xyz-22", 2)], 13)
    assert cache.chain(b"[abc-1,new-1,xyz-22]", 1, 19, ord(",")) == ([(b"abc-1", 1)], 7)  # one not here
    assert cache.chain(b"[abc-1,xyz-2]", 1, 12, ord(",")) == ([(b"abc-1", 1)], 7)  # same prefix, other text
    assert cache.chain(b"[abc-1;xyz-22]", 1, 13, ord(",")) is None  # another separator
    assert cache.chain(b"[abc-1,xyz-22x]", 1, 14, ord(",")) is None  # runs on past its text
    assert cache.chain(b"[abc-1,xyz-22]", 1, 12, ord(",")) is None  # ends past the end
    cache.put(b"ab", 3)
    assert cache.chain(b"[ab]", 1, 3, ord(",")) == ([], 1)  # shorter than the prefix: not found in place
