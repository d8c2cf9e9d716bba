"""Kubernetes' CEL format library (``format.named``, ``format.<name>()``, ``<Format>.validate``):
the named formats and their validators, engine-neutral.

The validators follow the Go functions Kubernetes calls: apimachinery's name validation
(``NameIsDNSLabel`` and friends, ``IsQualifiedName``, ``IsValidLabelValue``), ``url.ParseRequestURI``
and kube-openapi's strfmt checks (govalidator's base64 pattern, the UUID pattern, ``IsDate`` and
``IsDateTime``), including their error strings, which ``validate`` returns.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import ClassVar

from extender.cel.runtime.k8s_functions import go_parse_request_uri
from extender.cel.runtime.quoting import go_quote

Validator = Callable[[str], list[str]]


@dataclass(frozen=True, slots=True)
class Format:
    """A ``kubernetes.NamedFormat`` value; formats are equal when their names are, as upstream."""

    cel_type_name: ClassVar[str] = "kubernetes.NamedFormat"
    name: str


# --- apimachinery's name validation --------------------------------------------------------

_DNS1123_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN_FMT = _DNS1123_LABEL_FMT + "(\\." + _DNS1123_LABEL_FMT + ")*"
_DNS1035_LABEL_FMT = "[a-z]([-a-z0-9]*[a-z0-9])?"
_QUALIFIED_NAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_LABEL_VALUE_FMT = "(" + _QUALIFIED_NAME_FMT + ")?"

_DNS1123_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_DNS1123_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', "
    "and must start and end with an alphanumeric character"
)
_DNS1035_LABEL_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', "
    "start with an alphabetic character, and end with an alphanumeric character"
)
_QUALIFIED_NAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_LABEL_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)

_LABEL_MAX, _SUBDOMAIN_MAX = 63, 253


def _full(pattern: str) -> re.Pattern[str]:
    # Go's $ matches only at the very end; Python's would also match before a final newline.
    return re.compile(f"(?:{pattern})\\Z", re.ASCII)


_DNS1123_LABEL = _full(_DNS1123_LABEL_FMT)
_DNS1123_SUBDOMAIN = _full(_DNS1123_SUBDOMAIN_FMT)
_DNS1035_LABEL = _full(_DNS1035_LABEL_FMT)
_QUALIFIED_NAME = _full(_QUALIFIED_NAME_FMT)
_LABEL_VALUE = _full(_LABEL_VALUE_FMT)


def _regex_error(message: str, fmt: str, *examples: str) -> str:
    """apimachinery's RegexError, double space before each further example included."""
    if not examples:
        return f"{message} (regex used for validation is '{fmt}')"
    shown = "".join((" or " if i else "") + f"'{e}', " for i, e in enumerate(examples))
    return f"{message} (e.g. {shown}regex used for validation is '{fmt}')"


def _max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def _too_long(value: str, limit: int) -> bool:
    # Go measures strings in bytes.
    return len(value.encode("utf-8")) > limit


