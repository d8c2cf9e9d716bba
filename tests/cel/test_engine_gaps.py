"""Kubernetes semantics that one engine once got wrong: both engines must give upstream's answer."""

from __future__ import annotations

import pytest

from extender.cel import CelCompileError, CelRuntimeError
from extender.cel.device import PlainDevice, view_for
from extender.cel.engine import Engine, make_engine, unavailable_reason

G = 'device.attributes["gpu.example.com"]'
DEVICE = PlainDevice(
    driver="gpu.example.com",
    attributes={"model": {"string": "a100"}, "ids": {"ints": [1, 2, 3]}},
    capacity={"memory": {"value": "80Gi"}, "cores": {"value": "4"}},
    allow_multiple_allocations=False,
)


@pytest.fixture(scope="module", params=["cpp", "python"])
def engine(request: pytest.FixtureRequest) -> Engine:
    reason = unavailable_reason(request.param)
    if reason is not None:
        pytest.skip(reason)
    return make_engine(request.param)


def outcome(engine: Engine, expression: str) -> str:
    try:
        program = engine.compile(expression)
    except CelCompileError:
        return "compile-error"
    try:
        return str(program.evaluate(view_for(DEVICE))).lower()
    except CelRuntimeError:
        return "error"


CASES = [
    # A member call on an int literal: `1.` is no double in CEL's grammar.
    ("1.includes(1)", "true"),
    ("1.includes(2)", "false"),
    ("1. == 1.0", "compile-error"),
    ("1.5 == 1.5 && .5 == 0.5 && 1e3 == 1000.0", "true"),
    # The missing-domain default reaches a name bound to the map.
    ('cel.bind(a, device.attributes, a["absent.dom"].size() == 0)', "true"),
    ('cel.bind(c, device.capacity, c["absent.dom"].size() == 0)', "true"),
    ('cel.bind(a, device.attributes, a["gpu.example.com"].model == "a100")', "true"),
    ('cel.bind(a, device.attributes, has(a["absent.dom"].x))', "false"),
    ('cel.bind(a, device.attributes, a["absent.dom"].x == 1)', "error"),
    ('cel.bind(a, device.attributes, "absent.dom" in a)', "false"),
    # Quantities are equal by value wherever equality is used.
    ('[quantity("4")] == [quantity("4000m")]', "true"),
    ('[quantity("4")] != [quantity("4000m")]', "false"),
    ('[quantity("4")] == [quantity("4001m")]', "false"),
    ('quantity("4") in [quantity("4000m")]', "true"),
    ('quantity("4") in [quantity("5")]', "false"),
    ('dyn(quantity("4")) == quantity("4000m")', "true"),
    ('{"a": quantity("4")} == {"a": quantity("4000m")}', "true"),
    ('device.capacity["gpu.example.com"].cores in [quantity("4000m"), quantity("1")]', "true"),
    ('quantity("1") in [dyn(quantity("1000m"))]', "true"),
    ('"cores" in device.capacity["gpu.example.com"]', "true"),
    ('quantity("4").isInteger() && !quantity("4000m").isInteger()', "true"),
    ('dyn(quantity("4")) == dyn(quantity("4000m"))', "true"),
    ('[dyn(quantity("4"))] == [dyn(quantity("4000m"))]', "true"),
    ('quantity("4") == quantity("4000m") == true', "true"),
    ('quantity("4") == quantity("5") != true', "true"),
    ('quantity("4") in [quantity("4000m")] == true', "true"),
    ('dyn(true) == dyn(1) || quantity("1") != quantity("1")', "false"),
    ('dyn({"a": 1}) == dyn({"a": 1.0}) && quantity("1").isInteger()', "true"),
    # optMap/optFlatMap: the value bound to the name; an empty optional skips the body.
    ("optional.of(2).optMap(x, x + 1).value() == 3", "true"),
    ("optional.none().optMap(x, x + 1).hasValue()", "false"),
    ("optional.none().optMap(x, 1 / 0).hasValue()", "false"),
    ("optional.of(1).optMap(x, 1 / 0).hasValue()", "error"),
    ("optional.of(2).optFlatMap(x, optional.of(x * 2)).value() == 4", "true"),
    ("optional.of(2).optFlatMap(x, x > 2 ? optional.of(x) : optional.none()).hasValue()", "false"),
    ("optional.of(2).optFlatMap(x, x * 2).value() == 4", "compile-error"),
    ("1.optMap(x, x).hasValue()", "compile-error"),
    ("dyn(1).optMap(x, x).hasValue()", "error"),
    (f'{G}.?model.optMap(m, m + "x").value() == "a100x"', "true"),
    (f'{G}.?nope.optMap(m, m + "x").orValue("z") == "z"', "true"),
    # Optional elements of list and map literals.
    ("[1, ?optional.of(2), ?optional.none()] == [1, 2]", "true"),
    ("size([?optional.none()]) == 0", "true"),
    (f'[?{G}.?model, ?{G}.?nope] == ["a100"]', "true"),
    ('"x" in [?optional.of("x")]', "true"),
    ("[?1] == [1]", "compile-error"),
    ('[1, ?optional.of("a")].size() == 2', "compile-error"),
    ('{"a": 1, ?"b": optional.none(), ?"c": optional.of(3)} == {"a": 1, "c": 3}', "true"),
    ('{?"a": optional.none(), "a": 2}["a"] == 2', "true"),
    # A repeated map key keeps the last value; an absent optional entry removes the key.
    ('{?"a": optional.of(1), "a": 2}.size() == 1', "true"),
    ('{"a": 1, ?"a": optional.none()}.size() == 0', "true"),
    ('{"a": 1, ?"a": optional.of(3), "b": 2}["a"] == 3', "true"),
    ("{true: 1, false: 2, true: 3}[true] == 3", "true"),
    ("{device.driver: 1, 'gpu.example.com': 2}[device.driver] == 2", "true"),
    ("[1, 2].map(x, {'k': x, 'k': 3}['k']) == [3, 3]", "true"),
    ("{'a': 1 / 0, 'a': 2}['a'] == 2", "error"),
    ('{"k": true ? 1 : 2, ?"j": optional.of(3)}.j == 3', "true"),
    ('{?"a": 1}.size() == 1', "compile-error"),
    # Qualifying an optional value is optional selection; has() looks inside a present one.
    ("optional.of({'c': {}}).c.missing.orValue(1) == 1", "true"),
    ("optional.of({'c': {}}).c['missing'].hasValue()", "false"),
    ("has(optional.of({'a': 1}).a) && !has(optional.of({'a': 1}).b)", "true"),
    ("has(optional.none().a)", "false"),
    ("has(optional.of(1).a)", "compile-error"),
    ("type(optional.none()) == optional_type", "true"),
    ("optional.of([1])[3] == optional.none() && !optional.of([[1]])[0][5].hasValue()", "true"),
    ("optional.of({'a': [1]}).a[2].orValue(7) == 7 && optional.of([1])[0] == optional.of(1)", "true"),
    # An empty literal, optional.none() or what is taken from them takes the other entries' type.
    ("[{}.?c, optional.of(1)].size() == 2", "true"),
    ("[[][0], 1].size() == 1", "error"),
    ("[optional.none(), 1].size() == 2", "compile-error"),
    ("[[], 1].size() == 2", "compile-error"),
    # An integer against a double compares as a double (within the integer type's range).
    ("dyn(9223372036854775807) == 9223372036854775808.0", "true"),
    ("dyn(9007199254740993) == 9007199254740992.0", "true"),
    ("dyn(9007199254740993) > 9007199254740992.0", "false"),
    ("dyn(18446744073709551615u) >= 18446744073709551616.0", "true"),
    ("dyn(-9223372036854775808) == -9223372036854775808.0", "true"),
    ("dyn(1u) > -1.0 && dyn(-1) < 0u", "true"),
    # int() of a double rejects -2**63 itself (cel-go's doubleToInt64Checked).
    ("int(-9223372036854775808.0) == 0", "compile-error"),
    ("[-9223372036854775808.0].exists(x, int(x) < 0)", "error"),
    ("[-9223372036854774784.0].exists(x, int(x) < 0)", "true"),
    # Backtick-quoted field names are read by the released parser (cel-go v0.29.2); backticks
    # in strings and comments are just characters.
    ("{'a-b': 1}.`a-b` == 1", "true"),
    ("has({'a': 1}.`a`)", "true"),
    ("{'a b': 1}.?`a b`.orValue(0) == 1", "true"),
    ("`a` == 1", "compile-error"),
    ("'`' + r'`' + '''`''' == '```' // `comment`", "true"),
    # google.protobuf wrapper literals: the primitive, its range checked when evaluated.
    ("google.protobuf.Int32Value{value: 1} + 1 == 2", "true"),
    ("google.protobuf.Int32Value{value: 2147483648} == 0", "error"),
    ("google.protobuf.UInt32Value{value: 4294967296u} == 0u", "error"),
    ("google.protobuf.Int32Value{value: dyn('a')} == 1", "error"),
    ("google.protobuf.Int32Value{value: 1u} == 1", "compile-error"),
    ("google.protobuf.Int32Value{value: null} == null", "compile-error"),
    ("google.protobuf.Int32Value{valu: 1} == 1", "compile-error"),
    ("google.protobuf.Int32Value{value: 1}.value == 1", "compile-error"),
    ("google.protobuf.FooValue{} == 1", "compile-error"),
    ("(google.protobuf).Int32Value{} == 0", "compile-error"),
    ("google.protobuf.Int32Value{value: 1, value: 2} == 2", "true"),
    ("google.protobuf.StringValue{} == null", "false"),
    ("google.protobuf.FloatValue{value: 1e100} == double('inf')", "true"),
    ("type(google.protobuf.UInt64Value{}) == uint", "true"),
]


