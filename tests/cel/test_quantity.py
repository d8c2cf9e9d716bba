"""Quantity against upstream resource.Quantity behaviour (values from apimachinery's own tests)."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.model.quantity import (
    BINARY_SI,
    DECIMAL_EXPONENT,
    DECIMAL_SI,
    ERR_FORMAT_WRONG,
    ERR_NUMERIC,
    ERR_SUFFIX,
    Quantity,
)

Q = Quantity.parse


@pytest.mark.parametrize(
    ("text", "value", "fmt"),
    [
        ("0", 0, DECIMAL_SI),
        ("0n", 0, DECIMAL_SI),
        ("0Ki", 0, BINARY_SI),
        ("1", 1, DECIMAL_SI),
        ("1Ki", 1024, BINARY_SI),
        ("7Mi", 7 * 2**20, BINARY_SI),
        ("5Ti", 5 * 2**40, BINARY_SI),
        ("4Pi", 4 * 2**50, BINARY_SI),
        ("3Ei", 3 * 2**60, BINARY_SI),
        ("100Ti", 100 * 2**40, BINARY_SI),
        ("5n", Fraction(5, 10**9), DECIMAL_SI),
        ("4u", Fraction(4, 10**6), DECIMAL_SI),
        ("3m", Fraction(3, 1000), DECIMAL_SI),
        ("50k", 50_000, DECIMAL_SI),
        ("300T", 300 * 10**12, DECIMAL_SI),
        ("1E", 10**18, DECIMAL_SI),
        ("12E", 12 * 10**18, DECIMAL_SI),
        ("1E-3", Fraction(1, 1000), DECIMAL_EXPONENT),
        ("1e3", 1000, DECIMAL_EXPONENT),
        ("1.3E+6", 1_300_000, DECIMAL_EXPONENT),
        ("1.7E18", 17 * 10**17, DECIMAL_EXPONENT),
        ("100.035k", 100_035, DECIMAL_SI),
        ("0.0005k", Fraction(1, 2), DECIMAL_SI),
        ("0.5e-2", Fraction(5, 1000), DECIMAL_EXPONENT),
        ("6.987654321G", 6_987_654_321, DECIMAL_SI),
        ("1.01E", 101 * 10**16, DECIMAL_SI),
        ("100.035Ki", Fraction(10243584, 100), BINARY_SI),
        ("0.5Mi", 2**19, BINARY_SI),
        ("0.025Ti", Fraction("27487790694.4"), BINARY_SI),
        (".001", Fraction(1, 1000), DECIMAL_SI),
        ("1.", 1, DECIMAL_SI),
        ("1.G", 10**9, DECIMAL_SI),
        ("-1.5Gi", -3 * 2**29, BINARY_SI),
        ("+8k", 8000, DECIMAL_SI),
        ("12345678901234567890", 12345678901234567890, DECIMAL_SI),
    ],
)
def test_parse_value_and_format(text: str, value: Fraction | int, fmt: str) -> None:
    q = Q(text)
    assert q.value == Fraction(value)
    assert q.format == fmt


@pytest.mark.parametrize(
    ("text", "nanos", "fmt"),
    [
        ("3.001n", 4, DECIMAL_SI),
        ("1.1E-9", 2, DECIMAL_EXPONENT),
        ("0.0000000001", 1, DECIMAL_SI),
        ("0.00000000050", 1, DECIMAL_SI),
        ("0.9n", 1, DECIMAL_SI),
        ("0.00000012345", 124, DECIMAL_SI),
        ("1e-20", 1, DECIMAL_EXPONENT),
        ("1e-2147483648", 1, DECIMAL_EXPONENT),
        # Binary SI below one switches to decimal SI.
        ("0.000000000001Ki", 2, DECIMAL_SI),
        # Rounding is away from zero.
        ("-0.9n", -1, DECIMAL_SI),
        ("-3.001n", -4, DECIMAL_SI),
    ],
)
def test_sub_nano_precision_rounds_away_from_zero(text: str, nanos: int, fmt: str) -> None:
    q = Q(text)
    assert q.value == Fraction(nanos, 10**9)
    assert q.format == fmt


def test_binary_si_is_capped_at_int64_max() -> None:
    assert Q("8Ei").value == 2**63 - 1
    assert Q("9223372036854775807Ki").value == 2**63 - 1
    assert Q("-9Ei").value == -(2**63 - 1)
    # Decimal quantities are not capped.
    assert Q("10E").value == 10**19


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", ERR_FORMAT_WRONG),
        (" 1", ERR_FORMAT_WRONG),
        ("1 ", ERR_FORMAT_WRONG),
        ("1\n", ERR_FORMAT_WRONG),
        ("1.1.M", ERR_FORMAT_WRONG),
        ("1+1.0M", ERR_FORMAT_WRONG),
        ("aoeu", ERR_FORMAT_WRONG),
        ("1GiB", ERR_FORMAT_WRONG),
        ("1e3.5", ERR_FORMAT_WRONG),
        ("1e3e3", ERR_FORMAT_WRONG),
        ("\u0661", ERR_FORMAT_WRONG),  # a non-ASCII digit
        ("0.1mi", ERR_SUFFIX),
        (".5i", ERR_SUFFIX),
        ("1i", ERR_SUFFIX),
        ("-3.01i", ERR_SUFFIX),
        ("-3.01e-", ERR_SUFFIX),
        ("1e", ERR_SUFFIX),
        ("1iG", ERR_SUFFIX),
        ("1ee3", ERR_SUFFIX),
        ("1-3", ERR_SUFFIX),
        ("1e99999999999999999999", ERR_SUFFIX),
        (".Ei", ERR_NUMERIC),
        ("-Ei", ERR_NUMERIC),
    ],
)
def test_parse_errors_carry_upstream_messages(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        Q(text)
    assert str(info.value) == message


def test_error_message_quotes_upstream_regex() -> None:
    assert ERR_FORMAT_WRONG == (
        "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
    )


@pytest.mark.parametrize("text", ["-", ".", "-.", "+", "Ki", ".Ki", "k", "000", "-0.0"])
def test_scanner_quirks_parse_as_zero(text: str) -> None:
    # Upstream's scanner accepts a numeric part without digits when the fast path applies.
    assert Q(text).sign() == 0


def test_unbounded_inputs_get_a_clear_error() -> None:
    with pytest.raises(ValueError, match="too large"):
        Q("1e999999")
    with pytest.raises(ValueError, match="digits"):
        Q("1" * 2000)
    with pytest.raises(TypeError, match="string"):
        Quantity.parse(5)  # type: ignore[arg-type]


def test_exponent_is_wrapped_to_int32_like_upstream() -> None:
    # strconv.ParseInt then int32(): 2^32 + 3 becomes 3.
    assert Q("1e4294967299").value == 1000


@pytest.mark.parametrize(
    ("canonical", "alternate"),
    [
        ("1Gi", "1024Mi"),
        ("300Mi", "307200Ki"),
        ("1001Gi", "1025024Mi"),
        ("1Ti", "1024Gi"),
        ("1G", "1000M"),
        ("1G", "0.001T"),
        ("1m", "1000u"),
        ("1080m", "1.08"),
        ("1080m", "1080000000n"),
        ("1e21", "1000E"),
        ("5e21", "5000E"),
        ("1e24", "1000000E"),
        ("1e9", ".001e12"),
        ("1e-3", "0.001e0"),
        ("1e-9", "1000e-12"),
        ("0", "00"),
        ("1500m", "1.5"),
        ("1k", "1000"),
        ("1536Mi", "1.5Gi"),
        ("1024m", ".001Ki"),
        ("1024u", ".000001Ki"),
        ("1024n", ".000000001Ki"),
        ("2n", ".000000000001Ki"),
        ("512", "0.5Ki"),
        ("8Ki", "8Ki"),
        ("1Mi", "1024Ki"),
        ("1e3", "1000e0"),
        ("9223372036854775807", "8Ei"),
        ("-1Mi", "-1024Ki"),
        ("-1024", "-1024"),
    ],
)
def test_canonical_string(canonical: str, alternate: str) -> None:
    assert str(Q(alternate)) == canonical
    assert str(Q(canonical)) == canonical


def test_already_canonical_input_string_is_kept_verbatim() -> None:
    # The parser reuses the input when it judges it canonical, sign and all.
    assert str(Q("+1Ki")) == "+1Ki"
    assert str(Q("01Ki")) == "01Ki"
    assert str(Q("1.500")) == "1.500"
    assert str(Q("1E3")) == "1E3"
    assert str(Q("-100")) == "-100"


def test_binary_si_output_falls_back_to_decimal() -> None:
    assert str(Quantity.from_int(1023, BINARY_SI)) == "1023"
    assert str(Quantity.from_int(1024, BINARY_SI)) == "1Ki"
    assert str(Quantity.from_int(1025, BINARY_SI)) == "1025"
    assert str(Q("500m").add(Q("1Ki"))) == "1024500m"  # zero-format rule: result keeps DecimalSI
    assert str(Q("1Ki").add(Q("500m"))) == "1024500m"  # BinarySI but not an integer
    assert str(Q("1Ki").sub(Q("2Ki"))) == "-1Ki"


def test_from_int() -> None:
    assert str(Quantity.from_int(1000, DECIMAL_SI)) == "1k"
    assert str(Quantity.from_int(1234000, DECIMAL_SI)) == "1234k"
    assert str(Quantity.from_int(1000000, DECIMAL_EXPONENT)) == "1e6"
    assert str(Quantity.from_int(2**20)) == "1Mi"
    assert Quantity.from_int(5).is_integer()
    with pytest.raises(ValueError, match="int64"):
        Quantity.from_int(2**63)
    with pytest.raises(ValueError, match="format"):
        Quantity.from_int(1, "Bogus")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        Quantity.from_int(True)


def test_equality_and_hash_are_by_value() -> None:
    assert Q("80Gi") == Q("81920Mi")
    assert Q("1Gi") == 1073741824
    assert Q("1k") == Q("1e3") == Q("1000000m")
    assert hash(Q("1k")) == hash(Q("1e3")) == hash(1000)
    assert hash(Q("1.5")) == hash(Q("1500m"))
    assert len({Q("1Gi"), Q("1024Mi"), Q("1073741824")}) == 1
    assert Q("1") != "1"
    assert Q("1") != True  # noqa: E712 - booleans are not numbers here
    assert Q("0") == Q("-0.0Ki")


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        ("0", "0", 0),
        ("100m", "50m", 1),
        ("50m", "100m", -1),
        ("10000T", "100Gi", 1),
        ("50M", "50Mi", -1),
        ("200M", "0.2G", 0),
        ("-1", "1n", -1),
        ("-2", "-1", -1),
        ("1e30", "1E", 1),
        ("1n", "0", 1),
    ],
)
def test_compare(a: str, b: str, expected: int) -> None:
    assert Q(a).compare(Q(b)) == expected
    assert Q(b).compare(Q(a)) == -expected
    assert (Q(a) < Q(b)) == (expected < 0)
    assert (Q(a) <= Q(b)) == (expected <= 0)
    assert (Q(a) > Q(b)) == (expected > 0)
    assert (Q(a) >= Q(b)) == (expected >= 0)


def test_compare_rejects_other_types() -> None:
    with pytest.raises(TypeError):
        Q("1").compare("1")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _ = Q("1") < 1.5  # type: ignore[operator]


@pytest.mark.parametrize(
    ("text", "integer"),
    [
        ("0", 0),
        ("8", 8),
        ("1k", 1000),
        ("1e3", 1000),
        ("1Ki", 1024),
        ("5Ti", 5 * 2**40),
        ("9E", 9 * 10**18),
        # AsInt64 fails for a negative exponent and for the inf.Dec form, whatever the value.
        ("1000m", None),
        ("1.0", None),
        ("0.0", None),
        ("1.5Ki", None),
        ("8Ei", None),
        ("3Ei", None),
        ("4Pi", None),
        ("100Ti", None),
        ("10E", None),
        ("1500m", None),
    ],
)
def test_is_integer_and_as_int_follow_as_int64(text: str, integer: int | None) -> None:
    q = Q(text)
    assert q.is_integer() == (integer is not None)
    if integer is None:
        with pytest.raises(ValueError, match="cannot convert value to integer"):
            q.as_int()
    else:
        assert q.as_int() == integer


def test_arithmetic_representation_decides_is_integer() -> None:
    assert Q("1k").add(Q("1")).as_int() == 1001
    assert not Q("1").add(Q("500m")).is_integer()
    assert not Q("1500m").add(Q("500m")).is_integer()  # 2 at scale -3
    assert Q("1.5Ki").sub(Q("512")).value == 1024
    assert not Q("1.5Ki").sub(Q("512")).is_integer()  # inf.Dec stays inf.Dec
    # int64 overflow moves the sum to inf.Dec.
    big = Quantity.from_int(2**63 - 1)
    total = big.add(Quantity.from_int(1))
    assert total.value == 2**63
    assert not total.is_integer()


def test_add_and_sub_with_ints_and_formats() -> None:
    assert Q("1Gi").add(Q("1Gi")) == Q("2Gi")
    assert str(Q("1Gi").add(Q("1Gi"))) == "2Gi"
    assert str(Q("0").add(Q("1Gi"))) == "1Gi"  # a zero receiver takes the operand's format
    assert str(Q("100m").add(Q("0"))) == "100m"
    assert str(Q("0").sub(Q("100m"))) == "-100m"
    assert str(Q("1Gi").add(1)) == "1073741825"
    assert Q("1").sub(3).value == -2
    assert str(Q("0").add(5)) == "5"  # int operands are DecimalExponent quantities
    assert str(Q("0").add(5000)) == "5e3"
    with pytest.raises(TypeError):
        Q("1").add(1.5)  # type: ignore[arg-type]


def test_int64_boundaries_of_add_sub_neg() -> None:
    most_negative = Quantity.from_int(-(2**63), DECIMAL_SI)
    assert most_negative.neg().value == 2**63
    assert not most_negative.neg().is_integer()
    assert Q("0").sub(most_negative).value == 2**63
    assert Q("1").sub(most_negative).value == 2**63 + 1
    assert Q("-1").sub(Quantity.from_int(2**63 - 1)).value == -(2**63)
    assert Q("-1").sub(Quantity.from_int(2**63 - 1)).is_integer()


def test_neg() -> None:
    assert str(Q("9.01").neg()) == "-9010m"
    assert str(Q("1Gi").neg()) == "-1Gi"
    assert Q("1Gi").neg().format == BINARY_SI
    assert Q("0").neg().sign() == 0


def test_sign() -> None:
    assert Q("-1n").sign() == -1
    assert Q("0Gi").sign() == 0
    assert Q("5").sign() == 1


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("1Gi", 1073741824.0),
        ("1.5", 1.5),
        ("0.3", 0.30000000000000004),  # 3 * Go's Pow10(-1), not the nearest double to 0.3
        ("300m", 0.3),
        ("1e-9", 1e-9),
        ("1e30", 1e30),
        ("1e400", float("inf")),
        ("-1e400", float("-inf")),
        ("0", 0.0),
    ],
)
def test_as_approximate_float(text: str, expected: float) -> None:
    assert Q(text).as_approximate_float() == expected


def test_as_approximate_float_of_huge_zero_is_nan_like_go() -> None:
    value = Q("0e400").as_approximate_float()
    assert value != value


@pytest.mark.parametrize(
    ("text", "expected"),
    [("1", 1), ("1500m", 2), ("1n", 1), ("-1500m", -2), ("1k", 1000), ("1.5Ki", 1536), ("0", 0)],
)
def test_ceil_int_rounds_away_from_zero(text: str, expected: int) -> None:
    assert Q(text).ceil_int() == expected


def test_immutable() -> None:
    q = Q("1")
    with pytest.raises(AttributeError):
        q._u = 2  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del q._u
    assert repr(q) == "Quantity('1')"


_MULTIPLIERS: dict[str, Fraction] = {
    **{s: Fraction(10) ** e for s, e in [("", 0), ("n", -9), ("u", -6), ("m", -3), ("k", 3), ("M", 6)]},
    **{s: Fraction(10) ** e for s, e in [("G", 9), ("T", 12), ("P", 15), ("E", 18), ("e3", 3), ("e-4", -4)]},
    **{s: Fraction(2) ** (10 * (i + 1)) for i, s in enumerate(["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"])},
}


@given(
    sign=st.sampled_from(["", "-", "+"]),
    whole=st.integers(0, 10**12),
    frac=st.one_of(st.just(""), st.from_regex(r"\.[0-9]{0,12}", fullmatch=True)),
    suffix=st.sampled_from(sorted(_MULTIPLIERS)),
)
def test_value_is_exact_and_survives_its_string(sign: str, whole: int, frac: str, suffix: str) -> None:
    q = Q(f"{sign}{whole}{frac}{suffix}")
    # The exact decimal, rounded away from zero to nano precision (binary SI capped at int64).
    exact = Fraction(f"{whole}{frac.rstrip('.')}") * _MULTIPLIERS[suffix]
    expected = Fraction(-((-exact * 10**9) // 1), 10**9)
    if suffix.endswith("i"):
        expected = min(expected, Fraction(2**63 - 1))
    if sign == "-":
        expected = -expected
    assert q.value == expected
    assert Q(str(q)) == q


@pytest.mark.parametrize(
    ("text", "other", "order"),
    [
        ("1", 1, 0),
        ("1", 2, -1),
        ("1500m", 1, 1),
        ("1k", 1000, 0),
        ("1Ki", 1025, -1),
        ("-2", -1, -1),
        ("0", 0, 0),
        ("-500m", 0, -1),
    ],
)
def test_compare_with_an_int_orders_by_value(text: str, other: int, order: int) -> None:
    # Capacity arithmetic compares quantities with plain ints; equal values compare 0.
    assert Q(text).compare(other) == order


@pytest.mark.parametrize(("other", "name"), [(True, "bool"), (1.0, "float"), ("1", "str")])
def test_compare_with_anything_else_is_refused_by_name(other: object, name: str) -> None:
    with pytest.raises(TypeError, match=rf"^cannot compare Quantity with {name}$"):
        Q("1").compare(other)  # type: ignore[arg-type]
