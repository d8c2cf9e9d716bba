"""Mutation fuzz of the model's parsers: a malformed object of any kind is a ValueError naming the
kind and the field, never another exception (the Kubernetes watch relies on it as much as
local mode does)."""

from __future__ import annotations

import pytest

from extender.model.kinds import BY_NAME
from tests.model.mutations import mutants, names_field, valid_objects

OBJECTS = valid_objects()
IDS = [f"{o['kind']}-{o['metadata']['name']}" for o in OBJECTS]


@pytest.mark.parametrize("index", range(len(OBJECTS)), ids=IDS)
def test_every_mutant_parses_or_is_a_value_error_naming_kind_and_field(index: int) -> None:
    kind = BY_NAME[OBJECTS[index]["kind"]]
    problems: list[str] = []
    for label, mutant in mutants(valid_objects()[index]):
        if label.startswith(("kind ", "apiVersion ")):
            continue  # the parser is chosen by kind; neither field is its to check
        try:
            kind.parse(mutant)
        except ValueError as exc:
            if not str(exc).startswith(kind.name) or not names_field(str(exc), label):
                problems.append(f"{label}: the error does not name kind and field: {exc}")
        except Exception as exc:  # any other exception is the bug this test looks for
            problems.append(f"{label}: {type(exc).__name__}: {exc}")
    assert not problems, f"{len(problems)} bad parses, the first ones:\n" + "\n".join(problems[:15])
