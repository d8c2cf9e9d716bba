"""The one table of kinds: where the API serves each, how objects are keyed and parsed."""

from __future__ import annotations

import pytest

from extender.model.kinds import KIND_NAMES, KINDS, NODE, POD, RESOURCE_SLICE, kind, object_key
from extender.state import ClusterState
from tests.apiserver.resources import BY_KIND


def test_paths_and_api_versions() -> None:
    assert (NODE.api_version, NODE.path) == ("v1", "/api/v1/nodes")
    assert (RESOURCE_SLICE.api_version, RESOURCE_SLICE.path) == (
        "resource.k8s.io/v1",
        "/apis/resource.k8s.io/v1/resourceslices",
    )


def test_the_table_agrees_with_the_test_api_server() -> None:
    for k in KINDS:
        served = BY_KIND[k.name]
        assert (k.group, k.version, k.plural, k.namespaced) == (
            served.group,
            served.version,
            served.plural,
            served.namespaced,
        )


def test_keys() -> None:
    assert POD.key({"metadata": {"name": "p"}}) == ("default", "p")
    assert NODE.key({"metadata": {"name": "n", "namespace": "ignored"}}) == ("", "n")
    with pytest.raises(ValueError, match=r"Pod: metadata\.name: required"):
        object_key("Pod", {"metadata": {}})
    with pytest.raises(ValueError, match=r"Pod p: metadata\.namespace: must be a string"):
        POD.key({"metadata": {"name": "p", "namespace": 3}})
    with pytest.raises(ValueError, match="unsupported kind 'Secret'; expected one of Node, "):
        kind("Secret")


def test_the_cache_keeps_every_kind_of_the_table() -> None:
    assert list(ClusterState().counts()) == list(KIND_NAMES)
