"""One pod's verdicts: read from the tables it shares with pods asking alike, or asked of its
plan, node by node (upstream's Filter for filter, prioritize and bind).

Every verb that needs node verdicts goes through ``PodVerdicts``: the filter's node names come
in here, nodes without a current verdict go to the plan (``Judge``) and its allocator, and the
answers go back into the tables and out to the verb, so a filter's node names pass through
this module once. The plan never reads the tables.

Verdicts are shared through ``SpecVerdicts``, one table per claim spec: the allocator is
deterministic, so claims with equal specs get the same answer on a node whose version has not
moved. Results with share IDs (fresh UUIDs per allocation) and timeouts are never shared, nor
verdicts computed over devices held for nominated pods, nor what-if ones. A shared failure
names the claims by position; this pod reads it with its own claims' names (``_named``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Container, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from extender.allocator import AllocatedState, Failure
from extender.model import Node
from extender.scheduling.verdicts.table import PodResults, SpecVerdicts
from extender.scheduling.verdicts.values import (
    FITS,
    NodeVerdict,
    Placement,
    Remembered,
    SharedVerdict,
    Variant,
)
from extender.state import ClusterState


class Judge(Protocol):
    """What the verdicts ask of the pod's plan (``plan.PodPlan``) about one node."""

    @property
    def uniform(self) -> Variant | None:
        """The variant every node is asked, when no node-specific check comes with it (then a
        shared verdict is the node's verdict as is); None otherwise."""
        ...

    def variant(self, node: Node) -> Variant | Failure:
        """What must be allocated on ``node``, or why the node cannot serve the pod."""
        ...

    def refusal(self, node: Node) -> Failure | None:
        """Why the pod's allocated claims cannot be used on ``node``, or None."""
        ...

    def allocate(self, node: Node, variant: Variant, view: AllocatedState | None, phase: str) -> NodeVerdict:
        """The device verdict of ``variant`` on ``node``, over ``view`` (None: the live state)."""
        ...

    def with_node_resources(
        self, node: Node, variant: Variant, verdict: NodeVerdict, phase: str
    ) -> NodeVerdict:
        """``verdict`` (fitting), once the pod's cost to the node's resources is checked."""
        ...

    def bind_variant(self, node: Node) -> Variant | Failure:
        """What bind must allocate on ``node``, or why the pod cannot go there."""
        ...

    def place(self, node: Node, variant: Variant, verdict: NodeVerdict) -> Placement | Failure:
        """What bind commits on ``node`` for ``variant`` given its verdict, or why it cannot."""
        ...

    def counted(self, phase: str, outcome: str, n: int = 1) -> None:
        """Count ``n`` per-node outcomes of ``phase`` for the request's metrics."""
        ...


@dataclass(slots=True)
class Decided:
    """A filter's verdicts over its node names: the nodes that fit, in order, and why the
    others do not; or the one failure that holds on every node (``fatal``)."""

    passed: list[str] = field(default_factory=list)
    rejected: dict[str, Failure] = field(default_factory=dict)
    fatal: Failure | None = None


def unknown(name: str) -> Failure:
    return Failure("unavailable", f"node {name} is not known to the extender")