@pytest.mark.parametrize(("expression", "expected"), CASES)
def test_kubernetes_answer(engine: Engine, expression: str, expected: str) -> None:
    assert outcome(engine, expression) == expected


# The strings extension's format as cel-go's formatter (strings version 2) runs it.
FORMAT_CASES = [
    ('"%s has %d".format(["a", 2]) == "a has 2"', "true"),  # mixed literals: format exempts them
    ('"%s has %d".format([dyn("a"), dyn(2)]) == "a has 2"', "true"),
    ('"%f".format([1.0]) == "1.000000"', "true"),
    ('"%.2f".format([2.675]) == "2.67"', "true"),
    ('"%f".format(["NaN"]) == "NaN"', "true"),
    ('"%x %X %o %b".format([-26, 26, 8, 5]) == "-1a 1A 10 101"', "true"),
    ('"%x".format(["hi"]) == "6869"', "true"),
    ('"%b".format([true]) == "1"', "true"),
    ('"%s %s".format([duration("90s"), duration("1ms")]) == "90s 0.001s"', "true"),
    ('"%s".format([timestamp("2020-01-01T00:00:00Z")]) == "2020-01-01T00:00:00Z"', "true"),
    ('"%s %s %s".format([1.5, 100.0, 1e21]) == "1.5 100 1e+21"', "true"),
    ('"%s".format([int]) + "%s".format([null]) == "intnull"', "true"),
    ('"%s".format([b"ab"]) == "ab"', "true"),
    ('"100%%".format([]) == "100%"', "true"),
    ('"%d".format([dyn("a")]) == ""', "error"),
    ("device.driver.format([]) == device.driver", "true"),
    # cel-go's own formatter, not the C++ library's: literal arguments checked at compile time,
    # lists and maps spelled as CEL literals, en_US grouping, no ints for %f.
    ('"%s".format([[1.5, 2.0]]) == "[1.500000, 2.000000]"', "true"),
    (r'"%s".format([["a", "b\"c"]]) == "[\"a\", \"b\\\"c\"]"', "true"),
    (r'"%s".format([{"b": 1, "a": 2}]) == "{\"a\":2, \"b\":1}"', "true"),
    (r'"%s".format([[duration("1s")]]) == "[duration(\"1s\")]"', "true"),
    ('"%.2f".format([1234567.125]) == "1,234,567.12"', "true"),
    ('"%f".format([1]) == "1.000000"', "compile-error"),
    ('"%d".format(["a"]) == ""', "compile-error"),
    ('"%s %s".format(["a"]) == ""', "compile-error"),
    ('"%s".format(["a", "b"]) == "a"', "compile-error"),
    ('"%q".format([1]) == ""', "compile-error"),
    ('"%s".format([dyn([1])]) == "[1]"', "true"),
    ('"%s %s".format(dyn(["a"])) == ""', "error"),
    ('"%s".format([quantity("1")]) == ""', "compile-error"),
    ('[1].exists(x, "%d".format([x]) == "1")', "true"),
]


