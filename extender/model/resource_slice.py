"""ResourceSlice and Device, parsed once into what the allocator and the CEL layer read."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name
from extender.model._shared import ContentMemo, SharedJson, cel_memo_for
from extender.model.nodes import NodeSelector, parse_node_selector
from extender.model.quantity import Quantity

DeviceID = tuple[str, str, str]  # (driver, pool, device)

# API member name -> (type tag shared by scalars and lists, is list)
_ATTRIBUTE_MEMBERS: dict[str, tuple[str, bool]] = {
    "string": ("string", False),
    "int": ("int", False),
    "bool": ("bool", False),
    "version": ("version", False),
    "strings": ("string", True),
    "ints": ("int", True),
    "bools": ("bool", True),
    "versions": ("version", True),
}
_PY_TYPES: dict[str, type] = {"string": str, "int": int, "bool": bool, "version": str}


@dataclass(frozen=True, slots=True)
class AttributeValue:
    """One attribute as constraints compare it. ``kind`` None: no known member is set."""

    kind: str | None
    values: tuple[Any, ...]
    is_list: bool


@dataclass(frozen=True, slots=True)
class RequestPolicy:
    default: Quantity | None
    valid_values: tuple[Quantity, ...]
    min: Quantity | None  # validRange.min; None when there is no validRange
    max: Quantity | None
    step: Quantity | None
    has_range: bool


@dataclass(frozen=True, slots=True)
class Capacity:
    value: Quantity
    policy: RequestPolicy | None


@dataclass(frozen=True, slots=True)
class CounterSet:
    name: str
    counters: Mapping[str, Quantity]
    # A device's consumesCounters entry only: the groups it may be co-allocated with on that
    # counter set (DRADeviceCompatibilityGroups); empty means "no groups".
    compatibility_groups: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class NodeAllocatableMapping:
    """How an allocated device adds to a node resource: ``consumedCapacity[capacity_key]`` times
    ``capacity_multiplier``, or else ``device_multiplier`` once per device."""

    capacity_key: str | None
    capacity_multiplier: Quantity | None
    device_multiplier: Quantity | None


@dataclass(frozen=True, slots=True)
class NodeAllocatableOverhead:
    per_pod: Quantity | None
    per_container: Quantity | None


@dataclass(frozen=True, slots=True)
class NodeAllocatableResource:
    """One entry of a device's ``nodeAllocatableResources`` (DRANodeAllocatableResources)."""

    mapping: NodeAllocatableMapping | None
    overhead: NodeAllocatableOverhead | None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str
    raw: Mapping[str, Any]


@dataclass(frozen=True, slots=True, eq=False)
class Device:
    """A device as published in one slice version; identity-hashed and never mutated.

    ``attributes``/``capacity`` are the raw API maps the CEL layer reads; ``cel_memo`` belongs
    to the CEL layer. CEL sees only the driver, those two maps and ``allow_multiple_allocations``,
    so devices that agree on all four, in any slice, share one memo (one view, one verdict per
    selector) instead of repeating them (``_shared.cel_memo_for``).
    """

    name: str
    driver: str
    pool: str
    id: DeviceID
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Any]]
    typed_attributes: Mapping[str, AttributeValue]
    capacities: Mapping[str, Capacity]
    consumes_counters: tuple[CounterSet, ...]
    node_name: str
    node_selector: NodeSelector | None
    all_nodes: bool
    taints: tuple[Taint, ...]
    binds_to_node: bool
    binding_conditions: tuple[str, ...]
    binding_failure_conditions: tuple[str, ...]
    allow_multiple_allocations: bool
    # node resource name (cpu, memory, hugepages-*, ...) -> how allocating the device uses it
    node_allocatable: Mapping[str, NodeAllocatableResource] = field(default_factory=dict)
    cel_memo: dict[Any, Any] = field(default_factory=dict)

    def attribute(self, fq_name: str) -> AttributeValue | None:
        """Look up a fully qualified name; the driver's own domain may be written bare."""
        value = self.typed_attributes.get(fq_name)
        if value is not None:
            return value
        domain, sep, ident = fq_name.partition("/")
        if sep and domain == self.driver:
            return self.typed_attributes.get(ident)
        return None


@dataclass(frozen=True, slots=True)
class PoolRef:
    name: str
    generation: int
    resource_slice_count: int