class PodVerdicts:
    """The pod's verdicts by node, shared where they may be, decided by ``judge`` where not."""

    def __init__(
        self,
        judge: Judge,
        state: ClusterState,
        tables: Callable[[bytes], SpecVerdicts],
        results: PodResults,
        remember: bool,
        pause: Callable[[], None],
    ) -> None:
        self._judge = judge
        # Called before each node is decided: a long candidate list lets other requests run
        # between nodes (``turns.pause``).
        self._pause = pause
        self._state = state
        self._tables = tables
        # A what-if plan (preemption, explain) must neither leave results bind could reuse
        # nor share verdicts computed against a hypothetical state.
        self._remember = remember
        self._results = results
        # Nodes where devices are held for pods a preemption nominated there (see
        # ``preemption.nominated``): decided over that view, and never shared.
        self.held: Mapping[str, AllocatedState] = {}
        self.cache_hits: Counter[str] = Counter()  # by phase, published with the plan's metrics
        # A shared failure as this pod reads it, by the failure: in a filling cluster most
        # candidates fail alike, and each would otherwise be rewritten anew.
        self._named: dict[int, tuple[Failure, tuple[str, ...], Failure]] = {}

    def remembered(self, node_name: str) -> Remembered | None:
        """This pod's filter result on the node, while the node is unchanged."""
        state = self._state
        entry = self._results.get(node_name)
        if entry is not None and entry[0] == state.node_version(node_name):
            return entry
        shared = self._results.shared
        if shared is None or node_name in self.held:
            return None
        table, uids = shared
        table.sync(*state.node_versions())
        hit = table.entries.get(node_name)
        if hit is None or not hit.verdict.fits:
            return None
        return (hit.version, uids, hit.verdict)

    # --- one node ---------------------------------------------------------------------------

    def verdict(self, node: Node, phase: str = "filter") -> NodeVerdict:
        """Decide one node: read from the spec's table while the node is unchanged, else asked
        of the plan (and kept in the table when it may be shared).

        This runs for every candidate node of every filter call: keep it lean.
        """
        self._pause()
        judge = self._judge
        variant = judge.variant(node)
        if isinstance(variant, Failure):
            judge.counted(phase, "unavailable")
            return NodeVerdict.failing(variant)
        refusal = judge.refusal(node)
        if refusal is not None:
            judge.counted(phase, "unavailable")
            return NodeVerdict.failing(refusal)
        if not variant.claims:
            return FITS
        version = self._state.node_version(node.name)
        verdict = self._device_verdict(node, variant, version, phase)
        if verdict.fits:
            verdict = judge.with_node_resources(node, variant, verdict, phase)
            if verdict.fits and self._remember:
                self._results.keep(node.name, (version, variant.uids, verdict))
        return verdict

    def _device_verdict(self, node: Node, variant: Variant, version: int, phase: str) -> NodeVerdict:
        """The shared verdict while the node is at ``version``, else the plan's allocation."""
        name = node.name
        state = self._state
        cached = state.nodes.get(name)
        view = self.held.get(name) if self.held else None
        shareable = self._remember and view is None and (cached is node or cached == node)
        table = self._tables(variant.spec) if shareable else None
        if table is not None:
            hit = table.entries.get(name)
            if hit is not None and hit.version == version:
                self.cache_hits[phase] += 1
                return self._for_this_pod(hit.verdict, variant)
        verdict = self._judge.allocate(node, variant, view, phase)
        failure = verdict.failure
        if table is not None and not verdict.shares and (failure is None or failure.kind != "timeout"):
            # Kept only if the node did not move while it was computed (``put``).
            table.put(name, SharedVerdict(version, verdict), state.node_version(name))
        return self._for_this_pod(verdict, variant)

    def _for_this_pod(self, verdict: NodeVerdict, variant: Variant) -> NodeVerdict:
        """``verdict`` with its failure naming this pod's claims (a fit names none)."""
        failure = verdict.failure
        if failure is None:
            return verdict
        named = self._naming(failure, variant)
        return verdict if named is failure else NodeVerdict.failing(named)

    def _naming(self, failure: Failure, variant: Variant) -> Failure:
        """``failure`` naming ``variant``'s claims, once per failure object: by identity, as a
        dataclass's hash is computed anew on every lookup (the entry keeps the failure alive,
        so its id is not reused)."""
        keys = variant.keys
        hit = self._named.get(id(failure))
        if hit is not None and hit[0] is failure and hit[1] is keys:
            return hit[2]
        named = failure.naming(keys)
        self._named[id(failure)] = (failure, keys, named)
        return named

    def placement(self, node: Node) -> Placement | Failure:
        """What bind commits on ``node``, or why the pod cannot go there (the reply's text).

        The filter result is reused while the node's version has not moved since filter;
        otherwise the allocation is decided again against the current state.
        """
        judge = self._judge
        variant = judge.bind_variant(node)
        if isinstance(variant, Failure):
            return variant
        verdict = FITS
        # A hold may have appeared since filter without changing the node's version.
        remembered = self.remembered(node.name) if variant.claims and node.name not in self.held else None
        if remembered is not None and remembered[1] == variant.uids:
            verdict = remembered[2]
        elif variant.claims:
            verdict = self.verdict(node, phase="bind")
        return judge.place(node, variant, verdict)

    # --- many nodes -------------------------------------------------------------------------

    def decide(
        self, names: list[str], given: Mapping[str, Node] | None = None, phase: str = "filter"
    ) -> Decided:
        """Every named node's verdict (``given``: the request's Node objects, else the
        state's): the nodes that fit, in order, and why the others do not.

        Where every node is asked the same and the answer is the shared one, nodes with a
        current shared verdict are read from the spec's table as sets: this runs for every
        filter call over every candidate node, and in a big cluster almost none has moved
        since the previous pod.
        """
        nodes: Mapping[str, Node] = self._state.nodes
        if given is not None and any(nodes.get(name) is not given.get(name) for name in names):
            nodes = given
        else:
            given = None  # the state's own nodes (api.wire hands them out when equal): as by name
        variant = self._judge.uniform
        if given is not None or not self._remember or variant is None:
            return self._decide_each(names, nodes, phase)
        if not variant.claims:
            return Decided([n for n in names if n in nodes], {n: unknown(n) for n in names if n not in nodes})
        table = self._tables(variant.spec)
        self._results.shared = (table, variant.uids)
        own: dict[str, NodeVerdict | None] = {}
        fatal: list[Failure] = []

        def decide_one(name: str) -> bool:
            node = nodes.get(name)
            verdict = own[name] = None if node is None else self.verdict(node, phase)
            if verdict is not None and verdict.failure is not None and verdict.failure.kind == "fatal":
                fatal.append(verdict.failure)
            return not fatal

        if not self._settle(table, table.entries, names, own, decide_one):
            return Decided(fatal=fatal[0])
        self.cache_hits[phase] += len(names) - len(own)
        return self._sorted(names, table, own, variant)

    def _decide_each(self, names: list[str], nodes: Mapping[str, Node], phase: str) -> Decided:
        """Each node's verdict in turn: the plan asks something of every node on its own."""
        decided = Decided()
        for name in names:
            node = nodes.get(name)
            failure = unknown(name) if node is None else self.verdict(node, phase).failure
            if failure is None:
                decided.passed.append(name)
            elif failure.kind == "fatal":
                return Decided(fatal=failure)
            else:
                decided.rejected[name] = failure
        return decided

    def _sorted(
        self, names: list[str], table: SpecVerdicts, own: dict[str, NodeVerdict | None], variant: Variant
    ) -> Decided:
        """The named nodes by their verdict: their own where decided now, else the table's."""
        fit = table.fits
        if not own:
            passed = [n for n in names if n in fit]
            if len(passed) == len(names):
                return Decided(passed)
        # Of the named nodes only, in one pass: the table's set is the whole cluster's, and
        # copying it cost about a millisecond per filter at 15,000 nodes (docs/performance.md).
        entries = table.entries
        decided = Decided()
        passed, rejected = decided.passed, decided.rejected
        # The table keeps each distinct failure once: named for this pod once, by identity.
        named: dict[int, Failure] = {}
        for name in names:
            if name in own:
                verdict = own[name]
                if verdict is None:
                    rejected[name] = unknown(name)
                elif verdict.failure is None:
                    passed.append(name)
                else:
                    rejected[name] = verdict.failure
            elif name in fit:
                passed.append(name)
            else:
                failure = entries[name].verdict.failure
                assert failure is not None  # the table's rejections have one
                mine = named.get(id(failure))
                if mine is None:
                    mine = named[id(failure)] = self._naming(failure, variant)
                rejected[name] = mine
        return decided

    def fitting(
        self, names: list[str], phase: str
    ) -> tuple[list[str], dict[str, NodeVerdict], SpecVerdicts | None]:
        """The named nodes that fit: those whose fitting verdict the spec's shared table holds
        (the table, current until the caller next yields to other requests), and the pod's
        own fitting verdicts by node name.

        A verdict is this pod's filter result while the node is unchanged, else decided now:
        binds of other pods land between verbs.
        """
        state = self._state
        shared = self._results.shared
        table = shared[0] if shared is not None else None
        fits: set[str] = table.fits if table is not None else set()
        if table is not None and not self.held:
            table.sync(*state.node_versions())
            from_table = [n for n in names if n in fits]
            if len(from_table) == len(names):
                return from_table, {}, table  # the usual case: every survivor of filter
        own: dict[str, NodeVerdict] = {}
        looked: set[str] = set()

        def decide_one(name: str) -> bool:
            looked.add(name)
            entry = self._results.get(name)
            if entry is not None and entry[0] == state.node_version(name):
                own[name] = entry[2]
                return True
            node = state.nodes.get(name)
            verdict = None if node is None else self.verdict(node, phase)
            if verdict is not None and verdict.fits:
                own[name] = verdict
            return True  # a fatal failure fits nowhere: the node is simply not scored

        self._settle(table, fits, names, looked, decide_one)
        return [n for n in names if n in fits and n not in looked], own, table

    def _settle(
        self,
        table: SpecVerdicts | None,
        known: Container[str],
        names: list[str],
        decided: Collection[str],
        decide_one: Callable[[str], bool],
    ) -> bool:
        """Decide each named node the table does not hold as ``known`` (or that has devices held
        for nominated pods), and again each whose table verdict went stale while deciding
        others paused, until a round ends with no node version moved: then every verdict read
        from the table is current. False as soon as ``decide_one`` says to stop."""
        state, held = self._state, self.held
        while True:
            _, base, latest = versions = state.node_versions()
            if table is not None:
                table.sync(*versions)
            if held or decided:
                todo = [n for n in names if (n not in known or n in held) and n not in decided]
            else:  # the usual first round, in one test per node
                todo = [n for n in names if n not in known]
            if not todo:
                return True
            for name in todo:
                if not decide_one(name):
                    return False
            # Deciding may have paused, and other requests moved the state meanwhile; if
            # nothing moved, no verdict read from the table went stale and all is decided.
            _, base_now, latest_now = state.node_versions()
            if (base_now, latest_now) == (base, latest):
                return True