@pytest.mark.parametrize(("expression", "expected"), FORMAT_CASES)
def test_format(engine: Engine, expression: str, expected: str) -> None:
    assert outcome(engine, expression) == expected


def _sum(term: str, n: int) -> str:
    return " + ".join([term] * n)


# Long left-associated `+` chains nest one level per operand: cel-go takes about 250 levels,
# the C++ parser 32 (the C++ engine regroups such chains).
DEPTH_CASES = [
    (_sum("1", 100) + " == 100", "true"),
    (_sum("1.5", 100) + " == 150.0", "true"),
    (_sum('"ab"', 100) + f' == "{"ab" * 100}"', "true"),
    (f"({_sum('[1]', 60)}).size() == 60", "true"),
    (_sum("device.attributes['gpu.example.com'].ids[1]", 100) + " == 200", "true"),
    (f"[{_sum('1', 50)}, {_sum('2', 50)}] == [50, 100]", "true"),
    (f"device.driver == 'x' || {_sum('1', 100)} == 100", "true"),
    (_sum("1", 100) + ' == "x"', "compile-error"),
    (_sum("1", 50) + " + 9223372036854775807 > 0", "error"),
    ("!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!true", "true"),
    # Parentheses nest too, 40 deep here; the C++ parser stops at 32.
    ("(" * 40 + "7" + ")" * 40 + " == 7", "true"),
    ("size(" + "(" * 40 + "[1]" + ")" * 40 + ") == 1", "true"),
    ("(" * 40 + "(1 + 2) * 3" + ")" * 40 + " == 9", "true"),
    ("(" * 40 + _sum("1", 50) + ")" * 40 + " == 50", "true"),
    ("(" * 40 + "7" + ")" * 40 + " == 'a'", "compile-error"),
    # cel-go's parser limit: 250 nested rules, the outermost expression one of them.
    ("(" * 249 + "true" + ")" * 249, "true"),
    ("(" * 250 + "true" + ")" * 250, "compile-error"),
    ("[" * 250 + "true" + "]" * 250 + " != []", "compile-error"),
]