@dataclass(frozen=True, slots=True, eq=False)
class ResourceSlice:
    name: str
    driver: str
    pool: PoolRef
    node_name: str
    node_selector: NodeSelector | None
    all_nodes: bool
    # None when unset: with partitionable devices off even an explicit `false` disqualifies a slice.
    per_device_node_selection: bool | None
    devices: tuple[Device, ...]
    shared_counters: tuple[CounterSet, ...]
    has_binding_conditions: bool
    # node-local operations the kubelet skips for this slice's devices (DRAOptionalNodeOperations)
    skip_node_operations: tuple[str, ...]
    raw: Mapping[str, Any]


def _attribute(f: Fields, raw: Any, path: str) -> AttributeValue:
    raw = f.mapping(raw, path)
    for member, (kind, is_list) in _ATTRIBUTE_MEMBERS.items():
        if raw.get(member) is None:
            continue
        py_type = _PY_TYPES[kind]
        items = f.sequence(raw[member], f"{path}.{member}") if is_list else [raw[member]]
        if not items:
            continue  # an empty list carries no value, like an unset member
        for item in items:
            if not isinstance(item, py_type) or (py_type is int and isinstance(item, bool)):
                raise f.error(f"{path}.{member}", f"must hold {kind} values, got {item!r}")
        return AttributeValue(kind=kind, values=tuple(items), is_list=is_list)
    # No known member: CEL reports it per evaluation, constraints treat it as untyped.
    return AttributeValue(kind=None, values=(), is_list=False)


def _policy(f: Fields, raw: Any, path: str) -> RequestPolicy | None:
    if raw is None:
        return None
    raw = f.mapping(raw, path)
    default = raw.get("default")
    rng = raw.get("validRange")
    rng_map = f.mapping(rng, f"{path}.validRange")

    def opt(value: Any, where: str) -> Quantity | None:
        return None if value is None else f.quantity(value, where)

    if rng is not None and rng_map.get("min") is None:
        raise f.error(f"{path}.validRange.min", "required")
    return RequestPolicy(
        default=opt(default, f"{path}.default"),
        valid_values=tuple(
            f.quantity(v, f"{path}.validValues[{i}]")
            for i, v in enumerate(f.sequence(raw.get("validValues"), f"{path}.validValues"))
        ),
        min=opt(rng_map.get("min"), f"{path}.validRange.min"),
        max=opt(rng_map.get("max"), f"{path}.validRange.max"),
        step=opt(rng_map.get("step"), f"{path}.validRange.step"),
        has_range=rng is not None,
    )


def _counters(f: Fields, raw: Any, path: str) -> dict[str, Quantity]:
    out = {}
    for name, counter in f.mapping(raw, path).items():
        counter = f.mapping(counter, f"{path}.{name}")
        out[name] = f.quantity(counter.get("value"), f"{path}.{name}.value")
    return out


def _counter_sets(f: Fields, raw: Any, path: str, name_key: str) -> tuple[CounterSet, ...]:
    out = []
    for where, item in f.mappings(raw, path):
        groups = item.get("compatibilityGroups") if name_key == "counterSet" else None
        out.append(
            CounterSet(
                name=f.string(item.get(name_key), f"{where}.{name_key}", required=True),
                counters=_counters(f, item.get("counters"), f"{where}.counters"),
                compatibility_groups=f.strings(groups, f"{where}.compatibilityGroups"),
            )
        )
    return tuple(out)


# Parsed forms of the slice's shared raw subtrees, by (field, ids of the subtrees): devices
# whose maps are one object (see SharedJson) also share what is parsed from them. Each entry
# keeps its subtrees alive, so an id cannot be reused by another object during the parse.
_ParseMemo = dict[tuple[Any, ...], tuple[tuple[Any, ...], Any]]

# Across slices, by content: a cluster of alike nodes publishes the same attribute and capacity
# maps in every node's slice (issue 15; docs/performance.md, "Start-up in local mode").
# Process-wide, as parsing is (model/ is below anything an app owns): each is a pure function
# of the JSON content (ContentMemo checks the text and equality; parses are immutable), and
# bounded (ContentMemo drops its oldest entries past its size, SharedJson starts afresh), so an
# app finding another's entry gets what it would have parsed itself.
_ATTRIBUTES: ContentMemo[dict[str, AttributeValue]] = ContentMemo(4096)
_CAPACITIES: ContentMemo[dict[str, Capacity]] = ContentMemo(4096)
# ... and the raw slices themselves, and the devices: one device parsed again in every pool
# differs only in its pool.
_SHARED_JSON = SharedJson(100_000)
_DEVICE_BODIES: ContentMemo[dict[str, Any]] = ContentMemo(4096)


