"""Kubernetes ``resource.Quantity`` (k8s.io/apimachinery/pkg/api/resource), exactly.

Values are exact (integer mantissa and base-10 exponent, never floats).  Besides the
value, upstream keeps an internal representation that leaks into observable results:

- ``int64Amount`` (int64 mantissa, exponent) versus ``inf.Dec`` (big mantissa, scale):
  CEL ``isInteger()``/``asInteger()`` succeed only for an ``int64Amount`` with a
  non-negative exponent, so ``quantity("1000m").isInteger()`` is false and so is
  ``quantity("1.5Ki").isInteger()`` (parsed through ``inf.Dec``);
- the mantissa/exponent split decides ``asApproximateFloat()`` rounding;
- the parser keeps the input string when it is "already canonical" and ``String()``
  returns it verbatim (``"+1Ki"``, ``"1.500"``).

So this class mirrors that representation and the parser's fast and slow paths.
Deliberate deviations, all for inputs upstream cannot handle in bounded time: numbers
with more than ``MAX_DIGITS`` digits and non-zero magnitudes of ``10**MAX_EXPONENT``
or more are rejected with ``ValueError``.
"""

from __future__ import annotations

import re
from fractions import Fraction
from functools import lru_cache
from typing import Final, Literal

QuantityFormat = Literal["DecimalExponent", "BinarySI", "DecimalSI"]
DECIMAL_EXPONENT: Final = "DecimalExponent"
BINARY_SI: Final = "BinarySI"
DECIMAL_SI: Final = "DecimalSI"
_FORMATS: Final = frozenset((DECIMAL_EXPONENT, BINARY_SI, DECIMAL_SI))

MAX_DIGITS: Final = 1000
MAX_EXPONENT: Final = 1000

_INT64_MIN: Final = -(1 << 63)
_INT64_MAX: Final = (1 << 63) - 1
_NANO: Final = -9
# maxInt64Factors upstream: the decimal digits an int64 always holds.
_MAX_INT64_FACTORS: Final = 18

_SPLIT_RE: Final = "^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$"
ERR_FORMAT_WRONG: Final = f"quantities must match the regular expression '{_SPLIT_RE}'"
ERR_NUMERIC: Final = "unable to parse numeric part of quantity"
ERR_SUFFIX: Final = "unable to parse quantity's suffix"
ERR_NOT_INTEGER: Final = "cannot convert value to integer"

# Same acceptance as upstream's hand-written scanner (sign, zeros, digits, optional
# fraction, suffix letters, optional signed digits); anything else is ErrFormatWrong.
_SCAN: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<zeros>0*)(?P<num>[0-9]*)(?:(?P<dot>\.)(?P<denom>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[+-]?[0-9]*)"
)
_EXPONENT_DIGITS: Final = re.compile(r"[+-]?[0-9]+")