@pytest.mark.parametrize(("expression", "expected"), DEPTH_CASES)
def test_deep_expressions(engine: Engine, expression: str, expected: str) -> None:
    assert outcome(engine, expression) == expected


# Kubernetes' IP, CIDR and URL libraries (apiserver pkg/cel/library ip.go, cidr.go, urls.go).
NET_CASES = [
    ('ip("1.2.3.4").family() == 4 && ip("::1").family() == 6', "true"),
    ("ip(1)", "compile-error"),
    ('ip("1.2.3.4").family() == "4"', "compile-error"),
    ('ip("1.2.3.4") == "1.2.3.4"', "compile-error"),
    ('ip("::1") == ip("0::1")', "true"),
    ('ip("1.2.3.4") != ip("1.2.3.5")', "true"),
    ('ip("bad").family() == 4', "error"),
    ('ip("fe80::1%eth0").family() == 6', "error"),  # zones are refused
    ('ip("::ffff:1.2.3.4").family() == 6', "error"),  # so are IPv4-mapped addresses
    ('isIP("1.2.3.4") && !isIP("bad") && !isIP("::ffff:1.2.3.4")', "true"),
    ("isIP(1)", "compile-error"),
    ('ip.isCanonical("1.2.3.4") && !ip.isCanonical("2001:DB8::1")', "true"),
    ('ip.isCanonical("bad")', "error"),
    ('ip("0.0.0.0").isUnspecified() && ip("::").isUnspecified()', "true"),
    ('ip("127.0.0.2").isLoopback() && !ip("::2").isLoopback()', "true"),
    ('ip("224.0.0.1").isLinkLocalMulticast() && ip("ff02::1").isLinkLocalMulticast()', "true"),
    ('ip("224.0.1.1").isLinkLocalMulticast()', "false"),
    ('ip("169.254.1.1").isLinkLocalUnicast() && ip("fe80::1").isLinkLocalUnicast()', "true"),
    ('ip("10.0.0.1").isGlobalUnicast() && ip("2001:db8::1").isGlobalUnicast()', "true"),
    ('ip("255.255.255.255").isGlobalUnicast()', "false"),
    ('ip("1.2.3.4").prefixLength()', "compile-error"),
    ('cidr("10.0.0.0/8").containsIP(ip("10.1.2.3")) && cidr("10.0.0.0/8").containsIP("10.1.2.3")', "true"),
    ('cidr("10.0.0.0/8").containsIP("11.1.2.3") || cidr("::/0").containsIP("1.2.3.4")', "false"),
    ('cidr("10.0.0.0/8").containsIP("bad")', "error"),
    ('cidr("10.0.0.0/8").containsIP(1)', "compile-error"),
    ('cidr("10.0.0.0/8").containsCIDR(cidr("10.1.0.0/16"))', "true"),
    ('cidr("10.0.0.0/8").containsCIDR("10.1.0.0/16")', "true"),
    ('cidr("10.0.0.0/16").containsCIDR("10.0.0.0/8")', "false"),
    ('cidr("10.0.0.1/8").ip() == ip("10.0.0.1")', "true"),  # the address as written
    ('cidr("10.0.0.1/8").masked() == cidr("10.0.0.0/8")', "true"),
    ('cidr("10.0.0.1/8") == cidr("10.0.0.0/8")', "false"),
    ('cidr("10.0.0.1/8").prefixLength() == 8 && cidr("::1/128").ip().family() == 6', "true"),
    ('cidr("10.0.0.1/08").prefixLength() == 8', "error"),
    ('isCIDR("10.0.0.0/8") && !isCIDR("10.0.0.0")', "true"),
    ('cidr("1.2.3.4/32").family()', "compile-error"),
    ('ip("1.2.3.4") == cidr("1.2.3.4/32")', "compile-error"),
    # A library value answers "no such overload" to a value of another type.
    ('dyn(ip("1.2.3.4")) == dyn(cidr("1.2.3.4/32"))', "error"),
    ('dyn(ip("1.2.3.4")).family() == 4 && [ip("::1")] == [ip("0::1")]', "true"),
    ('dyn("1.2.3.4").family() == 4', "error"),
    ('ip("1.2.3.4") in [ip("1.2.3.4")] && type(ip("1.2.3.4")) == type(ip("::1"))', "true"),
    ("ip(device.driver).family() == 4", "error"),
    ('url("https://example.com:80/p").getScheme() == "https"', "true"),
    ('url("https://example.com:80/p").getHost() == "example.com:80"', "true"),
    ('url("https://[::1]:80/p").getHostname() == "::1"', "true"),
    ('url("https://[::1]:80/p").getPort() == "80"', "true"),
    ('url("https://example.com/a b").getEscapedPath() == "/a%20b"', "true"),
    ('url("https://example.com/p?a=1&a=2&b=x").getQuery() == {"a": ["1", "2"], "b": ["x"]}', "true"),
    ('url("/path").getScheme() == "" && url("/path").getHost() == ""', "true"),
    ('url("not a url").getScheme() == ""', "error"),
    ('url("https://example.com") == url("https://example.org")', "false"),
    ('isURL("https://example.com") && !isURL("example.com")', "true"),
    ("url(1)", "compile-error"),
    ('url("https://a:80").getPort() == 80', "compile-error"),
]


