"""A small kustomize: the part of it manifests/ uses, so the tests need no kubectl binary.

Supported: ``resources`` (files and directories with their own kustomization), ``images``,
``patches`` in JSON 6902 form (add, replace, remove) with a ``target`` kind and name, and a
``configMapGenerator`` of files without a name hash. Anything else is refused, so a manifest that
starts using more of kustomize fails here instead of being built wrongly. test_kustomize.py
compares the result with ``kubectl kustomize`` wherever kubectl is installed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

Obj = dict[str, Any]
KEYS = {"apiVersion", "kind", "resources", "images", "patches", "configMapGenerator"}


class KustomizeError(Exception):
    pass


def build(directory: Path) -> list[Obj]:
    """The objects ``kubectl kustomize directory`` prints (in no particular order)."""
    spec = yaml.safe_load((directory / "kustomization.yaml").read_text())
    if spec.get("kind", "Kustomization") != "Kustomization" or set(spec) - KEYS:
        raise KustomizeError(f"{directory}: unsupported kustomization fields {sorted(set(spec) - KEYS)}")
    objects: list[Obj] = []
    for entry in spec.get("resources", []):
        path = (directory / entry).resolve()
        if path.is_dir():
            objects += build(path)
        else:
            objects += [doc for doc in yaml.safe_load_all(path.read_text()) if doc]
    objects += [_config_map(directory, generator) for generator in spec.get("configMapGenerator", [])]
    for patch in spec.get("patches", []):
        _patch(directory, objects, patch)
    for image in spec.get("images", []):
        for obj in objects:
            _set_image(obj, image)
    _check_unique(directory, objects)
    return objects


def _config_map(directory: Path, generator: dict[str, Any]) -> Obj:
    options = generator.get("options", {})
    if not options.get("disableNameSuffixHash") or set(generator) - {"name", "namespace", "files", "options"}:
        raise KustomizeError(f"{directory}: only configMapGenerator files without a name hash are supported")
    data = {}
    for item in generator["files"]:
        key, _, source = item.rpartition("=") if "=" in item else (Path(item).name, "", item)
        data[key] = (directory / source).read_text()
    metadata: dict[str, Any] = {"name": generator["name"]}
    if "namespace" in generator:
        metadata["namespace"] = generator["namespace"]
    if options.get("labels"):
        metadata["labels"] = dict(options["labels"])
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": data}


def _patch(directory: Path, objects: list[Obj], patch: dict[str, Any]) -> None:
    target = patch.get("target", {})
    if set(target) - {"kind", "name", "namespace"} or not {"kind", "name"} <= set(target):
        raise KustomizeError(f"{directory}: a patch targets one object by kind and name")
    text = (directory / patch["path"]).read_text() if "path" in patch else patch["patch"]
    operations = yaml.safe_load(text)
    if not isinstance(operations, list):
        raise KustomizeError(f"{directory}: only JSON 6902 patches (a list of operations) are supported")
    matches = [obj for obj in objects if obj["kind"] == target["kind"]
               and obj["metadata"]["name"] == target["name"]
               and target.get("namespace", _namespace(obj)) == _namespace(obj)]
    if len(matches) != 1:
        raise KustomizeError(f"{directory}: patch target {target} matches {len(matches)} objects")
    for operation in operations:
        _apply(matches[0], operation)


def _apply(obj: Obj, operation: dict[str, Any]) -> None:
    op, path = operation["op"], operation["path"]
    if op not in {"add", "replace", "remove"}:
        raise KustomizeError(f"unsupported patch operation {op}")
    keys = [part.replace("~1", "/").replace("~0", "~") for part in path.split("/")[1:]]
    parent: Any = obj
    for key in keys[:-1]:
        parent = parent[int(key)] if isinstance(parent, list) else parent[key]
    last = keys[-1]
    value = copy.deepcopy(operation.get("value"))
    if isinstance(parent, list):
        if op == "add":
            parent.insert(len(parent) if last == "-" else int(last), value)
        elif op == "replace":
            parent[int(last)] = value
        else:
            del parent[int(last)]
    else:
        if op != "add" and last not in parent:
            raise KustomizeError(f"{op} {path}: no such field")
        if op == "remove":
            del parent[last]
        else:
            parent[last] = value


def _namespace(obj: Obj) -> str | None:
    return obj["metadata"].get("namespace")


def _set_image(obj: Obj, image: dict[str, Any]) -> None:
    pod = obj.get("spec", {}).get("template", {}).get("spec", {})
    for container in pod.get("containers", []) + pod.get("initContainers", []):
        reference = container["image"]
        name, tag = reference.split("@")[0], ""
        if ":" in name.rsplit("/", 1)[-1]:
            name, _, tag = name.rpartition(":")
        if name != image["name"]:
            continue
        name = image.get("newName", name)
        if "digest" in image:
            container["image"] = f"{name}@{image['digest']}"
        else:
            tag = image.get("newTag", tag)
            container["image"] = f"{name}:{tag}" if tag else name


def _check_unique(directory: Path, objects: list[Obj]) -> None:
    seen = set()
    for obj in objects:
        key = (obj["kind"], obj["metadata"].get("namespace"), obj["metadata"]["name"])
        if key in seen:
            raise KustomizeError(f"{directory}: {key} appears twice")
        seen.add(key)
