"""CEL ``google.protobuf.Timestamp`` and ``google.protobuf.Duration`` with cel-go's (Go's) rules.

Both are exact integer nanoseconds: a duration is Go's ``time.Duration`` (int64 nanoseconds),
a timestamp lies between years 1 and 9999 UTC. Parsing follows ``time.ParseDuration`` and
``time.Parse(time.RFC3339, ...)``; Kubernetes sets UTC as the default time zone of getters.
"""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from decimal import Decimal
from typing import Any

from extender.cel.runtime.values import Duration, EvalError, Timestamp

_NANOS = 1_000_000_000
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)


# --- parsing and printing --------------------------------------------------------------------

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": _NANOS,
    "m": 60 * _NANOS,
    "h": 3600 * _NANOS,
}
_DURATION_PART = re.compile(r"([0-9]*)(?:\.([0-9]*))?([^0-9.]*)")


def parse_duration(text: str) -> Duration:
    """Go's ``time.ParseDuration``."""
    invalid = EvalError(f'time: invalid duration "{text}"')
    s = text
    negative = s[:1] == "-"
    if s[:1] in ("-", "+"):
        s = s[1:]
    if s == "0":
        return Duration(0)
    if not s:
        raise invalid
    total = 0
    while s:
        m = _DURATION_PART.match(s)
        if m is None or m.end() == 0:
            raise invalid
        whole, frac, unit = m.group(1), m.group(2) or "", m.group(3)
        if not whole and not frac:
            raise invalid
        if unit not in _UNITS:
            raise EvalError(f'time: unknown unit "{unit}" in duration "{text}"' if unit else str(invalid))
        scale = _UNITS[unit]
        total += int(whole or "0") * scale + (int(frac) * scale // 10 ** len(frac) if frac else 0)
        s = s[m.end() :]
    if total > 2**63 - (0 if negative else 1):
        raise invalid
    return Duration(-total if negative else total)


def format_duration(d: Duration) -> str:
    """cel-go's ``string(duration)``: seconds as Go's shortest float, then ``s``."""
    seconds = float(abs(d.nanos) // _NANOS) + float(abs(d.nanos) % _NANOS) / 1e9
    text = format(Decimal(repr(seconds)).normalize(), "f")
    if text.endswith(".0"):
        text = text[:-2]
    return ("-" if d.nanos < 0 and seconds else "") + text + "s"


_RFC3339 = re.compile(r"(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?(Z|[+-]\d{2}:\d{2})")


def parse_timestamp(text: str) -> Timestamp:
    """Go's ``time.Parse(time.RFC3339, text)``."""
    m = _RFC3339.fullmatch(text)
    if m is None:
        raise EvalError(f'parsing time "{text}" as "2006-01-02T15:04:05Z07:00": cannot parse')
    year, month, day, hour, minute, second = (int(g) for g in m.groups()[:6])
    frac, zone = m.group(7) or "", m.group(8)
    try:
        if hour > 23 or minute > 59 or second > 59:
            raise ValueError("time out of range")
        offset = 0
        if zone != "Z":
            oh, om = int(zone[1:3]), int(zone[4:6])
            if oh > 23 or om > 59:
                raise ValueError("time zone offset out of range")
            offset = (oh * 60 + om) * (1 if zone[0] == "+" else -1)
        moment = dt.datetime(year, month, day, hour, minute, second, tzinfo=dt.UTC)
    except ValueError as e:
        raise EvalError(f'parsing time "{text}": {e}') from None
    seconds = (moment - _EPOCH) // dt.timedelta(seconds=1) - offset * 60
    nanos = int((frac + "000000000")[:9]) if frac else 0
    return Timestamp(seconds * _NANOS + nanos)


def format_timestamp(t: Timestamp) -> str:
    """``time.RFC3339Nano`` in UTC: fraction without trailing zeros, ``Z`` suffix."""
    seconds, nanos = divmod(t.nanos, _NANOS)
    moment = _EPOCH + dt.timedelta(seconds=seconds)
    text = moment.strftime("%Y-%m-%dT%H:%M:%S")
    if len(text) < 19:  # strftime drops leading zeros of years below 1000 on some platforms
        text = f"{moment.year:04d}" + text[text.index("-") :]
    if nanos:
        text += "." + f"{nanos:09d}".rstrip("0")
    return text + "Z"


# --- conversions, arithmetic, getters --------------------------------------------------------


def to_duration(v: Any) -> Duration:
    if type(v) is Duration:
        return v
    if type(v) is str:
        return parse_duration(v)
    raise EvalError(f"no such overload: duration({type(v).__name__})")


def to_timestamp(v: Any) -> Timestamp:
    if type(v) is Timestamp:
        return v
    if type(v) is str:
        return parse_timestamp(v)
    if type(v) is int:
        return Timestamp(v * _NANOS)
    raise EvalError(f"no such overload: timestamp({type(v).__name__})")


def add(a: Any, b: Any) -> Any:
    if type(a) is Duration and type(b) is Duration:
        return Duration(a.nanos + b.nanos)
    if type(a) is Timestamp and type(b) is Duration:
        return Timestamp(a.nanos + b.nanos)
    if type(a) is Duration and type(b) is Timestamp:
        return Timestamp(a.nanos + b.nanos)
    raise EvalError("no such overload: _+_")


def sub(a: Any, b: Any) -> Any:
    if type(a) is Duration and type(b) is Duration:
        return Duration(a.nanos - b.nanos)
    if type(a) is Timestamp and type(b) is Duration:
        return Timestamp(a.nanos - b.nanos)
    if type(a) is Timestamp and type(b) is Timestamp:
        return Duration(a.nanos - b.nanos)
    raise EvalError("no such overload: _-_")


def time_zone(name: str) -> dt.tzinfo:
    """A time zone argument of the timestamp getters: an IANA name or a [+-]hh:mm offset."""
    m = re.fullmatch(r"([+-]?)(\d{1,2}):(\d{2})", name)
    if m:
        minutes = int(m.group(2)) * 60 + int(m.group(3))
        return dt.timezone(dt.timedelta(minutes=-minutes if m.group(1) == "-" else minutes))
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise EvalError(f"unknown time zone {name}") from None


def _local(t: Timestamp, zone: str | None) -> dt.datetime:
    seconds = t.nanos // _NANOS
    moment = _EPOCH + dt.timedelta(seconds=seconds)
    return moment if zone is None else moment.astimezone(time_zone(zone))


def _trunc_div(a: int, b: int) -> int:
    q = abs(a) // b
    return -q if a < 0 else q


TIMESTAMP_GETTERS = {
    "getFullYear": lambda t, z=None: _local(t, z).year,
    "getMonth": lambda t, z=None: _local(t, z).month - 1,
    "getDayOfYear": lambda t, z=None: _local(t, z).timetuple().tm_yday - 1,
    "getDayOfMonth": lambda t, z=None: _local(t, z).day - 1,
    "getDate": lambda t, z=None: _local(t, z).day,
    "getDayOfWeek": lambda t, z=None: (_local(t, z).weekday() + 1) % 7,
    "getHours": lambda t, z=None: _local(t, z).hour,
    "getMinutes": lambda t, z=None: _local(t, z).minute,
    "getSeconds": lambda t, z=None: _local(t, z).second,
    # The zone cannot change the milliseconds, but an unknown one is still an error.
    "getMilliseconds": lambda t, z=None: (z is None or time_zone(z)) and t.nanos % _NANOS // 1_000_000,
}

DURATION_GETTERS = {
    "getHours": lambda d: _trunc_div(d.nanos, 3600 * _NANOS),
    "getMinutes": lambda d: _trunc_div(d.nanos, 60 * _NANOS),
    "getSeconds": lambda d: _trunc_div(d.nanos, _NANOS),
    "getMilliseconds": lambda d: _trunc_div(d.nanos, 1_000_000),
}


def timestamp_to_int(t: Timestamp) -> int:
    return t.nanos // _NANOS
