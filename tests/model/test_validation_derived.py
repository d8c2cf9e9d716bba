"""What the API server (k8s.io/kubernetes v1.37.2 pkg/apis/resource/validation) refuses of a
claim's derived attributes, refused alike by local mode's admission (model/validation)."""

from __future__ import annotations

from typing import Any

import pytest

from extender.model.validation import validate


def claim(requests: list[dict[str, Any]], constraints: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "default"},
        "spec": {"devices": {"requests": requests, "constraints": constraints}},
    }


def exact(name: str = "gpu", derived: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": "gpu.example.com"}
    if derived is not None:
        body["derivedAttributes"] = derived
    return {"name": name, "exactly": body}


def attr(name: str = "derived/numa", expression: str = "1") -> dict[str, str]:
    return {"name": name, "expression": expression}


MATCH = [{"matchAttribute": "derived/numa"}]
DISTINCT_ON_GPU = [{"distinctAttribute": "derived/numa", "requests": ["gpu"]}]
# A request whose one subrequest derives derived/numa.
BIG = {"name": "big", "deviceClassName": "c", "derivedAttributes": [attr()]}
WITH_SUB = [{"name": "gpu", "firstAvailable": [BIG]}]
MANY = [attr(f"derived/a{i}") for i in range(32)]


def named(name: str, expression: str = "1") -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """A request deriving ``name``, and a constraint reading it."""
    return [exact(derived=[attr(name, expression)])], [{"matchAttribute": name}]


@pytest.mark.parametrize(
    ("requests", "constraints"),
    [
        ([exact(derived=[attr()])], MATCH),
        ([exact(derived=[attr()]), exact("nic")], DISTINCT_ON_GPU),
        # A constraint on the parent request covers its subrequests; one on the subrequest too.
        (WITH_SUB, [{"matchAttribute": "derived/numa", "requests": ["gpu"]}]),
        (WITH_SUB, [{"matchAttribute": "derived/numa", "requests": ["gpu/big"]}]),
        ([exact(derived=MANY)], [{"matchAttribute": a["name"]} for a in MANY]),
        named("gpu.example.com/numa", "x" * 10240),
        # Like the released check, a name with two slashes is not looked at.
        named("a/b/c"),
    ],
)
def test_accepted(requests: list[dict[str, Any]], constraints: list[dict[str, Any]]) -> None:
    validate("ResourceClaim", claim(requests, constraints))


@pytest.mark.parametrize(
    ("requests", "constraints", "problem"),
    [
        (
            [exact(derived=[attr() for _ in range(33)])],
            MATCH,
            "spec.devices.requests[0].exactly.derivedAttributes: must have at most 32 items, has 33",
        ),
        (
            [exact(derived=[attr()]), exact("nic")],
            [{"matchAttribute": "derived/numa", "requests": ["nic"]}],
            "derivedAttributes[0].name: 'derived/numa': must be referenced by at least one matchAttribute "
            "or distinctAttribute constraint targeting this request",
        ),
        ([exact(derived=[attr()])], [], "must be referenced"),
        (
            WITH_SUB,
            [{"matchAttribute": "derived/numa", "requests": ["gpu/small"]}],
            "firstAvailable[0].derivedAttributes[0].name: 'derived/numa': must be referenced",
        ),
        (*named("numa"), "a fully qualified name must be a domain"),
        (*named("Derived/numa"), "RFC 1123 subdomain"),
        (*named("derived/1numa"), "a valid C identifier"),
        (*named("/numa"), "prefix must not be empty"),
        ([exact(derived=[attr("", "1")])], MATCH, "derivedAttributes[0].name: required"),
        ([exact(derived=[attr(expression="")])], MATCH, "derivedAttributes[0].expression: required"),
        ([exact(derived=[attr(expression="x" * 10241)])], MATCH, "must be no more than 10240 bytes"),
        ([exact(derived=[attr(), attr()])], MATCH, "derivedAttributes[1]: duplicate value 'derived/numa'"),
    ],
)
def test_refused(requests: list[dict[str, Any]], constraints: list[dict[str, Any]], problem: str) -> None:
    with pytest.raises(ValueError, match="ResourceClaim default/c: ") as raised:
        validate("ResourceClaim", claim(requests, constraints))
    assert problem in str(raised.value)
