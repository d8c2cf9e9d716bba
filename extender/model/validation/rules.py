"""The API server's validation of the objects the extender uses, for whatever admits them.

A real cluster's objects were validated by kube-apiserver before the extender sees them; local
mode's embedded API server (``extender.local``) must refuse the same objects, or a manifest
that a cluster would reject gets scheduled, and a slice of 10,000 devices costs what 128 never
could. These are the size limits and name formats of k8s.io/kubernetes
pkg/apis/resource/validation (v1.37.2) and the object-name rules of pkg/apis/core/validation,
checked on the raw JSON before anything is copied or parsed. Shapes (a string where an object
belongs, a quantity that does not parse) are left to the model's parsers, which name the field.

:func:`validate` raises ``ValueError("<kind> <name>: <field>: <problem>")`` for the first rule
an object breaks.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from extender.model.validation import limits as L


class _Invalid(ValueError):
    def __init__(self, path: str, problem: str) -> None:
        super().__init__(path, problem)
        self.path, self.problem = path, problem


class _Shape(Exception):
    """A value of the wrong JSON type: the model's parser refuses it, in its own words."""


def validate(kind: str, obj: Mapping[str, Any]) -> None:
    """Refuse ``obj`` (of ``kind``, one of the kinds the extender uses) as the API server would."""
    try:
        meta = _mapping(obj.get("metadata"), "metadata")
        _object_meta(kind, meta)
        check = _SPECS.get(kind)
        if check is not None:
            check(_mapping(obj.get("spec"), "spec"), "spec")
    except _Shape:
        return
    except _Invalid as exc:
        raise ValueError(f"{kind} {_identity(kind, meta)}: {exc.path}: {exc.problem}") from None


def _identity(kind: str, meta: Mapping[str, Any]) -> str:
    """The object as the model's errors name it: ``namespace/name`` for namespaced kinds."""
    name = meta.get("name") if isinstance(meta.get("name"), str) else meta.get("generateName")
    if kind not in _NAMESPACED:
        return str(name)
    return f"{meta.get('namespace') or 'default'}/{name}"


# ----- values ---------------------------------------------------------------------------------


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise _Shape(path)
    return value


def _items(value: Any, path: str, most: int) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _Shape(path)
    if len(value) > most:
        raise _Invalid(path, f"must have at most {most} items, has {len(value)}")
    return value


def _entries(value: Any, path: str, most: int) -> Mapping[str, Any]:
    entries = _mapping(value, path)
    if len(entries) > most:
        raise _Invalid(path, f"must have at most {most} entries, has {len(entries)}")
    return entries


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _Shape(path)
    if not value:
        raise _Invalid(path, "required")
    return value


