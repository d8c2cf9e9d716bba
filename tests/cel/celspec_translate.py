"""Translate google/cel-spec's conformance tests into device-selector parity cases.

    python -m tests.cel.celspec_translate CEL_SPEC_CHECKOUT [-o tests/cel/celspec_cases.yaml]

Reads ``tests/simple/testdata/*.textproto`` of a cel-spec checkout and writes a case file in
the format of ``cases.yaml`` (see ``extender/tools/cel_parity.py``). The answer of each case
is what Kubernetes gives, not what the spec asks for: the spec's expectation, corrected where
Kubernetes' CEL environment (docs/cel.md, cel-go's sources) differs.
Those corrections are the ``OVERRIDES`` table below, each with its reason. A case that cannot
be written as a selector, or whose Kubernetes answer cannot be derived with confidence, is
left out and counted under its reason in the file's header.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.cel.textproto import Message, parse

DEFAULT_OUTPUT = Path(__file__).with_name("celspec_cases.yaml")
DEVICE = {"driver": "", "attributes": {}, "capacity": {}}

# Extensions Kubernetes' environment does not include: their cases only test an undeclared
# function, and some of their names may exist under other Kubernetes libraries.
FILES_LEFT_OUT = {
    "block_ext": "cel.block is not in Kubernetes' environment",
    "encoders_ext": "the encoders extension is not in Kubernetes' environment",
    "math_ext": "the math extension is not in Kubernetes' environment",
    "network_ext": "cel-go's network extension is not Kubernetes' ip/cidr library",
    "proto2_ext": "proto extensions need conformance messages",
    "unknowns": "unknowns are not part of selector evaluation",
    "enums": "proto enums need conformance messages",
    "type_deduction": "type-check only, nothing to evaluate",
}
# Strings v2 prints %e and %f of a double through golang.org/x/text's locale printer, with
# the precision of %e used as a width (ext/formatting.go); its exact output is not derivable.
FORMAT_FLOAT = re.compile(r"%[.0-9]*[ef]")
CASES_LEFT_OUT = {
    # In cel-go's own list of conformance tests it fails (conformance/BUILD.bazel).
    "optionals/optionals/map_optional_select_has": "cel-go departs from the spec; answer not derived",
} | {
    f"string_ext/format/{name}": "a map formatted by strings v2 (not derived from the spec)"
    for name in ("map support for string", "map support (all key types)", "dyntype support for maps")
}
SECTIONS_LEFT_OUT = {
    ("string_ext", "reverse"): "string.reverse() is strings extension v3; Kubernetes has v2",
}

# Cases whose Kubernetes answer differs from the spec's, with the reason.
# Value: (expect, reason); expect is a selector outcome of cel_parity.
OVERRIDES: dict[str, tuple[str, str]] = {
    # cel-go builds map literals into a Go map: a repeated key keeps the last value
    # (interpreter/interpretable.go evalMap.Eval); cel-go's conformance run skips these.
    "fields/qualified_identifier_resolution/map_value_repeat_key": (
        "true:3",
        "cel-go keeps the last of repeated map keys",
    ),
    "fields/qualified_identifier_resolution/map_value_repeat_key_heterogeneous": (
        "true:2",
        "cel-go keeps the last of repeated map keys (0 and 0u are one key)",
    ),
    # cel-go's planner rejects a constant index of a type no qualifier takes
    # (interpreter/attributes.go NewQualifier): the program cannot be built.
    **{
        f"fields/map_fields/map_bad_key_type{suffix}": (
            "compile-error",
            "cel-go cannot plan a constant bytes index (invalid qualifier type)",
        )
        for suffix in ("", "_or_false", "_or_true", "_and_false", "_and_true")
    },
    # cel-go qualifies after an optional value with a presence test, which finds nothing on
    # null or a number (interpreter/attributes.go refQualify): optional.none(), not an error.
    "optionals/optionals/map_null_entry_no_such_key": (
        "true:false",
        "cel-go's optional qualification of null finds nothing",
    ),
    "optionals/optionals/map_present_key_invalid_field": (
        "true:false",
        "cel-go's optional qualification of a number finds nothing",
    ),
    # Released cel-go (ext/strings.go indexOfOffset) answers -1 for an offset past the end.
    "string_ext/value_errors/indexof_out_of_range": ("true", "cel-go returns -1 for an offset past the end"),
    "string_ext/value_errors/lastindexof_out_of_range": (
        "true",
        "cel-go returns -1 for an offset past the end",
    ),
}

# Mixed-type list and map literals outside format(): cel.ValidateHomogeneousAggregateLiterals
# (cel/validator.go) rejects them at compile time; read off each expression by hand.
HOMOGENEOUS = [
    "comparisons/eq_literal/not_eq_list_null",
    "comparisons/eq_literal/eq_list_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_list_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_list_false_vs_types",
    "comparisons/eq_literal/not_eq_map_null",
    "comparisons/eq_literal/eq_map_mixed_type_numbers",
    "comparisons/eq_literal/not_eq_map_false_vs_types",
    "comparisons/eq_literal/eq_map_value_mixed_types",
    "comparisons/eq_literal/not_eq_list_elem_null",
    "comparisons/eq_literal/not_eq_map_value_null",
    "comparisons/in_list_literal/elem_in_mixed_type_list",
    "comparisons/in_list_literal/elem_in_mixed_type_list_cross_type",
    "comparisons/in_map_literal/key_in_mixed_key_type_map",
    "comparisons/in_map_literal/key_in_mixed_key_type_map_cross_type",
    "conversions/dyn/dyn_heterogeneous_list",
    "fields/map_fields/map_key_int64",
    "fields/map_fields/map_key_uint64",
    "fields/map_fields/map_key_mixed_type",
    "fields/map_fields/map_key_mixed_numbers_double_key",
    "fields/map_fields/map_key_mixed_numbers_lossy_double_key",
    "fields/map_fields/map_key_mixed_numbers_uint_key",
    "fields/map_fields/map_key_mixed_numbers_int_key",
    "fields/map_fields/map_value_mix_type",
    "fields/quoted_map_fields/field_access_dash",
    "fields/quoted_map_fields/has_field_dash",
    "fields/qualified_identifier_resolution/map_value_repeat_key_heterogeneous",
    "fields/in/mixed_numbers_and_keys_present",
    "fields/in/mixed_numbers_and_keys_absent",
    "macros/exists/list_elem_type_shortcircuit",
    "macros/exists/list_elem_type_exhaustive",
    "macros/exists/map_key_type_shortcircuit",
    "macros/exists/map_key_type_exhaustive",
    "macros/all/list_elem_type_shortcircuit",
    "macros/all/list_elem_type_exhaustive",
    "macros2/exists/list_elem_type_shortcircuit",
    "macros2/exists/list_elem_type_exhaustive",
    "macros2/exists/map_key_type_shortcircuit",
    "macros2/exists/map_key_type_exhaustive",
    "macros2/all/list_elem_type_shortcircuit",
    "macros2/all/list_elem_type_exhaustive",
    "macros2/all/list_elem_type_error_exhaustive",
    "optionals/optionals/optional_chaining_13",
    "optionals/optionals/map_key_mixed_type_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_double_key_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_uint_key_optindex_value",
    "optionals/optionals/map_key_mixed_numbers_int_key_optindex_value",
]
# Conversions of a constant and duration/timestamp literals that fail: Kubernetes builds
# programs with cel.OptOptimize (constant conversions are folded) and validates duration and
# timestamp literals (cel.ValidateDurationLiterals, ValidateTimestampLiterals), so the
# error comes when the selector is compiled.
FOLDED = [
    "conversions/int/uint_range",
    "conversions/int/double_int_max_range",
    "conversions/int/double_int_min_range",
    "conversions/int/double_range",
    "conversions/string/bytes_invalid",
    "conversions/uint/int_neg",
    "conversions/uint/double_uint_max_range",
    "conversions/uint/double_range_beyond_uint",
    "conversions/bool/string_true_badcase",
    "conversions/bool/string_false_badcase",
    "timestamps/timestamp_range/from_string_under",
    "timestamps/timestamp_range/from_int_under",
    "timestamps/timestamp_range/from_string_over",
    "timestamps/timestamp_range/from_int_over",
    "timestamps/duration_range/from_string_under",
    "timestamps/duration_range/from_string_over",
    "timestamps/duration_range/add_under",
    "timestamps/duration_range/add_over",
    "timestamps/duration_range/sub_under",
    "timestamps/duration_range/sub_over",
]
# format() clauses checked at compile time by strings v2's stringFormatValidator
# (ext/formatting.go stringFormatChecker): %f and %e take doubles (or strings), %d integers.
FORMAT_CHECKED = [
    f"string_ext/format/{name}"
    for name in (
        "default precision for fixed-point clause with int",
        "default precision for fixed-point clause with uint",
        "default precision for scientific notation with int",
        "default precision for scientific notation with uint",
        "NaN support for decimal",
        "positive infinity support for decimal",
        "negative infinity support for decimal",
    )
]
for _name in HOMOGENEOUS:
    OVERRIDES[_name] = ("compile-error", "mixed-type aggregate literal (homogeneous literals)")
for _name in FOLDED:
    OVERRIDES[_name] = ("compile-error", "constant conversion or literal rejected when compiled")
for _name in FORMAT_CHECKED:
    OVERRIDES[_name] = ("compile-error", "strings v2 checks format clauses at compile time")
# Kubernetes' strings v2 formats a list through ext/formatting.go formatList: doubles with
# %.6f (fmt, so infinities are +Inf/-Inf) quoted when not finite, timestamps as literals.
OVERRIDES["string_ext/format/list support for string"] = (
    'true:"[\\"abc\\", 3.140000, null, [9, 8, 7, 6], timestamp(\\"2023-02-03T23:31:20Z\\")]"',
    "strings v2 formats list members as CEL literals (ext/formatting.go formatList)",
)
OVERRIDES["string_ext/format/dyntype NaN/infinity support"] = (
    'true:"[\\"NaN\\", \\"+Inf\\", \\"-Inf\\"]"',
    "strings v2 formats list members as CEL literals (ext/formatting.go formatList)",
)
OVERRIDES["string_ext/format/dyntype support for lists"] = (
    'true:"[6, 4.200000, \\"a string\\"]"',
    "strings v2 formats list members as CEL literals (ext/formatting.go formatList)",
)

# Message types that only the conformance protos define.
MESSAGE_TYPES = re.compile(
    r"TestAllTypes|NestedMessage|NestedEnum|GlobalEnum|cel\.expr\.conformance|TestRequired"
    r"|google\.protobuf\.(?:Any|Struct|Value|ListValue|FieldMask|Empty|Duration|Timestamp)\s*\{"
)
SHORT_MESSAGE_NAME = re.compile(r"(?<![\w.])[A-Z]\w*\s*\{")
WRAPPERS = {
    "BoolValue": "bool",
    "BytesValue": "bytes",
    "DoubleValue": "double",
    "FloatValue": "double",
    "Int32Value": "int",
    "Int64Value": "int",
    "StringValue": "string",
    "UInt32Value": "uint",
    "UInt64Value": "uint",
}
MAX_SELECTOR_BYTES = 10 * 1024


class Untranslatable(Exception):
    """The case is left out; the message is the reason."""


@dataclass(frozen=True)
class Literal:
    """A CEL literal for an expected value, and its kind for homogeneity."""

    text: str
    kind: str


def _one(msg: Message, key: str) -> object:
    values = msg.get(key, [])
    return values[0] if values else None


def _text(raw: object) -> str:
    assert isinstance(raw, bytes)
    return raw.decode("utf-8")


def _cel_string(value: str) -> str:
    out = []
    for ch in value:
        if ch in '"\\':
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\r":
            out.append("\\r")
        elif ch == "\t":
            out.append("\\t")
        elif ch.isprintable():
            out.append(ch)
        else:
            code = ord(ch)
            out.append(f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _cel_bytes(value: bytes) -> str:
    body = "".join(chr(b) if 0x20 <= b < 0x7F and chr(b) not in '"\\' else f"\\x{b:02x}" for b in value)
    return 'b"' + body + '"'


def _double(raw: str) -> float:
    # Text format allows a float suffix (1.5f), and inf/nan spelled in words.
    return float(raw[:-1] if raw[-1:] in "fF" and raw[-2:-1].isdigit() else raw)


def _double_literal(value: float) -> str:
    if math.isinf(value):
        return 'double("Infinity")' if value > 0 else 'double("-Infinity")'
    text = repr(value)
    return text if any(c in text for c in ".e") else text + ".0"


def _int_literal(value: int) -> str:
    # -9223372036854775808 is not a literal: its magnitude overflows before negation.
    return "(-9223372036854775807 - 1)" if value == -(2**63) else str(value)


def _literal(value: Message) -> Literal:
    """The CEL literal for a cel.expr.Value."""
    if "int64_value" in value:
        return Literal(_int_literal(int(str(_one(value, "int64_value")))), "int")
    if "uint64_value" in value:
        return Literal(f"{int(str(_one(value, 'uint64_value')))}u", "uint")
    if "double_value" in value:
        number = _double(str(_one(value, "double_value")))
        if math.isnan(number):
            raise Untranslatable("NaN inside an expected aggregate")
        return Literal(_double_literal(number), "double")
    if "string_value" in value:
        return Literal(_cel_string(_text(_one(value, "string_value"))), "string")
    if "bytes_value" in value:
        raw = _one(value, "bytes_value")
        assert isinstance(raw, bytes)
        return Literal(_cel_bytes(raw), "bytes")
    if "bool_value" in value:
        return Literal(str(_one(value, "bool_value")), "bool")
    if "null_value" in value:
        return Literal("null", "null")
    if "type_value" in value:
        return Literal(_text(_one(value, "type_value")), "type")
    if "list_value" in value:
        inner = _one(value, "list_value")
        assert isinstance(inner, dict)
        items = [_literal(v) for v in inner.get("values", []) if isinstance(v, dict)]
        return Literal("[" + ", ".join(_homogeneous(items)) + "]", "list")
    if "map_value" in value:
        inner = _one(value, "map_value")
        assert isinstance(inner, dict)
        keys: list[Literal] = []
        vals: list[Literal] = []
        for entry in inner.get("entries", []):
            assert isinstance(entry, dict)
            key, val = _one(entry, "key"), _one(entry, "value")
            assert isinstance(key, dict) and isinstance(val, dict)
            keys.append(_literal(key))
            vals.append(_literal(val))
        pairs = zip(_homogeneous(keys), _homogeneous(vals), strict=True)
        return Literal("{" + ", ".join(f"{k}: {v}" for k, v in pairs) + "}", "map")
    if "object_value" in value:
        return _object_literal(value)
    raise Untranslatable(f"expected value of kind {sorted(value)} has no selector form")


def _homogeneous(items: list[Literal]) -> list[str]:
    """Wrap mixed-kind elements in dyn(): Kubernetes rejects mixed literals."""
    if len({item.kind for item in items}) <= 1:
        return [item.text for item in items]
    return [f"dyn({item.text})" for item in items]


def _object_literal(value: Message) -> Literal:
    any_value = _one(value, "object_value")
    assert isinstance(any_value, dict)
    for type_url, body in any_value.items():
        name = type_url.strip("[]").rsplit("/", 1)[-1]
        message = body[0]
        assert isinstance(message, dict)
        short = name.removeprefix("google.protobuf.")
        if short == "Duration":
            seconds = int(str(_one(message, "seconds") or 0))
            nanos = int(str(_one(message, "nanos") or 0))
            return Literal(f'duration("{seconds * 10**9 + nanos}ns")', "duration")
        if short == "Timestamp":
            seconds = int(str(_one(message, "seconds") or 0))
            nanos = int(str(_one(message, "nanos") or 0))
            return Literal(
                f"timestamp({seconds})" if nanos == 0 else f'(timestamp({seconds}) + duration("{nanos}ns"))',
                "timestamp",
            )
        if short in WRAPPERS and name.startswith("google.protobuf."):
            raw = _one(message, "value")
            kind = WRAPPERS[short]
            return _literal(
                {
                    f"{kind if kind != 'int' else 'int64'}_value".replace("uint_value", "uint64_value"): [
                        raw if raw is not None else _zero(kind)
                    ]
                }
            )
        raise Untranslatable(f"expected value is a {name} message")
    raise Untranslatable("empty object_value")


def _zero(kind: str) -> object:
    return {"bool": "false", "bytes": b"", "string": b"", "double": "0", "int": "0", "uint": "0"}[kind]


def _selector(expr: str, test: Message) -> tuple[str, str]:
    """The selector expression and the expected outcome for a cel-spec test."""
    if "eval_error" in test:
        return f"({expr}) == ({expr})", "error"
    value = _one(test, "value")
    if value is None:
        if any(k in test for k in ("any_eval_errors", "unknown", "any_unknowns")):
            raise Untranslatable("expects unknowns or one of several errors")
        return expr, "true"  # no result given: the spec expects true
    assert isinstance(value, dict)
    if "bool_value" in value:
        return expr, "true" if _one(value, "bool_value") == "true" else "false"
    if "double_value" in value and math.isnan(_double(str(_one(value, "double_value")))):
        return f'string({expr}) == "NaN"', "true"
    return f"({expr}) == {_literal(value).text}", "true"


def _left_out_reason(file: str, section: str, test: Message, expr: str) -> str | None:
    name = f"{file}/{section}/{_text(_one(test, 'name'))}"
    if name in CASES_LEFT_OUT:
        return CASES_LEFT_OUT[name]
    if file in FILES_LEFT_OUT:
        return FILES_LEFT_OUT[file]
    if (file, section) in SECTIONS_LEFT_OUT:
        return SECTIONS_LEFT_OUT[(file, section)]
    if "bindings" in test or "type_env" in test:
        return "declares or binds variables (a selector has only `device`)"
    if "container" in test and SHORT_MESSAGE_NAME.search(expr):
        return "builds a conformance message by its name in a container"
    if "check_only" in test or "typed_result" in test:
        return "type-check only, nothing to evaluate"
    if _one(test, "disable_check") == "true":
        return "the spec turns type checking off; Kubernetes always checks"
    if file == "string_ext" and FORMAT_FLOAT.search(expr) and "format" in expr:
        return "%e/%f of a double: strings v2 prints them through a locale printer"
    if MESSAGE_TYPES.search(expr):
        return "builds or reads a proto message Kubernetes does not know"
    return None


@dataclass
class Translation:
    cases: list[dict[str, object]]
    left_out: Counter[str]


def translate(testdata: Path) -> Translation:
    cases: list[dict[str, object]] = []
    left_out: Counter[str] = Counter()
    seen: Counter[str] = Counter()
    for path in sorted(testdata.glob("*.textproto")):
        file = path.stem
        for section in parse(path.read_text(encoding="utf-8")).get("section", []):
            assert isinstance(section, dict)
            section_name = _text(_one(section, "name"))
            for test in section.get("test", []):
                assert isinstance(test, dict)
                name = f"{file}/{section_name}/{_text(_one(test, 'name'))}"
                seen[name] += 1
                if seen[name] > 1:  # cel-spec repeats a few names within a section
                    name += f"#{seen[name]}"
                case = _case(file, section_name, name, test, left_out)
                if case is not None:
                    cases.append(case)
    return Translation(cases, left_out)


def _case(
    file: str, section: str, name: str, test: Message, left_out: Counter[str]
) -> dict[str, object] | None:
    expr = _text(_one(test, "expr"))
    reason = _left_out_reason(file, section, test, expr)
    if reason is None:
        try:
            selector, expect = _selector(expr, test)
        except Untranslatable as exc:
            reason = str(exc)
    if reason is None and len(selector.encode()) > MAX_SELECTOR_BYTES:
        reason = "longer than a selector may be (10 KiB)"
    if reason is not None:
        left_out[reason] += 1
        return None
    case: dict[str, object] = {"name": name, "expression": selector, "device": DEVICE}
    if name in OVERRIDES:
        answer, why = OVERRIDES[name]
        if answer.startswith("true:"):
            # The spec expects an error where Kubernetes yields a value: compare with it.
            case["expression"] = f"({expr}) == {answer.split(':', 1)[1]}"
            answer = "true"
        expect = answer
        case["kubernetes"] = why
    case["expect"] = {"true": True, "false": False}.get(expect, expect)
    return case


class _NoAliases(yaml.SafeDumper):
    """Every case spells out its device: the file is read case by case."""

    def ignore_aliases(self, data: object) -> bool:
        return True


def _dump(translation: Translation, source: str) -> str:
    total = len(translation.cases) + sum(translation.left_out.values())
    lines = [
        "# Generated by `python -m tests.cel.celspec_translate` from google/cel-spec",
        f"# ({source}); do not edit by hand.",
        "# Each case is a cel-spec conformance test written as a device selector; its answer",
        "# is Kubernetes' (cel-spec's, corrected for Kubernetes' environment: see `kubernetes`).",
        f"# {total} cel-spec tests: {len(translation.cases)} translated, "
        f"{sum(translation.left_out.values())} left out:",
    ]
    for reason, count in sorted(translation.left_out.items(), key=lambda kv: (-kv[1], kv[0])):
        lines.append(f"#   {count:4d}  {reason}")
    body = yaml.dump(translation.cases, Dumper=_NoAliases, sort_keys=False, allow_unicode=True, width=100)
    return "\n".join(lines) + "\n" + body


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.cel.celspec_translate")
    parser.add_argument("checkout", type=Path, help="a google/cel-spec checkout")
    parser.add_argument("-o", "--output", type=Path, default=DEFAULT_OUTPUT)
    parser.add_argument("--source", default="", help="the commit, recorded in the header")
    args = parser.parse_args(argv)
    testdata = args.checkout / "tests" / "simple" / "testdata"
    if not testdata.is_dir():
        print(f"error: {testdata} is not a directory", file=sys.stderr)
        return 2
    translation = translate(testdata)
    args.output.write_text(_dump(translation, args.source or str(args.checkout)), encoding="utf-8")
    print(f"{len(translation.cases)} cases written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
