"""JSON merge patch (RFC 7386) and the subset of strategic merge patch the extender relies on.

Strategic merge differs from merge patch only for lists that Kubernetes declares as merged:
those are merged by key (with ``{"$patch": "delete", <key>: ...}`` removing an element)
instead of replaced. Only the lists of the served types that carry a merge key are listed;
every other list is replaced, as the real API server does for atomic lists.
"""

from __future__ import annotations

import copy
from typing import Any

# path of a list (tuple of field names) -> merge key; None marks a merged list of scalars.
MERGED_LISTS: dict[tuple[str, ...], str | None] = {
    ("metadata", "finalizers"): None,
    ("metadata", "ownerReferences"): "uid",
    ("status", "reservedFor"): "uid",
    ("status", "conditions"): "type",
}


class PatchError(ValueError):
    """The patch document cannot be applied (the server answers 422/400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any, path: tuple[str, ...] = ()) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if not isinstance(value, list):
                raise PatchError(f"{key} must be a list")
            result[field] = [v for v in result.get(field) or [] if v not in value]
            continue
        if key.startswith("$"):
            raise PatchError(f"unsupported strategic merge directive {key!r}")
        child = (*path, key)
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list) and child in MERGED_LISTS:
            result[key] = _merge_list(result.get(key) or [], value, MERGED_LISTS[child])
        else:
            result[key] = strategic_merge_patch(result.get(key), value, child)
    return result


def _merge_list(current: list[Any], patch: list[Any], key: str | None) -> list[Any]:
    if key is None:
        return current + [v for v in patch if v not in current]
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"list element {item!r} lacks merge key {key!r}")
        index = next((i for i, old in enumerate(merged) if old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                del merged[index]
        elif "$patch" in item:
            raise PatchError(f"unsupported $patch {item['$patch']!r} in list element")
        elif index is None:
            merged.append(copy.deepcopy(item))
        else:
            merged[index] = merge_patch(merged[index], item)
    return merged