_DECIMAL_SUFFIXES: Final = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}
_BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_SUFFIX_BY_EXPONENT: Final = {e: s for s, e in _DECIMAL_SUFFIXES.items()}
# Upstream's binary suffix table also maps 2^0 to "" so that 1024-multiples below 1Ki print bare.
_BINARY_SUFFIX_BY_POWER: Final = {0: "", **{e // 10: s for s, e in _BINARY_SUFFIXES.items()}}

# Go's math.Pow10 tables: the result of Pow10 is a product/quotient of two rounded
# constants, which asApproximateFloat inherits, so they are reproduced rather than
# replaced by Python's correctly rounded 10.0**n.
_POW10_TAB: Final = tuple(float(f"1e{i}") for i in range(32))
_POW10_POS32: Final = tuple(float(f"1e{32 * i}") for i in range(10))
_POW10_NEG32: Final = tuple(float(f"1e-{32 * i}") for i in range(11))


def _wrap_int32(n: int) -> int:
    return (n + (1 << 31)) % (1 << 32) - (1 << 31)


def _fits_int64(n: int) -> bool:
    return _INT64_MIN <= n <= _INT64_MAX


def _go_pow10(n: int) -> float:
    if 0 <= n <= 308:
        return _POW10_POS32[n // 32] * _POW10_TAB[n % 32]
    if -323 <= n <= 0:
        return _POW10_NEG32[-n // 32] / _POW10_TAB[-n % 32]
    return float("inf") if n > 0 else 0.0


def _scale_up_int64(value: int, times: int) -> int | None:
    """``positiveScaleInt64``: value * 10**times, or None when that leaves int64."""
    if value == 0:
        return 0
    if times > 19:
        return None
    result = value * 10**times
    return result if _fits_int64(result) else None


def _align(u1: int, e1: int, u2: int, e2: int) -> tuple[int, int, int]:
    """Both mantissas at the smaller exponent (zero mantissas need no scaling)."""
    e = min(e1, e2)
    if u1 and e1 != e:
        u1 *= 10 ** (e1 - e)
    if u2 and e2 != e:
        u2 *= 10 ** (e2 - e)
    return u1, u2, e


def _compare(u1: int, e1: int, u2: int, e2: int) -> int:
    s1 = (u1 > 0) - (u1 < 0)
    s2 = (u2 > 0) - (u2 < 0)
    if s1 != s2 or s1 == 0:
        return (s1 > s2) - (s1 < s2)
    a, b, _ = _align(u1, e1, u2, e2)
    return (a > b) - (a < b)


def _strip_factors(n: int, base: int) -> tuple[int, int]:
    times = 0
    while n % base == 0:
        n //= base
        times += 1
    return n, times


def _round_up_to_nano(magnitude: int, exponent: int) -> int:
    """Mantissa at exponent -9 of a positive value, rounded away from zero (inf.RoundUp)."""
    # int ** int is typed Any (a negative power would be a float); both powers here are >= 0.
    if exponent >= _NANO:
        scale: int = 10 ** (exponent - _NANO)
        return magnitude * scale
    shift = _NANO - exponent
    if shift > len(str(magnitude)):
        return 1
    divisor: int = 10**shift
    quotient, remainder = divmod(magnitude, divisor)
    return quotient + (remainder != 0)


class Quantity:
    """An immutable Kubernetes quantity; equality, ordering and hash go by value."""

    __slots__ = ("_dec", "_e", "_fmt", "_hash", "_s", "_u")

    _u: int
    _e: int
    _dec: bool
    _fmt: QuantityFormat
    _s: str | None
    _hash: int | None

    def __init__(self, mantissa: int, exponent: int, dec: bool, fmt: QuantityFormat, s: str | None = None):
        """Low-level constructor mirroring upstream's fields; use :meth:`parse` or :meth:`from_int`."""
        if mantissa == 0:
            # A zero's exponent only matters by its sign (isInteger) and beyond the float
            # range (asApproximateFloat gives NaN); clamping keeps later alignment cheap.
            exponent = max(-MAX_EXPONENT, min(MAX_EXPONENT, exponent))
        set_ = object.__setattr__
        set_(self, "_u", mantissa)
        set_(self, "_e", exponent)
        set_(self, "_dec", dec)
        set_(self, "_fmt", fmt)
        set_(self, "_s", s)
        set_(self, "_hash", None)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Quantity is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Quantity is immutable")

    # --- construction -------------------------------------------------------------------

    @classmethod
    def parse(cls, s: str) -> Quantity:
        """``resource.ParseQuantity``; ``ValueError`` carries upstream's message."""
        if not isinstance(s, str):
            raise TypeError(f"quantity must be a string, not {type(s).__name__}")
        return _parse(s)

    @classmethod
    def from_int(cls, n: int, fmt: QuantityFormat = BINARY_SI) -> Quantity:
        """``resource.NewQuantity(n, fmt)``."""
        if not isinstance(n, int) or isinstance(n, bool):
            raise TypeError(f"quantity value must be an int, not {type(n).__name__}")
        if not _fits_int64(n):
            raise ValueError(f"quantity value {n} is outside the int64 range")
        if fmt not in _FORMATS:
            raise ValueError(f"unknown quantity format {fmt!r}")
        return cls(n, 0, False, fmt)

    # --- value --------------------------------------------------------------------------

    @property
    def value(self) -> Fraction:
        if self._e >= 0:
            return Fraction(self._u * 10**self._e)
        return Fraction(self._u, 10**-self._e)

    @property
    def format(self) -> QuantityFormat:
        return self._fmt

    def sign(self) -> int:
        return (self._u > 0) - (self._u < 0)

    def is_integer(self) -> bool:
        """CEL ``isInteger()``: upstream ``AsInt64`` succeeds (representation-dependent)."""
        return self._as_int64() is not None

    def as_int(self) -> int:
        """CEL ``asInteger()``; ``ValueError`` where upstream ``AsInt64`` fails."""
        result = self._as_int64()
        if result is None:
            raise ValueError(ERR_NOT_INTEGER)
        return result

    def _as_int64(self) -> int | None:
        if self._dec:
            return None
        if self._e == 0:
            return self._u
        if self._e < 0:
            return None
        return _scale_up_int64(self._u, self._e)

    def as_approximate_float(self) -> float:
        """``AsApproximateFloat64``: float(mantissa) * Go's Pow10(exponent)."""
        try:
            base = float(self._u)
        except OverflowError:
            base = float("inf") if self._u > 0 else float("-inf")
        if self._e == 0:
            return base
        return base * _go_pow10(self._e)

    def ceil_int(self) -> int:
        """``Value()``: the integer value rounded away from zero (exact, never wraps)."""
        # int ** int is typed Any (a negative power would be a float); both powers are >= 0.
        if self._e >= 0:
            scale: int = 10**self._e
            return self._u * scale
        divisor: int = 10**-self._e
        quotient, remainder = divmod(abs(self._u), divisor)
        magnitude = quotient + (remainder != 0)
        return magnitude if self._u >= 0 else -magnitude

    # --- arithmetic (upstream Add/Sub/Neg, including the representation they produce) ----

    def add(self, other: Quantity | int) -> Quantity:
        """CEL ``add``; an int operand is ``NewQuantity(n, DecimalExponent)`` as upstream."""
        y = _coerce(other)
        fmt = y._fmt if self._u == 0 else self._fmt
        if not self._dec and not y._dec:
            fast = _int64_add(self._u, self._e, y._u, y._e)
            if fast is not None:
                return Quantity(fast[0], fast[1], False, fmt)
        a, b, e = _align(self._u, self._e, y._u, y._e)
        return Quantity(a + b, e, True, fmt)

    def sub(self, other: Quantity | int) -> Quantity:
        y = _coerce(other)
        fmt = y._fmt if self._u == 0 else self._fmt
        if not self._dec and not y._dec:
            if self._u == 0 and y._u == _INT64_MIN:
                return Quantity(-y._u, y._e, True, fmt)
            if y._u != _INT64_MIN:
                fast = _int64_add(self._u, self._e, -y._u, y._e)
                if fast is not None:
                    return Quantity(fast[0], fast[1], False, fmt)
        a, b, e = _align(self._u, self._e, y._u, y._e)
        return Quantity(a - b, e, True, fmt)

    def times(self, other: Quantity) -> Quantity:
        """The exact product in inf.Dec form, in this quantity's format (upstream multiplies
        ``AsDec()`` values and wraps them with ``NewDecimalQuantity``)."""
        return Quantity(self._u * other._u, self._e + other._e, True, self._fmt)

    def neg(self) -> Quantity:
        # -MinInt64 leaves int64, so upstream moves that one value to inf.Dec.
        return Quantity(-self._u, self._e, self._dec or self._u == _INT64_MIN, self._fmt)

    # --- comparison ---------------------------------------------------------------------

    def compare(self, other: Quantity | int) -> int:
        """``Cmp``: -1, 0 or 1 by value."""
        if isinstance(other, Quantity):
            return _compare(self._u, self._e, other._u, other._e)
        if isinstance(other, int) and not isinstance(other, bool):
            return _compare(self._u, self._e, other, 0)
        raise TypeError(f"cannot compare Quantity with {type(other).__name__}")

    def _cmp_or_none(self, other: object) -> int | None:
        if isinstance(other, Quantity):
            return _compare(self._u, self._e, other._u, other._e)
        if isinstance(other, int) and not isinstance(other, bool):
            return _compare(self._u, self._e, other, 0)
        return None

    def __eq__(self, other: object) -> bool:
        c = self._cmp_or_none(other)
        return NotImplemented if c is None else c == 0

    def __lt__(self, other: object) -> bool:
        c = self._cmp_or_none(other)
        return NotImplemented if c is None else c < 0

    def __le__(self, other: object) -> bool:
        c = self._cmp_or_none(other)
        return NotImplemented if c is None else c <= 0

    def __gt__(self, other: object) -> bool:
        c = self._cmp_or_none(other)
        return NotImplemented if c is None else c > 0

    def __ge__(self, other: object) -> bool:
        c = self._cmp_or_none(other)
        return NotImplemented if c is None else c >= 0

    def __hash__(self) -> int:
        h = self._hash
        if h is None:
            h = hash(self.value)
            object.__setattr__(self, "_hash", h)
        return h

    # --- output -------------------------------------------------------------------------

    def __str__(self) -> str:
        s = self._s
        if s is None:
            s = self._canonical()
            object.__setattr__(self, "_s", s)
        return s

    def __repr__(self) -> str:
        return f"Quantity({str(self)!r})"

    def _canonical(self) -> str:
        """``CanonicalizeBytes``."""
        if self._u == 0:
            return "0"
        fmt = self._fmt
        if fmt == BINARY_SI:
            if _compare(self._u, self._e, -1024, 0) > 0 and _compare(self._u, self._e, 1024, 0) < 0:
                fmt = DECIMAL_SI
            else:
                integer = self.value
                if integer.denominator != 1:
                    fmt = DECIMAL_SI
                else:
                    mantissa, power = _strip_factors(integer.numerator, 1024)
                    # Beyond Ei upstream finds no suffix and prints the bare mantissa.
                    return f"{mantissa}{_BINARY_SUFFIX_BY_POWER.get(power, '')}"
        mantissa, times = _strip_factors(self._u, 10)
        exponent = self._e + times
        while exponent % 3:
            mantissa *= 10
            exponent -= 1
        if fmt == DECIMAL_SI and exponent in _DECIMAL_SUFFIX_BY_EXPONENT:
            return f"{mantissa}{_DECIMAL_SUFFIX_BY_EXPONENT[exponent]}"
        return f"{mantissa}e{exponent}" if exponent else str(mantissa)


def _coerce(other: Quantity | int) -> Quantity:
    if isinstance(other, Quantity):
        return other
    if isinstance(other, int) and not isinstance(other, bool):
        return Quantity.from_int(other, DECIMAL_EXPONENT)
    raise TypeError(f"cannot combine Quantity with {type(other).__name__}")


def _int64_add(u1: int, e1: int, u2: int, e2: int) -> tuple[int, int] | None:
    """``int64Amount.Add``: the sum in int64 form, or None where upstream falls back to inf.Dec."""
    if u2 == 0:
        return u1, e1
    if u1 == 0:
        return u2, e2
    if e1 > e2:
        scaled = _scale_up_int64(u1, e1 - e2)
        if scaled is None:
            return None
        u1, e1 = scaled, e2
    elif e2 > e1:
        scaled = _scale_up_int64(u2, e2 - e1)
        if scaled is None:
            return None
        u2 = scaled
    total = u1 + u2
    return (total, e1) if _fits_int64(total) else None


def _interpret_suffix(suffix: str) -> tuple[int, int, QuantityFormat]:
    """(base, exponent, format) of a suffix, as upstream's suffixer interprets it."""
    if suffix in _DECIMAL_SUFFIXES:
        return 10, _DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in _BINARY_SUFFIXES:
        return 2, _BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE" and _EXPONENT_DIGITS.fullmatch(suffix[1:]):
        exponent = int(suffix[1:])
        if _fits_int64(exponent):
            # strconv.ParseInt to int64, then a silent int32 conversion.
            return 10, _wrap_int32(exponent), DECIMAL_EXPONENT
    raise ValueError(ERR_SUFFIX)


def _check_magnitude(s: str, magnitude: int, exponent: int) -> None:
    if magnitude and len(str(magnitude)) + exponent > MAX_EXPONENT:
        raise ValueError(
            f"quantity {s!r} is too large: magnitudes of 1e{MAX_EXPONENT} and more are not supported"
        )


# A pure function of a string whose answer (an immutable Quantity, or the ValueError, which
# lru_cache does not keep) never changes, bounded by least-recent eviction: shared by every
# app instance, like the code itself.
@lru_cache(maxsize=4096)
def _parse(s: str) -> Quantity:
    if not s:
        raise ValueError(ERR_FORMAT_WRONG)
    if s == "0":
        return Quantity(0, 0, False, DECIMAL_SI, "0")
    m = _SCAN.fullmatch(s)
    if m is None:
        raise ValueError(ERR_FORMAT_WRONG)
    positive = m["sign"] != "-"
    raw_num = m["num"]
    denom = m["denom"] or ""
    if len(raw_num) + len(denom) > MAX_DIGITS:
        raise ValueError(f"quantity {s[:40]!r}... has more than {MAX_DIGITS} digits")
    num = raw_num or "0"
    base, exponent, fmt = _interpret_suffix(m["suffix"])

    # Upstream's int64 fast path; its guards decide the representation and string reuse.
    precision = -1
    scale = 0
    multiplier = 1
    if fmt == BINARY_SI:
        if not denom:
            multiplier = 1 << exponent
            precision = 15 - len(num) - exponent * 3 // 10 - 1
    else:
        scale = exponent
        precision = _MAX_INT64_FACTORS - (len(num) + len(denom))
    if precision >= 0:
        scale = _wrap_int32(scale - len(denom))
        if scale >= _NANO:
            shifted = num + denom
            digits = int(shifted)
            # The precision guard keeps this below 1e18 (binary suffixes: below ~1.1e14): no int64 overflow.
            result = digits * multiplier
            _check_magnitude(s, result, scale)
            if not positive:
                result = -result
            if fmt == BINARY_SI:
                canonical = digits & 0x07 != 0
            else:
                canonical = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
            return Quantity(result, scale, False, fmt, s if canonical else None)

    # inf.Dec slow path.
    if not (m["zeros"] or raw_num or denom):
        # The numeric part has no digit at all (e.g. ".Ei"): inf.Dec rejects it.
        raise ValueError(ERR_NUMERIC)
    magnitude = int(raw_num + denom) if raw_num or denom else 0
    dec_exponent = -len(denom)
    if base == 10:
        dec_exponent = _wrap_int32(dec_exponent + exponent)
    else:
        magnitude <<= exponent
    if magnitude:
        _check_magnitude(s, magnitude, dec_exponent)
        magnitude = _round_up_to_nano(magnitude, dec_exponent)
        dec_exponent = _NANO
    if fmt == BINARY_SI:
        if _compare(magnitude, dec_exponent, _INT64_MAX, 0) > 0:
            magnitude, dec_exponent = _INT64_MAX, 0
        if magnitude and _compare(magnitude, dec_exponent, 1, 0) < 0:
            fmt = DECIMAL_SI
    return Quantity(magnitude if positive else -magnitude, dec_exponent, True, fmt)