def _memoized(
    memo: _ParseMemo, field: str, raws: tuple[Any, ...], parse: Callable[[], Any],
    content: ContentMemo[Any] | None = None,
) -> Any:
    """The slice's parse of ``raws``; with ``content``, of its one raw value as parsed in any slice."""
    key = (field, *map(id, raws))
    found = memo.get(key)
    if found is None:
        found = memo[key] = (raws, parse() if content is None else content.parse(raws[0], parse))
    return found[1]


def _capacities(f: Fields, capacity: Mapping[str, Any], path: str) -> dict[str, Capacity]:
    capacities = {}
    for cap_name, cap in capacity.items():
        where = f"{path}.capacity[{cap_name}]"
        cap = f.mapping(cap, where)
        capacities[cap_name] = Capacity(
            value=f.quantity(cap.get("value"), f"{where}.value"),
            policy=_policy(f, cap.get("requestPolicy"), f"{where}.requestPolicy"),
        )
    return capacities


def _typed_attributes(f: Fields, attributes: Mapping[str, Any], path: str) -> dict[str, AttributeValue]:
    return {key: _attribute(f, value, f"{path}.attributes[{key}]") for key, value in attributes.items()}


_NO_NODE_ALLOCATABLE: Mapping[str, NodeAllocatableResource] = MappingProxyType({})


def _optional_quantity(f: Fields, obj: Any, field: str) -> Quantity | None:
    return None if obj is None else f.quantity(obj, field)


def _node_allocatable(f: Fields, raw: Mapping[str, Any], path: str) -> dict[str, NodeAllocatableResource]:
    out = {}
    for name, entry in raw.items():
        where = f"{path}[{name}]"
        entry = f.mapping(entry, where)
        mapping = overhead = None
        if entry.get("mapping") is not None:
            m = f.mapping(entry["mapping"], f"{where}.mapping")
            key = m.get("capacityKey")
            mapping = NodeAllocatableMapping(
                capacity_key=None if key is None else f.string(key, f"{where}.mapping.capacityKey"),
                capacity_multiplier=_optional_quantity(
                    f, m.get("capacityMultiplier"), f"{where}.mapping.capacityMultiplier"
                ),
                device_multiplier=_optional_quantity(
                    f, m.get("deviceMultiplier"), f"{where}.mapping.deviceMultiplier"
                ),
            )
        if entry.get("overhead") is not None:
            o = f.mapping(entry["overhead"], f"{where}.overhead")
            overhead = NodeAllocatableOverhead(
                per_pod=_optional_quantity(f, o.get("perPod"), f"{where}.overhead.perPod"),
                per_container=_optional_quantity(f, o.get("perContainer"), f"{where}.overhead.perContainer"),
            )
        out[name] = NodeAllocatableResource(mapping=mapping, overhead=overhead)
    return out


def _device(f: Fields, raw: Any, path: str, driver: str, pool: str, memo: _ParseMemo) -> Device:
    body = _DEVICE_BODIES.parse([driver, raw], lambda: _device_body(f, raw, path, driver, memo))
    attributes, capacity = body["attributes"], body["capacity"]
    allow_multiple = body["allow_multiple_allocations"]
    # Not part of the body: a CEL memo lives only as long as a device refers to it.
    cel_memo = _memoized(
        memo, "cel", (attributes, capacity, allow_multiple),
        lambda: cel_memo_for(driver, attributes, capacity, allow_multiple),
    )
    return Device(pool=pool, id=(driver, pool, body["name"]), cel_memo=cel_memo, **body)


