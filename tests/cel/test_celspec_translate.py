"""The cel-spec translator: text format reading and the selector written for each kind of test."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cel.celspec_translate import translate
from tests.cel.textproto import TextprotoError, parse

SPEC = """
name: "demo"
section {
  name: "s"
  test { name: "int" expr: "1 + 1" value: { int64_value: 2 } }
  test { name: "nan" expr: "0.0 / 0.0" value: { double_value: nan } }
  test { name: "err" expr: "1 / 0" eval_error: { errors: { message: "divide by zero" } } }
  test { name: "default_true" expr: "true" }
  test: {
    name: "mixed" expr: "[1, 'a']"
    value: { list_value: { values: { int64_value: 1 } values: { string_value: "a" } } }
  }
  test { name: "var" expr: "x" bindings { key: "x" value { value { int64_value: 1 } } } }
  test { name: "unchecked" expr: "1 < 'a'" disable_check: true value: { bool_value: false } }
  test { name: "bytes" expr: "b'\\\\377'" value: { bytes_value: "\\377" } }
}
"""


def test_parse_reads_nested_and_repeated_fields() -> None:
    msg = parse("a: 1 b { c: \"x\\ny\" c: 'z' } # comment\nd: [1, 2]")
    assert msg == {"a": ["1"], "b": [{"c": [b"x\ny", b"z"]}], "d": ["1", "2"]}


def test_parse_rejects_garbage() -> None:
    with pytest.raises(TextprotoError):
        parse("a: {")


def test_translate_writes_selectors_and_counts_left_out(tmp_path: Path) -> None:
    (tmp_path / "demo.textproto").write_text(SPEC, encoding="utf-8")
    result = translate(tmp_path)
    got = {c["name"]: (c["expression"], c["expect"]) for c in result.cases}
    assert got == {
        "demo/s/int": ("(1 + 1) == 2", True),
        "demo/s/nan": ('string(0.0 / 0.0) == "NaN"', True),
        "demo/s/err": ("(1 / 0) == (1 / 0)", "error"),
        "demo/s/default_true": ("true", True),
        "demo/s/mixed": ("([1, 'a']) == [dyn(1), dyn(\"a\")]", True),
        "demo/s/bytes": ("(b'\\377') == b\"\\xff\"", True),
    }
    assert sum(result.left_out.values()) == 2
