"""DeviceClass: the selectors and config a request inherits by naming the class."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from extender.model._fields import Fields, check_metadata, metadata_name


@dataclass(frozen=True, slots=True)
class DeviceClass:
    name: str
    # CEL expressions in order; None marks a selector without `cel` (unsupported type),
    # which is only an error once a request actually uses the class.
    selectors: tuple[str | None, ...]
    # spec.config items as written ({"opaque": {...}}), copied into results verbatim.
    config: tuple[Mapping[str, Any], ...]
    extended_resource_name: str
    raw: Mapping[str, Any]

    @property
    def created(self) -> str:
        """``metadata.creationTimestamp`` as written ("" when absent)."""
        created = (self.raw.get("metadata") or {}).get("creationTimestamp")
        return created if isinstance(created, str) else ""


def parse_selectors(f: Fields, raw: Any, field: str) -> tuple[str | None, ...]:
    out: list[str | None] = []
    for where, sel in f.mappings(raw, field):
        cel = sel.get("cel")
        if cel is None:
            out.append(None)
            continue
        cel = f.mapping(cel, f"{where}.cel")
        out.append(f.string(cel.get("expression"), f"{where}.cel.expression"))
    return tuple(out)


def parse_config_items(f: Fields, raw: Any, field: str) -> tuple[Mapping[str, Any], ...]:
    return tuple(item for _, item in f.mappings(raw, field))


def parse_device_class(obj: dict[str, Any]) -> DeviceClass:
    meta, name = metadata_name(obj, "DeviceClass")
    f = Fields("DeviceClass", name)
    check_metadata(f, meta)
    spec = f.mapping(obj.get("spec"), "spec")
    return DeviceClass(
        name=name,
        selectors=parse_selectors(f, spec.get("selectors"), "spec.selectors"),
        config=parse_config_items(f, spec.get("config"), "spec.config"),
        extended_resource_name=f.string(spec.get("extendedResourceName"), "spec.extendedResourceName"),
        raw=obj,
    )
