"""Local mode: a manifests directory (or the shipped demo) stands in for the cluster.

Its one job is wiring the two control-plane parts the extender relies on in a real cluster:
the API server's storage (:mod:`extender.local.store`) and the resourceclaim controller
(:mod:`extender.local.claim_controller`). :class:`LocalCluster` is what the CLI, the local
binder and the local routes call; every change goes through it, so the controller sees each.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from extender.local.claim_controller import ClaimController, in_use
from extender.local.manifests import JsonText, demo_files, kind_of, read_manifests, state_files
from extender.local.store import API_VERSIONS, LocalStore, ManifestError, clone, now_rfc3339
from extender.model.kinds import KIND_NAMES
from extender.state import ClusterState

log = logging.getLogger(__name__)

# Objects a later kind refers to come first, so a pod's template exists when the pod arrives.
_LOAD_ORDER = KIND_NAMES


class LocalCluster:
    """The in-memory API server + claim controller feeding a :class:`ClusterState`."""

    def __init__(self, state: ClusterState) -> None:
        self.state = state
        self.store = LocalStore(state)
        self.controller = ClaimController(self.store)

    def write(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store an already admitted ``obj`` with a fresh resourceVersion (see LocalStore.write)."""
        return self.store.write(kind, obj)

    def apply(self, obj: Any, owned: bool = False) -> dict[str, Any]:
        """Create or update one object, then run the claim controller on what it affects.

        ``owned``: ``obj`` is handed over and may be changed in place (see LocalStore.admit).
        """
        kind, obj = self.store.admit(obj, owned)
        if kind == "Pod":
            return self.controller.sync_pod(obj)
        try:
            written = self.store.write(kind, obj)
        except ValueError as exc:
            raise ManifestError(str(exc)) from None
        if kind == "ResourceClaimTemplate":
            self.controller.template_added(written["metadata"]["namespace"], written["metadata"]["name"])
        return written

    def delete(self, kind: Any, namespace: Any, name: Any) -> bool:
        """Delete one object; False when it does not exist."""
        raw = self.store.get(kind, namespace, name)
        if raw is None:
            return False
        if kind == "Pod":
            self.controller.pod_deleted(raw)
        elif kind == "ResourceClaim" and in_use(raw):
            # The finalizer keeps an in-use claim; the controller finishes once consumers go.
            obj = clone(dict(raw))
            obj["metadata"]["deletionTimestamp"] = now_rfc3339()
            self.store.write(kind, obj)
            return True
        self.store.remove(kind, dict(raw))
        return True

    def load(self, docs: Iterable[tuple[str, Any]]) -> int:
        """Apply (origin, object) pairs; templates and claims go first so pods find them.

        Each document is let go once applied (the cache keeps its own copy), so a big state
        directory is never held twice over; callers hand ``docs`` over rather than keep it.
        """

        def rank(item: tuple[str, Any]) -> int:
            kind = kind_of(item[1])
            return _LOAD_ORDER.index(kind) if kind in _LOAD_ORDER else len(_LOAD_ORDER)

        pending = sorted(_used_kinds(docs), key=rank)
        del docs
        count = len(pending)
        pending.reverse()  # popped from the end, in load order
        while pending:
            origin, doc = pending.pop()
            try:
                if isinstance(doc, JsonText):
                    self.apply(doc.decode(), owned=True)
                else:
                    self.apply(doc)
            except (ManifestError, ValueError) as exc:
                raise ManifestError(f"{origin}: {exc}") from None
        return count


def _used_kinds(docs: Iterable[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The documents of kinds the extender uses; the others are skipped with one warning per kind.

    Users point ``--state`` at their own manifests (with Deployments, Services, ...) to see how
    their pods would be placed. A document without a string ``kind`` is malformed and kept, so
    that loading refuses it with its origin.
    """
    used: list[tuple[str, Any]] = []
    skipped: dict[str, list[str]] = {}
    for origin, doc in docs:
        kind = kind_of(doc)
        if doc is None:
            continue
        if isinstance(kind, str) and kind not in API_VERSIONS:
            skipped.setdefault(kind, []).append(origin)
            continue
        used.append((origin, doc))
    for kind, origins in sorted(skipped.items()):
        more = f" and {len(origins) - 1} more" if len(origins) > 1 else ""
        log.warning("skipping %d %s object(s), a kind the extender does not use: %s%s",
                    len(origins), kind, origins[0], more)
    return used


def load_local(state: ClusterState, directory: Path | None) -> LocalCluster:
    """Fill ``state`` from ``directory`` (or the demo cluster) and mark every kind synced."""
    cluster = LocalCluster(state)
    files = demo_files() if directory is None else state_files(directory)
    # Loading allocates millions of long-lived objects: each full collection on the way re-scanned
    # the growing cache (about 40% of a 5,000-node start). It makes no cycles worth collecting;
    # serve then freezes what was loaded without a collection (cli._build_frozen).
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        loaded = cluster.load(read_manifests(files))
    finally:
        if was_enabled:
            gc.enable()
    if directory is not None and not loaded:
        # Served all the same (a directory may be filled through /local/apply), but a cluster
        # with nothing in it is more often the wrong directory than the intended one.
        files_read = f"{len(files)} file{'' if len(files) == 1 else 's'}"
        log.warning("--state %s: %s, no object of a kind the extender uses (%s)",
                    directory, files_read, ", ".join(API_VERSIONS))
    for kind in API_VERSIONS:
        state.mark_synced(kind)
    return cluster