def _device_body(f: Fields, raw: Any, path: str, driver: str, memo: _ParseMemo) -> dict[str, Any]:
    """Device's fields but its pool's (``pool``, ``id``): what the driver and the raw device make."""
    raw = f.mapping(raw, path)
    name = f.string(raw.get("name"), f"{path}.name", required=True)
    attributes = f.mapping(raw.get("attributes"), f"{path}.attributes")
    capacity = f.mapping(raw.get("capacity"), f"{path}.capacity")
    capacities = _memoized(
        memo, "capacity", (capacity,), lambda: _capacities(f, capacity, path), _CAPACITIES
    )
    taints = []
    for where, taint in f.mappings(raw.get("taints"), f"{path}.taints"):
        taints.append(
            Taint(
                key=f.string(taint.get("key"), f"{where}.key"),
                value=f.string(taint.get("value"), f"{where}.value"),
                effect=f.string(taint.get("effect"), f"{where}.effect"),
                raw=taint,
            )
        )
    selector = raw.get("nodeSelector")
    consumes = raw.get("consumesCounters")
    allocatable = f.mapping(raw.get("nodeAllocatableResources"), f"{path}.nodeAllocatableResources")
    return dict(
        name=name,
        driver=driver,
        attributes=attributes,
        capacity=capacity,
        typed_attributes=_memoized(
            memo, "attributes", (attributes,), lambda: _typed_attributes(f, attributes, path), _ATTRIBUTES
        ),
        capacities=capacities,
        consumes_counters=_memoized(
            memo, "consumesCounters", (consumes,), lambda: _counter_sets(
                f, consumes, f"{path}.consumesCounters", "counterSet"
            ),
        ),
        node_name=f.string(raw.get("nodeName"), f"{path}.nodeName"),
        node_selector=None if selector is None else parse_node_selector(f, selector, f"{path}.nodeSelector"),
        all_nodes=bool(f.boolean(raw.get("allNodes"), f"{path}.allNodes")),
        taints=tuple(taints),
        binds_to_node=bool(f.boolean(raw.get("bindsToNode"), f"{path}.bindsToNode")),
        binding_conditions=f.strings(raw.get("bindingConditions"), f"{path}.bindingConditions"),
        binding_failure_conditions=f.strings(
            raw.get("bindingFailureConditions"), f"{path}.bindingFailureConditions"
        ),
        allow_multiple_allocations=bool(
            f.boolean(raw.get("allowMultipleAllocations"), f"{path}.allowMultipleAllocations")
        ),
        node_allocatable=_memoized(
            memo, "nodeAllocatableResources", (allocatable,), lambda: _node_allocatable(
                f, allocatable, f"{path}.nodeAllocatableResources"
            ),
        ) if allocatable else _NO_NODE_ALLOCATABLE,
    )


def parse_resource_slice(obj: dict[str, Any]) -> ResourceSlice:
    """The typed slice; its ``raw`` is an equal copy of ``obj`` with repeated subtrees shared."""
    meta, name = metadata_name(obj, "ResourceSlice")
    f = Fields("ResourceSlice", name)
    check_metadata(f, meta)
    obj = _SHARED_JSON(obj)
    memo: _ParseMemo = {}
    spec = f.mapping(obj.get("spec"), "spec")
    driver = f.string(spec.get("driver"), "spec.driver", required=True)
    pool_raw = f.mapping(spec.get("pool"), "spec.pool")
    count = f.integer(pool_raw.get("resourceSliceCount"), "spec.pool.resourceSliceCount")
    if count is None or count <= 0:
        raise f.error("spec.pool.resourceSliceCount", "must be a positive integer")
    pool = PoolRef(
        name=f.string(pool_raw.get("name"), "spec.pool.name", required=True),
        generation=f.integer(pool_raw.get("generation"), "spec.pool.generation") or 0,
        resource_slice_count=count,
    )
    devices = tuple(
        _device(f, dev, f"spec.devices[{i}]", driver, pool.name, memo)
        for i, dev in enumerate(f.sequence(spec.get("devices"), "spec.devices"))
    )
    selector = spec.get("nodeSelector")
    return ResourceSlice(
        name=name,
        driver=driver,
        pool=pool,
        node_name=f.string(spec.get("nodeName"), "spec.nodeName"),
        node_selector=None if selector is None else parse_node_selector(f, selector, "spec.nodeSelector"),
        all_nodes=bool(f.boolean(spec.get("allNodes"), "spec.allNodes")),
        per_device_node_selection=f.boolean(
            spec.get("perDeviceNodeSelection"), "spec.perDeviceNodeSelection"
        ),
        devices=devices,
        shared_counters=_counter_sets(f, spec.get("sharedCounters"), "spec.sharedCounters", "name"),
        has_binding_conditions=any(d.binding_conditions for d in devices),
        skip_node_operations=f.strings(spec.get("skipNodeOperations"), "spec.skipNodeOperations"),
        raw=obj,
    )
