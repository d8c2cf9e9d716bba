"""A bad regex in a selector is the selector's error, not a line on stderr: with JSON logs, a
native library's plain line would break the log stream (docs/usage.md)."""

from __future__ import annotations

import pytest

from extender.cel.python.strings import compile_regex
from extender.cel.runtime.k8s_functions import RE2_OPTIONS


def test_a_bad_pattern_is_an_error_and_nothing_is_written_to_stderr(
    capfd: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(Exception, match="invalid regex"):
        compile_regex("(unclosed")
    assert capfd.readouterr().err == ""
    assert RE2_OPTIONS.log_errors is False
