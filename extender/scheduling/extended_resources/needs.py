"""Extended resources backed by DRA (``DRAExtendedResource``; upstream: kubernetes/kubernetes
``pkg/scheduler/framework/plugins/dynamicresources/extended/``).

A pod asking for ``example.com/gpu: 1`` (or ``deviceclass.resource.kubernetes.io/<class>: 1``)
gets that resource either from a device plugin, when the node lists it in its allocatable, or
from a device class that maps the name, through a scheduler-made claim. Pods none of whose
requests a class maps are left entirely to kube-scheduler's resource fit, as upstream does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from extender.model import DeviceClass, Node
from extender.model.extended import DEVICE_CLASS_PREFIX
from extender.model.pods import PodInfo


def class_mapping(classes: Mapping[str, DeviceClass]) -> dict[str, str]:
    """Extended resource name -> device class name.

    Each class serves its implicit ``deviceclass.resource.kubernetes.io/<class>`` and its
    ``spec.extendedResourceName``; when classes share an explicit name the newest one wins,
    equal creation times going to the smaller name (as documented for
    ``DeviceClassSpec.extendedResourceName`` in kubernetes/api ``resource/v1/types.go``).
    """
    mapping = {DEVICE_CLASS_PREFIX + name: name for name in classes}
    # RFC 3339 timestamps in UTC compare correctly as strings; "" (unset) counts as oldest.
    # A reversed sort stays stable, so equal times keep the name order of the first sort.
    by_name = sorted(classes.values(), key=lambda dc: dc.name)
    newest_first = sorted(by_name, key=_created, reverse=True)
    for dc in newest_first:
        if dc.extended_resource_name:
            mapping.setdefault(dc.extended_resource_name, dc.name)
    return mapping


def _created(dc: DeviceClass) -> str:
    return dc.created


@dataclass(frozen=True, slots=True)
class ExtendedNeeds:
    """A pod's DRA-backable requests and the classes that can serve them."""

    requested: tuple[str, ...]  # sorted names with a non-zero pod-level request
    classes: Mapping[str, str]  # the subset of ``requested`` some class maps -> that class

    @classmethod
    def of(cls, pod: PodInfo, classes: Mapping[str, DeviceClass]) -> ExtendedNeeds | None:
        """None when no class maps any of the pod's requests: then nothing here concerns DRA."""
        requested = pod.extended_requests
        if not requested:
            return None
        mapping = class_mapping(classes)
        mapped = {name: mapping[name] for name in requested if name in mapping}
        if not mapped:
            return None
        return cls(tuple(sorted(requested)), mapped)

    def on_node(self, node: Node) -> tuple[tuple[str, ...], str]:
        """(names DRA must provide on ``node``, "") or ((), why the node cannot serve the pod).

        A node listing a resource with a non-zero amount serves it through a device plugin;
        the pod's fit against that amount is kube-scheduler's NodeResourcesFit check.
        """
        via_dra = []
        for name in self.requested:
            listed = node.extended_allocatable.get(name)
            if name in self.classes and not listed:
                via_dra.append(name)
            elif listed is None:
                return (), (
                    f"cannot fit resource {name}: node {node.name} does not list it in its allocatable "
                    "and no device class provides it"
                )
        return tuple(via_dra), ""
