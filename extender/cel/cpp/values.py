"""Conversion between the Python library objects (Quantity, Semver) and their CEL messages."""

from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Any

from extender.cel.cpp.types import KEY_FIELD, QuantityMsg, SemverMsg
from extender.cel.runtime.semver import Semver
from extender.model.quantity import Quantity


def _decimal(value: Fraction) -> tuple[int, int]:
    """``value`` as mantissa and exponent of ten, without trailing zeros in the mantissa."""
    if value == 0:
        return 0, 0
    den = value.denominator
    twos = fives = 0
    while den % 2 == 0:
        den //= 2
        twos += 1
    while den % 5 == 0:
        den //= 5
        fives += 1
    exponent = -max(twos, fives)
    mantissa = int(value * 10**-exponent)
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    return mantissa, exponent


_NOT_INTEGER = "~"


def _quantity_key(q: Quantity) -> str:
    """The value as ``<mantissa>e<exponent>``, marked when upstream's AsInt64 fails on it.

    Messages compare by content, so the key holds the value (80Gi and 81920Mi share one) and
    the one trait of the representation that selectors can observe: isInteger/asInteger
    (upstream's "4000m" is not an integer, its "4" is). The price: those two are unequal here.
    """
    mantissa, exponent = _decimal(q.value)
    key = f"{mantissa}e{exponent}" if exponent else str(mantissa)
    return key if q.is_integer() else key + _NOT_INTEGER


def _parse_key(key: str) -> Quantity:
    """A Quantity with the key's value and integer trait, for a key whose object was forgotten."""
    text = key.removesuffix(_NOT_INTEGER)
    q = Quantity.parse(text)
    if key.endswith(_NOT_INTEGER) and q.is_integer():
        q = Quantity.parse(f"{q.value.numerator}.0")  # an integral value, written with a fraction
    return q


class QuantityMessages:
    """Quantities as the runtime's messages and back, for one C++ engine.

    The runtime hands the library functions only a message, whose key must lead back to a
    Quantity: the engine makes one of these and binds its library functions to it
    (``library.function_decls``), so nothing is shared between engines (or app instances).
    Plain dicts, emptied when full (``TABLE_LIMIT`` entries each): library functions run on
    the evaluating thread under the engine's lock, and a dict's get and set are atomic where an
    LRU's bookkeeping is not.
    """

    TABLE_LIMIT = 65536

    def __init__(self) -> None:
        # Key -> the most recent Quantity with that key, so add/sub/asApproximateFloat see the
        # representation a message came from (keys of equal value and trait rarely differ there).
        self._quantities: dict[str, Quantity] = {}
        # (canonical text, integer trait) -> key and message: devices share few distinct
        # capacities. The runtime copies a message it is given, so sharing one is safe.
        self._messages: dict[tuple[str, bool], tuple[str, Any]] = {}

    def message(self, q: Quantity) -> Any:
        """``q`` as a message, remembered so that :meth:`quantity` finds it again."""
        text = (str(q), q.is_integer())
        cached = self._messages.get(text)
        if cached is None:
            key = _quantity_key(q)
            cached = (key, QuantityMsg(**{KEY_FIELD: key}))
            _remember(self._messages, text, cached)
        _remember(self._quantities, cached[0], q)
        return cached[1]

    def quantity(self, msg: Any) -> Quantity:
        """The Quantity a message stands for (one of equal value and trait, if forgotten)."""
        key = getattr(msg, KEY_FIELD)
        q = self._quantities.get(key)
        if q is None:
            q = _parse_key(key)
            _remember(self._quantities, key, q)
        return q


def _remember(table: dict[Any, Any], key: Any, value: Any) -> None:
    if len(table) >= QuantityMessages.TABLE_LIMIT:
        table.clear()
    table[key] = value


def semver_message(v: Semver) -> Any:
    # Build metadata is dropped so message equality ignores it, like Semver.__eq__.
    return _semver_message_for(str(v).split("+", 1)[0])


# The two semver caches are pure functions of a string (a message and a Semver are never
# changed once made), bounded by least-recent eviction: kept process-wide, as any engine may
# share their answers.
@lru_cache(maxsize=4096)
def _semver_message_for(key: str) -> Any:
    return SemverMsg(**{KEY_FIELD: key})


@lru_cache(maxsize=4096)
def _semver_from_key(key: str) -> Semver:
    return Semver.parse(key)


def as_semver(msg: Any) -> Semver:
    return _semver_from_key(getattr(msg, KEY_FIELD))


def to_cel(value: Any) -> Any:
    """An attribute value as the runtime wants it (semver objects become messages)."""
    if isinstance(value, Semver):
        return semver_message(value)
    if isinstance(value, list):
        return [to_cel(item) for item in value]
    return value
