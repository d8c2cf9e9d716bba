"""Semver against blang/semver/v4 and Kubernetes' normalizeAndParse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from extender.cel.runtime.quoting import go_quote
from extender.cel.runtime.semver import Semver

S = Semver.parse


@pytest.mark.parametrize(
    ("text", "parts", "pre", "build"),
    [
        ("0.0.0", (0, 0, 0), (), ()),
        ("1.2.3", (1, 2, 3), (), ()),
        ("10.20.30", (10, 20, 30), (), ()),
        ("1.2.3-alpha", (1, 2, 3), ("alpha",), ()),
        ("1.2.3-alpha.1", (1, 2, 3), ("alpha", 1), ()),
        ("1.2.3-0.3.7", (1, 2, 3), (0, 3, 7), ()),
        ("1.2.3-x.7.z.92", (1, 2, 3), ("x", 7, "z", 92), ()),
        ("1.2.3-rc-1", (1, 2, 3), ("rc-1",), ()),
        ("1.2.3--", (1, 2, 3), ("-",), ()),
        ("1.2.3-0a", (1, 2, 3), ("0a",), ()),
        ("1.2.3+build.5", (1, 2, 3), (), ("build", "5")),
        ("1.2.3+001", (1, 2, 3), (), ("001",)),
        ("1.2.3-beta+exp.sha.5114f85", (1, 2, 3), ("beta",), ("exp", "sha", "5114f85")),
        ("1.2.3-a+b-c", (1, 2, 3), ("a",), ("b-c",)),
        ("18446744073709551615.0.0", (2**64 - 1, 0, 0), (), ()),
        ("1.2.3-18446744073709551615", (1, 2, 3), (2**64 - 1,), ()),
    ],
)
def test_parse_strict(
    text: str, parts: tuple[int, int, int], pre: tuple[object, ...], build: tuple[str, ...]
) -> None:
    v = S(text)
    assert (v.major, v.minor, v.patch) == parts
    assert v.pre == pre
    assert v.build == build
    assert str(v) == text


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "Version string empty"),
        ("1.2", "No Major.Minor.Patch elements found"),
        ("1", "No Major.Minor.Patch elements found"),
        ("v1.2.3", 'Invalid character(s) found in major number "v1"'),
        ("a.b.c", 'Invalid character(s) found in major number "a"'),
        ("01.2.3", 'Major number must not contain leading zeroes "01"'),
        ("1.x.3", 'Invalid character(s) found in minor number "x"'),
        ("1.02.3", 'Minor number must not contain leading zeroes "02"'),
        ("1.2.x", 'Invalid character(s) found in patch number "x"'),
        ("1.2.3.4", 'Invalid character(s) found in patch number "3.4"'),
        ("1.2.03", 'Patch number must not contain leading zeroes "03"'),
        ("1..3", 'strconv.ParseUint: parsing "": invalid syntax'),
        (".2.3", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.2.", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.2.-rc", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("18446744073709551616.0.0", 'strconv.ParseUint: parsing "18446744073709551616": value out of range'),
        ("1." + "9" * 5000 + ".0", 'strconv.ParseUint: parsing "' + "9" * 5000 + '": value out of range'),
        ("1.2.3-", "Prerelease is empty"),
        ("1.2.3-a..b", "Prerelease is empty"),
        ("1.2.3-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
        (
            "1.2.3-18446744073709551616",
            'strconv.ParseUint: parsing "18446744073709551616": value out of range',
        ),
        ("1.2.3-a_b", 'Invalid character(s) found in prerelease "a_b"'),
        ("1.2.3-\u00e4", 'Invalid character(s) found in prerelease "\u00e4"'),
        ("1.2.3+", "Build meta data is empty"),
        ("1.2.3+a..b", "Build meta data is empty"),
        ("1.2.3+a+b", 'Invalid character(s) found in build meta data "a+b"'),
        ("1.2.3 ", 'Invalid character(s) found in patch number "3 "'),
        ("1.2.3\n", 'Invalid character(s) found in patch number "3\\n"'),
        ("\u0661.2.3", 'Invalid character(s) found in major number "\u0661"'),
    ],
)
def test_parse_strict_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        S(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "normalized"),
    [
        ("v1.2.3", "1.2.3"),
        ("1.2", "1.2.0"),
        ("v1", "1.0.0"),
        ("1", "1.0.0"),
        ("01.01.01", "1.1.1"),
        ("00.00.00", "0.0.0"),
        ("v01.002", "1.2.0"),
        ("1.2.003-rc.1+b", "1.2.3-rc.1+b"),
        ("1.2.00-rc", "1.2.0-rc"),
        ("1.2.3", "1.2.3"),
    ],
)
def test_parse_normalized(text: str, normalized: str) -> None:
    assert str(S(text, normalize=True)) == normalized


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1.2-rc", "short version cannot contain PreRelease/Build meta data"),
        ("1+b", "short version cannot contain PreRelease/Build meta data"),
        # Zero-trimming prefixes "0" to a part that does not start with a digit.
        ("vv1.2.3", 'Invalid character(s) found in major number "0v1"'),
        ("V1.2.3", 'Invalid character(s) found in major number "0V1"'),
        (" 1.2.3", 'Invalid character(s) found in major number "0 1"'),  # no whitespace trimming
        ("", 'strconv.ParseUint: parsing "": invalid syntax'),
        ("1.2.3-01", 'Numeric PreRelease version must not contain leading zeroes "01"'),
    ],
)
def test_parse_normalized_errors(text: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        S(text, normalize=True)
    assert str(info.value) == message


def test_parse_rejects_non_strings() -> None:
    with pytest.raises(TypeError):
        S(123)  # type: ignore[arg-type]


# The precedence example of SemVer 2.0.0 (https://semver.org/spec/v2.0.0.html#spec-item-11),
# in increasing order.
_ORDERED = [
    "1.0.0-alpha",
    "1.0.0-alpha.1",
    "1.0.0-alpha.beta",
    "1.0.0-beta",
    "1.0.0-beta.2",
    "1.0.0-beta.11",
    "1.0.0-rc.1",
    "1.0.0",
    "1.0.1-0",
    "1.0.1",
    "1.1.0",
    "1.10.0",
    "2.0.0",
    "10.0.0",
]


@pytest.mark.parametrize("i", range(len(_ORDERED)))
def test_precedence(i: int) -> None:
    v = S(_ORDERED[i])
    for j, other_text in enumerate(_ORDERED):
        other = S(other_text)
        expected = (i > j) - (i < j)
        assert v.compare(other) == expected, (v, other)
        assert (v < other) == (i < j)
        assert (v >= other) == (i >= j)
        assert (v == other) == (i == j)


def test_prerelease_identifier_rules() -> None:
    assert S("1.0.0-2").compare(S("1.0.0-10")) == -1  # numeric, not lexical
    assert S("1.0.0-10").compare(S("1.0.0-a")) == -1  # numbers sort before text
    assert S("1.0.0-B").compare(S("1.0.0-a")) == -1  # ASCII order
    assert S("1.0.0-a.b").compare(S("1.0.0-a")) == 1  # longer wins when the prefix is equal


def test_build_metadata_is_ignored_for_equality_and_hash() -> None:
    a, b = S("1.2.3+a"), S("1.2.3+b.c")
    assert a == b
    assert a.compare(b) == 0
    assert hash(a) == hash(b)
    assert len({a, b, S("1.2.3")}) == 1
    assert str(a) == "1.2.3+a"  # but it is kept for output
    assert S("1.2.3-1") != S("1.2.3-1a")


def test_not_equal_to_other_types() -> None:
    assert S("1.2.3") != "1.2.3"
    with pytest.raises(TypeError):
        S("1.2.3").compare("1.2.3")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        _ = S("1.2.3") < "1.2.3"  # type: ignore[operator]


def test_immutable() -> None:
    v = S("1.2.3")
    with pytest.raises(AttributeError):
        v._major = 2  # type: ignore[misc]
    assert repr(v) == "Semver('1.2.3')"


def test_go_quote() -> None:
    assert go_quote('a"b\\c') == '"a\\"b\\\\c"'
    assert go_quote("\t\x01\x7f") == '"\\t\\x01\\x7f"'
    assert go_quote("\u00e9\u200b\U0001d7d8") == '"\u00e9\\u200b\U0001d7d8"'


_IDENT = st.one_of(st.integers(0, 10**6), st.from_regex(r"[a-zA-Z-][0-9a-zA-Z-]{0,5}", fullmatch=True))


@given(
    core=st.tuples(st.integers(0, 50), st.integers(0, 50), st.integers(0, 50)),
    pre=st.lists(_IDENT, max_size=3),
    build=st.lists(st.from_regex(r"[0-9a-zA-Z-]{1,4}", fullmatch=True), max_size=2),
)
def test_round_trip_and_normalisation_is_idempotent(
    core: tuple[int, int, int], pre: list[int | str], build: list[str]
) -> None:
    text = ".".join(map(str, core))
    if pre:
        text += "-" + ".".join(map(str, pre))
    if build:
        text += "+" + ".".join(build)
    v = S(text)
    assert str(v) == text
    assert S(text, normalize=True) == v
    assert S("v" + text, normalize=True) == v
    assert v.pre == tuple(pre)


def test_compare_with_anything_but_a_semver_is_refused_by_name() -> None:
    with pytest.raises(TypeError, match=r"^cannot compare Semver with str$"):
        Semver.parse("1.0.0").compare("1.0.0")  # type: ignore[arg-type]