@pytest.mark.parametrize(("expression", "expected"), NET_CASES)
def test_ip_cidr_url(engine: Engine, expression: str, expected: str) -> None:
    assert outcome(engine, expression) == expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ('ip("bad").family() == 4', "IP Address 'bad' parse error during conversion from string"),
        ('ip("fe80::1%eth0").family() == 6', "IP address with zone value is not allowed"),
        ('ip.isCanonical("::ffff:1.2.3.4")', "IPv4-mapped IPv6 IP address is not allowed"),
        ('cidr("1.2.3.4").prefixLength() == 1', "network address parse error during conversion from string"),
        ('url("x y").getHost() == ""', "URL parse error during conversion from string: invalid URI"),
    ],
)
def test_ip_cidr_url_error_messages(engine: Engine, expression: str, message: str) -> None:
    with pytest.raises(CelRuntimeError) as info:
        engine.compile(expression).evaluate(view_for(DEVICE))
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ('string(ip("2001:DB8::68")) == "2001:db8::68"', True),
        ('string(cidr("192.168.0.1/24")) == "192.168.0.1/24"', True),
        ('string(ip("::1")) == "::1" && string(1) == "1" && string(1.5) == "1.5"', True),
        ('type(ip("::1")) == net.IP && type(cidr("::/0")) == net.CIDR', True),
        ('type(ip("::1")) == net.CIDR', False),
    ],
)
def test_string_and_type_of_net_values(engine: Engine, expression: str, expected: bool) -> None:
    """Kubernetes adds string() of an IP or CIDR to the standard conversion and registers both
    types' names; the C++ engine renames the conversion, which it cannot extend."""
    assert engine.compile(expression).evaluate(view_for(DEVICE)) is expected


