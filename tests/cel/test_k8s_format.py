"""Kubernetes' format library validators against the Go functions they follow."""

from __future__ import annotations

import pytest

from extender.cel.runtime.k8s_format import FORMATS, Format, named, validate

_LABEL_ERROR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must "
    "start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for "
    "validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
_NAME_ERROR = (
    "name part must consist of alphanumeric characters, '-', '_' or '.', and must start and end with "
    "an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation "
    "is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')"
)


def check(key: str, value: str) -> list[str]:
    fmt = named(key)
    assert fmt is not None
    return validate(fmt, value)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("dns1123Label", "my-label-name"),
        ("dns1123Subdomain", "apiextensions.k8s.io"),
        ("dns1035Label", "my-label-name"),
        ("qualifiedName", "apiextensions.k8s.io/v1beta1"),
        ("dns1123LabelPrefix", "my-label-prefix-"),
        ("dns1123SubdomainPrefix", "mysubdomain.prefix.-"),
        ("dns1035LabelPrefix", "my-label-prefix-"),
        ("labelValue", ""),
        ("labelValue", "my-cool-label-Value"),
        ("uri", "http://example.com"),
        ("uri", "/absolute/path"),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000"),
        ("uuid", "123E4567E89B12D3A456426614174000"),
        ("byte", "aGVsbG8="),
        ("date", "2020-02-29"),
        ("date", "0000-02-29"),  # Go's year 0 is a leap year
        ("datetime", "2021-01-01T00:00:00Z"),
        ("datetime", "2021-01-01t23:59:59.123+02:00"),
        ("datetime", "2021-01-01T23:59:59x5Z"),  # strfmt's unescaped "." before the fraction
    ],
)
def test_valid(key: str, value: str) -> None:
    assert check(key, value) == []


@pytest.mark.parametrize(
    ("key", "value", "errors"),
    [
        ("dns1123Label", "contains a space", [_LABEL_ERROR]),
        ("dns1123Label", "a.b", ["must not contain dots"]),
        ("dns1123Label", "a" * 64, ["must be no more than 63 characters"]),
        ("dns1123LabelPrefix", "contains a space-", [_LABEL_ERROR]),
        ("qualifiedName", "/x", ["prefix part must be non-empty"]),
        ("qualifiedName", "x/", ["name part must be non-empty", _NAME_ERROR]),
        ("qualifiedName", "a b", [_NAME_ERROR]),
        ("byte", "aGVsbG8", ["invalid base64"]),
        ("byte", "", ["invalid base64"]),
        ("uuid", "123e4567-e89b-12d3-a456-42661417400", ["does not match the UUID format"]),
        ("date", "2021-02-29", ["invalid date"]),
        ("date", "2021-1-01", ["invalid date"]),
        ("datetime", "2020-01-32T00:00:00Z", ["invalid datetime"]),
        ("datetime", "2020-01-01T24:00:00Z", ["invalid datetime"]),
        ("datetime", "2020-01-01T00:00:00", ["invalid datetime"]),
        ("uri", "example.com", ['parse "example.com": invalid URI for request']),
    ],
)
def test_invalid(key: str, value: str, errors: list[str]) -> None:
    assert check(key, value) == errors


def test_prefix_masks_the_last_two_bytes() -> None:
    # maskTrailingDash replaces "-" and the byte before it by "a": "ab.-" is checked as "aba".
    assert check("dns1123LabelPrefix", "ab.-") == []
    assert check("dns1123LabelPrefix", "a.b-") == ["must not contain dots"]


def test_named_and_equality() -> None:
    assert named("unknown") is None
    assert named("uuid") == Format("uuid")
    assert named("dns1123Label") != named("dns1123LabelPrefix")
    assert sorted(FORMATS) == sorted(
        [
            "dns1123Label",
            "dns1123Subdomain",
            "dns1035Label",
            "qualifiedName",
            "dns1123LabelPrefix",
            "dns1123SubdomainPrefix",
            "dns1035LabelPrefix",
            "labelValue",
            "uri",
            "uuid",
            "byte",
            "date",
            "datetime",
        ]
    )