def is_dns1123_label(value: str) -> list[str]:
    errs = [_max_len_error(_LABEL_MAX)] if _too_long(value, _LABEL_MAX) else []
    if not _DNS1123_LABEL.match(value):
        if _DNS1123_SUBDOMAIN.match(value):
            errs.append("must not contain dots")  # a valid subdomain; its length was checked
        else:
            errs.append(_regex_error(_DNS1123_LABEL_MSG, _DNS1123_LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = [_max_len_error(_SUBDOMAIN_MAX)] if _too_long(value, _SUBDOMAIN_MAX) else []
    if not _DNS1123_SUBDOMAIN.match(value):
        errs.append(_regex_error(_DNS1123_SUBDOMAIN_MSG, _DNS1123_SUBDOMAIN_FMT, "example.com"))
    return errs


def is_dns1035_label(value: str) -> list[str]:
    errs = [_max_len_error(_LABEL_MAX)] if _too_long(value, _LABEL_MAX) else []
    if not _DNS1035_LABEL.match(value):
        errs.append(_regex_error(_DNS1035_LABEL_MSG, _DNS1035_LABEL_FMT, "my-name", "abc-123"))
    return errs


def _mask_trailing_dash(name: str) -> str:
    """apimachinery's maskTrailingDash, used for generateName prefixes: it drops the last two
    bytes (not only the dash) and appends an "a"."""
    if len(name) > 1 and name.endswith("-"):
        return name.encode("utf-8")[:-2].decode("utf-8", "replace") + "a"
    return name


def _prefix(validate: Validator) -> Validator:
    return lambda value: validate(_mask_trailing_dash(value))


_QUALIFIED_NAME_ERROR = _regex_error(_QUALIFIED_NAME_MSG, _QUALIFIED_NAME_FMT, "MyName", "my.name", "123-abc")


def is_qualified_name(value: str) -> list[str]:
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) > 2:
        return [
            f"a qualified name {_QUALIFIED_NAME_ERROR}"
            " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + e for e in is_dns1123_subdomain(prefix)]
    if not name:
        errs.append("name part must be non-empty")
    elif _too_long(name, _LABEL_MAX):
        errs.append("name part " + _max_len_error(_LABEL_MAX))
    if not _QUALIFIED_NAME.match(name):
        errs.append(f"name part {_QUALIFIED_NAME_ERROR}")
    return errs


def is_valid_label_value(value: str) -> list[str]:
    errs = [_max_len_error(_LABEL_MAX)] if _too_long(value, _LABEL_MAX) else []
    if not _LABEL_VALUE.match(value):
        errs.append(_regex_error(_LABEL_VALUE_MSG, _LABEL_VALUE_FMT, "MyValue", "my_value", "12345"))
    return errs


# --- the CRD formats (kube-openapi strfmt) -------------------------------------------------

_UUID = re.compile(
    r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z", re.ASCII | re.IGNORECASE
)
_BASE64 = re.compile(r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})\Z")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")
# As strfmt writes it: the unescaped "." before the fraction matches any character.
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))\Z")
_DAYS_IN_MONTH = (31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


def _is_date(value: str) -> bool:
    """Go's time.Parse("2006-01-02", value) succeeding (year 0 included)."""
    m = _DATE.match(value)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    return 1 <= day <= _DAYS_IN_MONTH[month - 1] + (1 if month == 2 and leap else 0)


def _is_date_time(value: str) -> bool:
    """strfmt's IsDateTime: a date, a "t" (any case), and a time the pattern admits."""
    if len(value.encode("utf-8")) < 4:
        return False
    parts = value.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.match(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _uri(value: str) -> list[str]:
    try:
        go_parse_request_uri(value)
    except ValueError as exc:
        return [f"parse {go_quote(value)}: {exc}"]
    return []


def _check(predicate: Callable[[str], bool], message: str) -> Validator:
    return lambda value: [] if predicate(value) else [message]


# format.<key>() -> (Go name, validator); the Go name decides equality.
FORMATS: dict[str, tuple[str, Validator]] = {
    "dns1123Label": ("DNS1123Label", is_dns1123_label),
    "dns1123Subdomain": ("DNS1123Subdomain", is_dns1123_subdomain),
    "dns1035Label": ("DNS1035Label", is_dns1035_label),
    "qualifiedName": ("QualifiedName", is_qualified_name),
    "dns1123LabelPrefix": ("DNS1123LabelPrefix", _prefix(is_dns1123_label)),
    "dns1123SubdomainPrefix": ("DNS1123SubdomainPrefix", _prefix(is_dns1123_subdomain)),
    "dns1035LabelPrefix": ("DNS1035LabelPrefix", _prefix(is_dns1035_label)),
    "labelValue": ("LabelValue", is_valid_label_value),
    "uri": ("URI", _uri),
    "uuid": ("uuid", _check(lambda v: _UUID.match(v) is not None, "does not match the UUID format")),
    "byte": ("byte", _check(lambda v: _BASE64.match(v) is not None, "invalid base64")),
    "date": ("date", _check(_is_date, "invalid date")),
    "datetime": ("datetime", _check(_is_date_time, "invalid datetime")),
}
_BY_NAME = {go_name: validator for go_name, validator in FORMATS.values()}


def named(key: str) -> Format | None:
    """``format.named(key)``'s format, or None for an unknown key."""
    entry = FORMATS.get(key)
    return None if entry is None else Format(entry[0])


def validate(fmt: Format, value: str) -> list[str]:
    """The validation errors of ``value`` in ``fmt`` (empty when it is valid)."""
    return _BY_NAME[fmt.name](value)