@pytest.mark.parametrize("expression", ['string(url("https://x")) == ""', 'net.IP{} == ip("1.1.1.1")'])
def test_url_has_no_string_conversion_and_net_types_no_construction(engine: Engine, expression: str) -> None:
    with pytest.raises(CelCompileError):
        engine.compile(expression)


# Map keys where cel-go's answer follows Go pointers its evaluation happens to share (see
# extender/cel/runtime/values.py, GoKey): the deterministic answers chosen here, on both
# engines. cel-go: `quantity("1")` twice is two keys and a device's capacity is not found by
# an equal literal (each parse is a new pointer); URLs likewise. Here both are keys by value.
POINTER_KEY_CHOICES = [
    ('{quantity("1"): 1, quantity("1"): 2}.size() == 1', "true"),
    ('{quantity("1"): 1, quantity("1000m"): 2}.size() == 1', "true"),
    ('quantity("80Gi") in {device.capacity["gpu.example.com"].memory: 1}', "true"),
    ('{url("http://a"): 1, url("http://a"): 2}.size() == 1', "true"),
    # Lists and maps follow cel-go exactly: one key per value, never found by an equal one.
    ('{[1]: 1, [1]: 2}.size() == 2 && !([1] in {[1]: 1})', "true"),
    ('cel.bind(k, [1], {k: 1, k: 2}.size() == 1 && k in {k: 1})', "true"),
]


@pytest.mark.parametrize(("expression", "expected"), POINTER_KEY_CHOICES)
def test_pointer_map_keys_chosen_answer(engine: Engine, expression: str, expected: str) -> None:
    assert outcome(engine, expression) == expected