def _integer(value: Any, path: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Shape(path)
    return value


def _shown(value: str) -> str:
    return repr(value if len(value) <= 80 else value[:80] + "...")


def _label(value: Any, path: str) -> str:
    """A DNS-1123 label: lower-case alphanumerics and '-', at most 63 characters."""
    text = _string(value, path)
    if len(text) > L.DNS1123_LABEL_MAX_LENGTH:
        raise _Invalid(path, f"must be no more than {L.DNS1123_LABEL_MAX_LENGTH} characters")
    if not L.DNS1123_LABEL.match(text):
        raise _Invalid(
            path,
            f"{_shown(text)}: a lowercase RFC 1123 label must consist of lower case alphanumeric "
            "characters or '-', and must start and end with an alphanumeric character",
        )
    return text


def _subdomain(value: Any, path: str, most: int = L.DNS1123_SUBDOMAIN_MAX_LENGTH) -> str:
    """A DNS-1123 subdomain: labels joined by '.', at most 253 characters."""
    text = _string(value, path)
    if len(text) > most:
        raise _Invalid(path, f"must be no more than {most} characters")
    if not L.DNS1123_SUBDOMAIN.match(text):
        raise _Invalid(
            path,
            f"{_shown(text)}: a lowercase RFC 1123 subdomain must consist of lower case alphanumeric "
            "characters, '-' or '.', and must start and end with an alphanumeric character",
        )
    return text


def _driver_name(value: Any, path: str) -> None:
    """As a CSI driver name: a DNS-1123 subdomain (in any case) of at most 63 characters."""
    _subdomain(_string(value, path).lower(), path, L.DRIVER_NAME_MAX_LENGTH)


def _c_identifier(text: str, path: str) -> None:
    if len(text) > L.DEVICE_MAX_ID_LENGTH:
        raise _Invalid(path, f"must be no more than {L.DEVICE_MAX_ID_LENGTH} characters")
    if not L.C_IDENTIFIER.match(text):
        raise _Invalid(path, f"{_shown(text)}: a valid C identifier must start with a letter or '_'")


def _qualified_name(key: str, path: str) -> None:
    """An attribute or capacity name: a C identifier, optionally behind a driver-name domain."""
    domain, slash, name = key.partition("/")
    if not slash:
        _c_identifier(key, path)
        return
    if not domain:
        raise _Invalid(path, "the domain must not be empty")
    _driver_name(domain, path)
    if not name:
        raise _Invalid(path, "the name must not be empty")
    _c_identifier(name, path)


def _unique(names: list[str], path: str) -> None:
    seen: set[str] = set()
    for i, name in enumerate(names):
        if name in seen:
            raise _Invalid(f"{path}[{i}]", f"duplicate value {_shown(name)}")
        seen.add(name)


# ----- objects --------------------------------------------------------------------------------

# Namespaced kinds; every kind's name is a DNS-1123 subdomain (ValidateObjectMeta with
# NameIsDNSSubdomain, the rule of each of these kinds, Pod and Node included).
_NAMESPACED = frozenset({"ResourceClaim", "ResourceClaimTemplate", "Pod"})


def _object_meta(kind: str, meta: Mapping[str, Any]) -> None:
    name = meta.get("name")
    if name is None and meta.get("generateName"):
        _string(meta["generateName"], "metadata.generateName")
    else:
        _subdomain(name, "metadata.name")
    namespace = meta.get("namespace")
    if kind in _NAMESPACED and namespace is not None:
        _label(namespace, "metadata.namespace")


def _slice_spec(spec: Mapping[str, Any], path: str) -> None:
    _driver_name(spec.get("driver"), f"{path}.driver")
    pool = _mapping(spec.get("pool"), f"{path}.pool")
    pool_name = _string(pool.get("name"), f"{path}.pool.name")
    if len(pool_name) > L.POOL_NAME_MAX_LENGTH:
        raise _Invalid(f"{path}.pool.name", f"must be no more than {L.POOL_NAME_MAX_LENGTH} characters")
    for part in pool_name.split("/"):
        _subdomain(part, f"{path}.pool.name")
    if _integer(pool.get("resourceSliceCount"), f"{path}.pool.resourceSliceCount") <= 0:
        raise _Invalid(f"{path}.pool.resourceSliceCount", "must be greater than zero")
    if _integer(pool.get("generation", 0), f"{path}.pool.generation") < 0:
        raise _Invalid(f"{path}.pool.generation", "must be greater than or equal to zero")
    if spec.get("nodeName") is not None:
        _subdomain(spec["nodeName"], f"{path}.nodeName")
    # The size check comes first and costs nothing: 10,000 devices are refused before any is read.
    devices = _items(spec.get("devices"), f"{path}.devices", L.RESOURCE_SLICE_MAX_DEVICES)
    if len(devices) > L.RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES and any(
        _advanced(d) for d in devices
    ):
        raise _Invalid(
            f"{path}.devices",
            f"must have at most {L.RESOURCE_SLICE_MAX_DEVICES_WITH_ADVANCED_FEATURES} items when devices "
            f"have taints, consume counters or have list attributes, has {len(devices)}",
        )
    names = [_device(_mapping(d, f"{path}.devices[{i}]"), f"{path}.devices[{i}]")
             for i, d in enumerate(devices)]
    _unique(names, f"{path}.devices")
    counter_sets = _items(spec.get("sharedCounters"), f"{path}.sharedCounters",
                          L.RESOURCE_SLICE_MAX_COUNTER_SETS)
    set_names = []
    for i, raw in enumerate(counter_sets):
        where = f"{path}.sharedCounters[{i}]"
        counter_set = _mapping(raw, where)
        set_names.append(_label(counter_set.get("name"), f"{where}.name"))
        counters = _entries(counter_set.get("counters"), f"{where}.counters",
                            L.RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_SET)
        for key in counters:
            _label(key, f"{where}.counters[{key}]")
    _unique(set_names, f"{path}.sharedCounters")


def _advanced(device: Any) -> bool:
    if not isinstance(device, Mapping):
        return False
    attributes = device.get("attributes")
    listed = isinstance(attributes, Mapping) and any(
        isinstance(a, Mapping) and any(k in a for k in ("bools", "ints", "strings", "versions"))
        for a in attributes.values()
    )
    return bool(device.get("taints") or device.get("consumesCounters") or listed)


def _device(device: Mapping[str, Any], path: str) -> str:
    name = _label(device.get("name"), f"{path}.name")
    attributes = _mapping(device.get("attributes"), f"{path}.attributes")
    capacity = _mapping(device.get("capacity"), f"{path}.capacity")
    if len(attributes) + len(capacity) > L.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE:
        raise _Invalid(
            path,
            "the total number of attributes and capacities must not exceed "
            f"{L.RESOURCE_SLICE_MAX_ATTRIBUTES_AND_CAPACITIES_PER_DEVICE}",
        )
    values = 0
    for key, raw in attributes.items():
        where = f"{path}.attributes[{key}]"
        _qualified_name(key, where)
        values += _attribute(_mapping(raw, where), where)
    most_values = L.RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
    if values > most_values:
        raise _Invalid(path, f"the total number of attribute values must not exceed {most_values}")
    for key in capacity:
        _qualified_name(key, f"{path}.capacity[{key}]")
    _items(device.get("taints"), f"{path}.taints", L.DEVICE_TAINTS_MAX_LENGTH)
    consumptions = _items(device.get("consumesCounters"), f"{path}.consumesCounters",
                          L.RESOURCE_SLICE_MAX_COUNTER_CONSUMPTIONS_PER_DEVICE)
    for i, raw in enumerate(consumptions):
        where = f"{path}.consumesCounters[{i}]"
        consumption = _mapping(raw, where)
        _label(consumption.get("counterSet"), f"{where}.counterSet")
        counters = _entries(consumption.get("counters"), f"{where}.counters",
                            L.RESOURCE_SLICE_MAX_COUNTERS_PER_COUNTER_CONSUMPTION)
        for key in counters:
            _label(key, f"{where}.counters[{key}]")
    return name


def _attribute(attribute: Mapping[str, Any], path: str) -> int:
    """Checks one attribute value; returns how many values it holds (a list counts each)."""
    for field in ("string", "version"):
        if isinstance(attribute.get(field), str):
            _attribute_text(attribute[field], f"{path}.{field}", field == "version")
    count = 1
    for field in ("bools", "ints", "strings", "versions"):
        if field in attribute:
            most = L.RESOURCE_SLICE_MAX_ATTRIBUTE_VALUES_PER_DEVICE
            listed = _items(attribute[field], f"{path}.{field}", most)
            if not listed:
                raise _Invalid(f"{path}.{field}", "must not be empty if specified")
            count = len(listed)
            if field in ("strings", "versions"):
                for i, text in enumerate(listed):
                    _attribute_text(_string(text, f"{path}.{field}[{i}]"), f"{path}.{field}[{i}]",
                                    field == "versions")
    return count


def _attribute_text(text: str, path: str, version: bool) -> None:
    if version and not L.SEMVER.match(text):
        raise _Invalid(path, f"{_shown(text)}: must be a string compatible with semver.org spec 2.0.0")
    if len(text.encode()) > L.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH:
        raise _Invalid(path, f"must be no more than {L.DEVICE_ATTRIBUTE_MAX_VALUE_LENGTH} bytes")


def _claim_spec(spec: Mapping[str, Any], path: str) -> None:
    devices = _mapping(spec.get("devices"), f"{path}.devices")
    path = f"{path}.devices"
    requests = _items(devices.get("requests"), f"{path}.requests", L.DEVICE_REQUESTS_MAX_SIZE)
    used = _constraint_attributes(devices.get("constraints"), f"{path}.constraints")
    names = []
    for i, raw in enumerate(requests):
        where = f"{path}.requests[{i}]"
        request = _mapping(raw, where)
        name = _label(request.get("name"), f"{where}.name")
        names.append(name)
        if request.get("exactly") is not None:
            _exact_request(_mapping(request["exactly"], f"{where}.exactly"), f"{where}.exactly", name, used)
        subs = _items(request.get("firstAvailable"), f"{where}.firstAvailable",
                      L.FIRST_AVAILABLE_DEVICE_REQUEST_MAX_SIZE)
        sub_names = []
        for j, sub in enumerate(subs):
            sub_path = f"{where}.firstAvailable[{j}]"
            sub_request = _mapping(sub, sub_path)
            sub_names.append(_label(sub_request.get("name"), f"{sub_path}.name"))
            _exact_request(sub_request, sub_path, f"{name}/{sub_names[-1]}", used)
        _unique(sub_names, f"{where}.firstAvailable")
    _unique(names, f"{path}.requests")
    _items(devices.get("config"), f"{path}.config", L.DEVICE_CONFIG_MAX_SIZE)


def _constraint_attributes(value: Any, path: str) -> dict[str, set[str]]:
    """The attribute names constraints compare, by the request they target ("" for a
    constraint on every request; "req" also covers its subrequests), for the rule that every
    derived attribute is read by a constraint (gatherConstraintAttributes, v1.37.2)."""
    used: dict[str, set[str]] = {}
    for i, raw in enumerate(_items(value, path, L.DEVICE_CONSTRAINTS_MAX_SIZE)):
        constraint = _mapping(raw, f"{path}[{i}]")
        name = constraint.get("matchAttribute")
        if name is None:
            name = constraint.get("distinctAttribute")
        if name is None:
            continue
        if not isinstance(name, str):
            raise _Shape(f"{path}[{i}]")
        targets = _items(constraint.get("requests"), f"{path}[{i}].requests", L.DEVICE_REQUESTS_MAX_SIZE)
        for target in targets or [""]:
            if not isinstance(target, str):
                raise _Shape(f"{path}[{i}].requests")
            used.setdefault(target, set()).add(name)
    return used


def _exact_request(request: Mapping[str, Any], path: str, name: str, used: dict[str, set[str]]) -> None:
    """One ``exactly`` or subrequest; ``name`` is "req" or "req/sub", ``used`` what
    _constraint_attributes found."""
    _subdomain(request.get("deviceClassName"), f"{path}.deviceClassName")
    _selectors(request.get("selectors"), f"{path}.selectors")
    _derived_attributes(request.get("derivedAttributes"), f"{path}.derivedAttributes", name, used)
    _items(request.get("tolerations"), f"{path}.tolerations", L.DEVICE_TOLERATIONS_MAX_LENGTH)
    mode = request.get("allocationMode") or "ExactCount"
    count = request.get("count")
    if mode == "ExactCount":
        if count is not None and _integer(count, f"{path}.count") <= 0:
            raise _Invalid(f"{path}.count", "must be greater than zero")
    elif mode == "All":
        if count not in (None, 0):
            raise _Invalid(f"{path}.count", "must not be specified when allocationMode is 'All'")
    else:
        raise _Invalid(f"{path}.allocationMode", f'unsupported value {mode!r}: use "All" or "ExactCount"')


def _selectors(value: Any, path: str) -> None:
    for i, raw in enumerate(_items(value, path, L.DEVICE_SELECTORS_MAX_SIZE)):
        cel = _mapping(_mapping(raw, f"{path}[{i}]").get("cel"), f"{path}[{i}].cel")
        expression = _string(cel.get("expression"), f"{path}[{i}].cel.expression")
        if len(expression.encode()) > L.CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
            raise _Invalid(
                f"{path}[{i}].cel.expression",
                f"must be no more than {L.CEL_SELECTOR_EXPRESSION_MAX_LENGTH} bytes",
            )


def _derived_attributes(value: Any, path: str, request: str, used: dict[str, set[str]]) -> None:
    """DRADerivedAttributes (k8s.io/api resource/v1 DeviceDerivedAttribute, validated by
    validateDeviceDerivedAttribute, v1.37.2): at most 32, names fully qualified and unique, each
    read by a constraint targeting the request, expressions as long as a selector may be. The
    API server also compiles each expression and caps the claim's estimated CEL cost; local
    mode has no cost estimator, so a bad expression fails at allocation instead (docs/upstream.md)."""
    parent = request.partition("/")[0]
    names = []
    for i, raw in enumerate(_items(value, path, L.DEVICE_DERIVED_ATTRIBUTES_MAX_SIZE)):
        where = f"{path}[{i}]"
        attribute = _mapping(raw, where)
        name = _string(attribute.get("name"), f"{where}.name")
        _fully_qualified_name(name, f"{where}.name")
        if not any(name in used.get(target, ()) for target in ("", request, parent)):
            raise _Invalid(
                f"{where}.name",
                f"{_shown(name)}: must be referenced by at least one matchAttribute or "
                "distinctAttribute constraint targeting this request",
            )
        expression = _string(attribute.get("expression"), f"{where}.expression")
        if len(expression.encode()) > L.CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
            raise _Invalid(
                f"{where}.expression", f"must be no more than {L.CEL_SELECTOR_EXPRESSION_MAX_LENGTH} bytes"
            )
        names.append(name)
    _unique(names, path)


def _fully_qualified_name(name: str, path: str) -> None:
    """``domain/id`` (k8s-resource-fully-qualified-name in k8s.io/apimachinery v0.37.2): the
    domain a DNS subdomain of at most 63 characters, the id a C identifier; like the released
    check, more than one slash is not looked at."""
    parts = name.split("/")
    if len(parts) == 1:
        raise _Invalid(
            path, f"{_shown(name)}: a fully qualified name must be a domain and a name separated by a slash"
        )
    if len(parts) > 2:
        return
    domain, ident = parts
    if not domain:
        raise _Invalid(path, "prefix must not be empty")
    _subdomain(domain, path, L.DRIVER_NAME_MAX_LENGTH)
    if not ident:
        raise _Invalid(path, "name must not be empty")
    _c_identifier(ident, path)


def _template_spec(spec: Mapping[str, Any], path: str) -> None:
    _claim_spec(_mapping(spec.get("spec"), f"{path}.spec"), f"{path}.spec")


def _class_spec(spec: Mapping[str, Any], path: str) -> None:
    _selectors(spec.get("selectors"), f"{path}.selectors")
    _items(spec.get("config"), f"{path}.config", L.DEVICE_CONFIG_MAX_SIZE)


_SPECS = {
    "ResourceSlice": _slice_spec,
    "ResourceClaim": _claim_spec,
    "ResourceClaimTemplate": _template_spec,
    "DeviceClass": _class_spec,
}
