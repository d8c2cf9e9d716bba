"""Semantic versions as Kubernetes' CEL semver library sees them (blang/semver/v4).

Strict parsing is blang's ``Parse``; ``normalize=True`` is the library's own
``normalizeAndParse`` (``semver(s, true)``).  Error messages are blang's/Go's, since
CEL surfaces them verbatim.  Numbers are uint64 as upstream; CEL's ``major()`` etc.
convert them with Go's ``int64()``, which is the engine's business, not this type's.
"""

from __future__ import annotations

from functools import lru_cache, total_ordering
from typing import Final

from extender.cel.runtime.quoting import go_quote

_NUMBERS: Final = frozenset("0123456789")
_ALPHANUM: Final = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789")
_UINT64_MAX: Final = (1 << 64) - 1

PreReleaseId = int | str



def _contains_only(s: str, allowed: frozenset[str]) -> bool:
    return all(ch in allowed for ch in s)


def _has_leading_zeroes(s: str) -> bool:
    return len(s) > 1 and s[0] == "0"


def _parse_uint(s: str) -> int:
    """``strconv.ParseUint(s, 10, 64)`` for a string already known to hold only digits."""
    if not s:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(s)}: invalid syntax")
    # More than 20 digits without a leading zero is out of range; checking first also
    # keeps int() away from Python's limit on very long digit strings.
    if len(s) > 20 or int(s) > _UINT64_MAX:
        raise ValueError(f"strconv.ParseUint: parsing {go_quote(s)}: value out of range")
    return int(s)


def _parse_number(s: str, what: str) -> int:
    if not _contains_only(s, _NUMBERS):
        raise ValueError(f"Invalid character(s) found in {what.lower()} number {go_quote(s)}")
    if _has_leading_zeroes(s):
        raise ValueError(f"{what} number must not contain leading zeroes {go_quote(s)}")
    return _parse_uint(s)


def _parse_prerelease_id(s: str) -> PreReleaseId:
    if not s:
        raise ValueError("Prerelease is empty")
    if _contains_only(s, _NUMBERS):
        if _has_leading_zeroes(s):
            raise ValueError(f"Numeric PreRelease version must not contain leading zeroes {go_quote(s)}")
        return _parse_uint(s)
    if _contains_only(s, _ALPHANUM):
        return s
    raise ValueError(f"Invalid character(s) found in prerelease {go_quote(s)}")


def _compare_ids(a: PreReleaseId, b: PreReleaseId) -> int:
    # Numeric identifiers sort before alphanumeric ones (SemVer 2.0.0, precedence rule 11.4.3:
    # https://semver.org/spec/v2.0.0.html#spec-item-11).
    a_num = isinstance(a, int)
    b_num = isinstance(b, int)
    if a_num != b_num:
        return -1 if a_num else 1
    return (a > b) - (a < b)  # type: ignore[operator]


@total_ordering
class Semver:
    """An immutable semantic version; equality, ordering and hash ignore build metadata."""

    __slots__ = ("_build", "_major", "_minor", "_patch", "_pre")

    _major: int
    _minor: int
    _patch: int
    _pre: tuple[PreReleaseId, ...]
    _build: tuple[str, ...]

    def __init__(
        self,
        major: int,
        minor: int,
        patch: int,
        pre: tuple[PreReleaseId, ...] = (),
        build: tuple[str, ...] = (),
    ) -> None:
        """Low-level constructor for already validated parts; use :meth:`parse`."""
        set_ = object.__setattr__
        set_(self, "_major", major)
        set_(self, "_minor", minor)
        set_(self, "_patch", patch)
        set_(self, "_pre", pre)
        set_(self, "_build", build)

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("Semver is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("Semver is immutable")

    @classmethod
    def parse(cls, s: str, normalize: bool = False) -> Semver:
        """blang ``Parse`` or, with ``normalize``, Kubernetes' ``normalizeAndParse``."""
        if not isinstance(s, str):
            raise TypeError(f"semantic version must be a string, not {type(s).__name__}")
        return _parse_normalized(s) if normalize else _parse_strict(s)

    @property
    def major(self) -> int:
        return self._major

    @property
    def minor(self) -> int:
        return self._minor

    @property
    def patch(self) -> int:
        return self._patch

    @property
    def pre(self) -> tuple[PreReleaseId, ...]:
        return self._pre

    @property
    def build(self) -> tuple[str, ...]:
        return self._build

    def compare(self, other: Semver) -> int:
        """SemVer precedence: -1, 0 or 1."""
        if not isinstance(other, Semver):
            raise TypeError(f"cannot compare Semver with {type(other).__name__}")
        a = (self._major, self._minor, self._patch)
        b = (other._major, other._minor, other._patch)
        if a != b:
            return 1 if a > b else -1
        if not self._pre or not other._pre:
            # A release outranks any of its pre-releases.
            return (not self._pre) - (not other._pre)
        for x, y in zip(self._pre, other._pre, strict=False):
            c = _compare_ids(x, y)
            if c:
                return c
        return (len(self._pre) > len(other._pre)) - (len(self._pre) < len(other._pre))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) == 0

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Semver):
            return NotImplemented
        return self.compare(other) < 0

    def __hash__(self) -> int:
        return hash((self._major, self._minor, self._patch, self._pre))

    def __str__(self) -> str:
        s = f"{self._major}.{self._minor}.{self._patch}"
        if self._pre:
            s += "-" + ".".join(str(p) for p in self._pre)
        if self._build:
            s += "+" + ".".join(self._build)
        return s

    def __repr__(self) -> str:
        return f"Semver({str(self)!r})"


# Both parses are pure functions of a string whose answer (a Semver, or the ValueError, which
# lru_cache does not keep) never changes, bounded by least-recent eviction: safe to share
# across engines and app instances, like the code itself.
@lru_cache(maxsize=4096)
def _parse_strict(s: str) -> Semver:
    if not s:
        raise ValueError("Version string empty")
    parts = s.split(".", 2)
    if len(parts) != 3:
        raise ValueError("No Major.Minor.Patch elements found")
    major = _parse_number(parts[0], "Major")
    minor = _parse_number(parts[1], "Minor")
    rest = parts[2]
    build: list[str] = []
    plus = rest.find("+")
    if plus != -1:
        build = rest[plus + 1 :].split(".")
        rest = rest[:plus]
    prerelease: list[str] = []
    dash = rest.find("-")
    if dash != -1:
        prerelease = rest[dash + 1 :].split(".")
        rest = rest[:dash]
    patch = _parse_number(rest, "Patch")
    pre = tuple(_parse_prerelease_id(p) for p in prerelease)
    for b in build:
        if not b:
            raise ValueError("Build meta data is empty")
        if not _contains_only(b, _ALPHANUM):
            raise ValueError(f"Invalid character(s) found in build meta data {go_quote(b)}")
    return Semver(major, minor, patch, pre, tuple(build))


@lru_cache(maxsize=4096)
def _parse_normalized(s: str) -> Semver:
    if s.startswith("v"):
        s = s[1:]
    parts = s.split(".", 2)
    for i, p in enumerate(parts):
        if len(p) > 1:
            p = p.lstrip("0")
            if not p or p[0] not in _NUMBERS:
                p = "0" + p
            parts[i] = p
    if len(parts) < 3:
        if any(ch in "+-" for ch in parts[-1]):
            raise ValueError("short version cannot contain PreRelease/Build meta data")
        parts += ["0"] * (3 - len(parts))
    return _parse_strict(".".join(parts))
