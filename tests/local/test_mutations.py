"""Mutation fuzz of local mode: every one-change mutant of a valid object of every kind, through
``/local/apply`` and through a ``--state`` directory.

A mutant is accepted (200, or it loads) or refused with a message naming the field (400, or the
one ManifestError naming file and document); never a 500 or another exception. A refusal
leaves the cluster as it was, and whatever was accepted still lets the extender filter, bind
nothing wrong and delete its pod.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from extender.local.cluster import load_local
from extender.local.store import ManifestError
from extender.model.kinds import KIND_NAMES
from extender.state import ClusterState
from tests.model.mutations import mutants, names_field, valid_objects
from tests.scheduling.cluster import Service, node

OBJECTS = valid_objects()
IDS = [f"{o['kind']}-{o['metadata']['name']}" for o in OBJECTS]
NODES = ["node-0"]
_RELATED = ("ResourceClaimTemplate", "Pod")


def snapshot(state: ClusterState) -> dict[str, list[tuple[Any, ...]]]:
    """Every cached object's identity and resourceVersion: each write of the store changes one."""
    def version(obj: Any) -> tuple[Any, ...]:
        meta = obj["metadata"]
        return (meta.get("namespace"), meta["name"], meta.get("resourceVersion"))

    return {kind: sorted(version(o) for o in state.items(kind)) for kind in KIND_NAMES}


async def _post(client: httpx.AsyncClient, path: str, body: Any) -> httpx.Response:
    # json.dumps, not httpx's json=: a mutant may hold an integer beyond 64 bits.
    return await client.post(path, content=json.dumps(body), headers={"content-type": "application/json"})


@pytest.mark.parametrize("index", range(len(OBJECTS)), ids=IDS)
def test_every_mutant_is_applied_or_refused_with_400_and_the_extender_goes_on(index: int) -> None:
    svc = Service(valid_objects())
    pod_body = valid_objects()[-1]

    async def run(client: httpx.AsyncClient) -> list[str]:
        problems: list[str] = []
        for label, mutant in mutants(valid_objects()[index]):
            before = snapshot(svc.state)
            applied = await _post(client, "/local/apply", mutant)
            if applied.status_code == 400:
                message = applied.json()["error"]
                if not names_field(message, label):
                    problems.append(f"{label}: 400 does not name the field: {message}")
                if snapshot(svc.state) != before:
                    problems.append(f"{label}: refused, yet the cluster changed")
                continue
            if applied.status_code != 200:
                problems.append(f"{label}: /local/apply answered {applied.status_code}: {applied.text}")
                continue
            pod = svc.state.pod("default", "p")
            pod_obj = dict(pod.raw) if pod is not None else pod_body
            filtered = await _post(client, "/filter", {"Pod": pod_obj, "NodeNames": NODES})
            if filtered.status_code != 200:
                problems.append(f"{label}: accepted, then /filter answered {filtered.status_code}: "
                                f"{filtered.text}")
            # The pod's deletion reads every claim it used; then the pod comes back for the next mutant.
            deleted = await _post(client, "/local/delete", {"kind": "Pod", "namespace": "default",
                                                             "name": "p"})
            if deleted.status_code not in (200, 404):
                problems.append(f"{label}: accepted, then /local/delete answered {deleted.status_code}: "
                                f"{deleted.text}")
            restored = await _post(client, "/local/apply", [valid_objects()[index], pod_body])
            if restored.status_code != 200:
                problems.append(f"{label}: accepted, then the valid objects were refused: {restored.text}")
        return problems

    problems = svc.run(run)
    assert not problems, f"{len(problems)} bad answers, the first ones:\n" + "\n".join(problems[:15])


@pytest.mark.parametrize("index", range(len(OBJECTS)), ids=IDS)
def test_every_mutant_in_a_state_directory_loads_or_is_refused_naming_file_document_and_field(
    index: int, tmp_path: Path
) -> None:
    # Loading one object reads another only where a pod's claim comes from a template: a mutant
    # of either meets the other (any more objects would only make the YAML parsing slower).
    related = OBJECTS[index]["kind"] in _RELATED
    others = [o for i, o in enumerate(valid_objects()) if related and i != index and o["kind"] in _RELATED]
    (tmp_path / "base.yaml").write_text(yaml.safe_dump_all(others))
    # The mutant is the second document of its file, so the document number is not the default.
    manifest = tmp_path / "mutant.yaml"
    where = f"{manifest} (document 2): "
    problems: list[str] = []
    for label, mutant in mutants(valid_objects()[index]):
        # JSON is YAML, and json.dumps is many times faster than any YAML dumper.
        manifest.write_text(f"{json.dumps(node('node-1'))}\n---\n{json.dumps(mutant)}\n")
        try:
            load_local(ClusterState(), tmp_path)
        except ManifestError as exc:
            message = str(exc)
            if not message.startswith(where) or not names_field(message.removeprefix(where), label):
                problems.append(f"{label}: the error does not name file, document and field: {message}")
            if "\n" in message:
                problems.append(f"{label}: the error is not one line: {message!r}")
        except Exception as exc:  # any other exception is the bug this test looks for
            problems.append(f"{label}: {type(exc).__name__}: {exc}")
    assert not problems, f"{len(problems)} bad loads, the first ones:\n" + "\n".join(problems[:15])
