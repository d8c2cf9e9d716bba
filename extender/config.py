"""Runtime configuration of the service: flags turned into one immutable value.

Feature gates use kube-scheduler's ``--feature-gates`` syntax over the defaults of one Kubernetes
release of the gate table (``extender.model.features``): ``--kubernetes-version``, else with
``--kube`` the API server's (read at start, or once it answers), else the newest, so a local run
behaves like a current cluster unless told otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from extender.cel.engine import ENGINE_CHOICES
from extender.model.features import DEFAULT_RELEASE, Features, parse_overrides, release_of, view
from extender.model.pods import PodInfo

SCORE_POLICIES = ("binpack", "spread", "compact", "none")
PREEMPTION_MODES = ("verb", "evict")
# The name the manifests deploy, and the one extender-protocol.md's examples use.
DEFAULT_SCHEDULER_NAMES = ("dra-extender-scheduler", "dra-scheduler")


# Request-body limits in bytes per route, sized from real objects. A bind is four short strings.
# filter and prioritize carry a Pod (etcd stores at most 1.5 MiB) and either NodeNames (5,000
# names fit in 1.3 MB) or, without nodeCacheCapable, full Nodes: 5-15 KB each as kubelet reports
# them (at most 50 images), so 64 MiB holds some 4,000. preempt carries a Pod and per node the
# victims' UIDs; /local/apply, manifests.
BODY_LIMITS: dict[str, int] = {
    "filter": 64 << 20,
    "prioritize": 64 << 20,
    "preempt": 32 << 20,
    "bind": 64 << 10,
    "local": 16 << 20,
}
# JSON elements of one body: 4,000 full Nodes are about as many. Parsing a million elements
# takes ~0.1 s and at most ~70 MB; far more is an attack, refused before parsing.
MAX_JSON_ELEMENTS = 1_000_000
_SIZE_UNITS = {"Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30}


class ConfigError(ValueError):
    """A flag value the service cannot run with."""


def parse_body_limits(text: str) -> dict[str, int]:
    """``SIZE`` for every route, or ``ROUTE=SIZE,...`` over the defaults; SIZE may end in Ki, Mi or Gi."""
    limits = dict(BODY_LIMITS)
    if "=" not in text:
        return dict.fromkeys(limits, _size(text))
    for item in text.split(","):
        route, sep, size = item.partition("=")
        route = route.strip()
        if not sep or route not in limits:
            routes = ", ".join(limits)
            raise ConfigError(f"body limit {item!r}: expected ROUTE=SIZE with ROUTE one of {routes}")
        limits[route] = _size(size)
    return limits


def _size(text: str) -> int:
    text = text.strip()
    unit = _SIZE_UNITS.get(text[-2:], 1)
    digits = text[:-2] if unit > 1 else text
    if not digits.isdigit() or int(digits) == 0:
        raise ConfigError(f"size {text!r}: expected a positive number of bytes, optionally with Ki, Mi or Gi")
    return int(digits) * unit


def parse_feature_gates(text: str, release: str = DEFAULT_RELEASE) -> Features:
    """Parse ``A=true,B=false`` over ``release``'s defaults; unknown gates and bad values are errors."""
    try:
        return Features.parse(text, release)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_gate_overrides(text: str) -> dict[str, bool]:
    """The gates ``--feature-gates`` sets, before the release is known (see with_release)."""
    try:
        return parse_overrides(text)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def parse_release(version: str) -> str:
    """The gate table's release for a Kubernetes version (newer ones get the newest release's
    defaults); ConfigError for one older than the extender supports."""
    try:
        return release_of(version)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


@dataclass(frozen=True)
class Config:
    state_dir: Path | None = None  # None: the shipped demo cluster (local mode)
    kube: bool = False  # watch a real cluster instead of a local store
    kubeconfig: str | None = None
    host: str = "127.0.0.1"
    port: int = 8888
    # The release whose gate defaults apply (a RELEASES entry). None: not known yet; with --kube
    # the API server's, read at start or once it answers (with_release), locally the newest.
    kubernetes_version: str | None = None
    # What --feature-gates set, kept to apply over the defaults once the release is known.
    feature_gate_overrides: Mapping[str, bool] = field(default_factory=dict)
    # The gates in force: one value for the cluster-state cache and the allocator alike.
    feature_gates: Features = field(default_factory=Features.defaults)
    cel_engine: str = "auto"
    cel_engine_in_use: str | None = None  # what "auto" resolved to, filled in at start-up
    score_policy: str = "compact"
    # Pods whose spec.schedulerName names another scheduler pass through untouched; a pod
    # without the field (as written in local manifests) counts as ours.
    # None: the mode's default. With --kube, DEFAULT_SCHEDULER_NAMES (other profiles' pods are
    # allocated by their own scheduler). Locally there is no other scheduler or allocator in the
    # embedded cluster, so every pod is ours: passing a pod with claims untouched would bind it
    # without its devices.
    scheduler_names: tuple[str, ...] | None = None
    # Per route (see BODY_LIMITS); parse_body_limits reads the flag's syntax.
    body_limits: Mapping[str, int] = field(default_factory=lambda: dict(BODY_LIMITS))
    max_json_elements: int = MAX_JSON_ELEMENTS
    # Allocation budget for one filter (prioritize, preempt) call, whatever the gates: it must
    # answer within kube-scheduler's httpTimeout for the extender (10 s in manifests/).
    filter_timeout_s: float = 4.0
    # With DRASchedulerFilterTimeout on: the limit on one node's allocation within that budget,
    # upstream's DynamicResourcesArgs.filterTimeout (default 10 s); 0 means none.
    node_filter_timeout_s: float = 10.0
    # How long a filter result is remembered for bind (the pod is usually bound within ms).
    result_ttl_s: float = 30.0
    # Bounds an in-flight commit: a bind that crashes or hangs frees its devices after this.
    inflight_ttl_s: float = 60.0
    # A claim write of unknown fate (its bind gave up, no definite answer came) holds its devices
    # until it has landed or can no longer land. Found unchanged after this long, the claim is
    # fenced (moved to a newer resourceVersion) so that a request still sitting in the API server
    # can never be applied. kube-apiserver gives up on a request after its --request-timeout (1m).
    fence_after_s: float = 60.0
    # Upper bound for the claim writes and the pod binding of one bind call. Below the
    # scheduler's httpTimeout (10 s in manifests/), so the extender gives up and rolls back
    # before kube-scheduler stops listening, and its Error reaches the scheduler.
    bind_timeout_s: float = 8.0
    # --kube only: one active replica commits binds (Lease in lease_namespace/lease_name).
    leader_elect: bool = True
    lease_name: str = "dra-extender"
    lease_namespace: str = "dra-system"
    # --kube --no-leader-elect: NAMESPACE/NAME of the Lease of the kube-scheduler beside this
    # replica; dra_extender_leader reports whether that scheduler holds it ("": reports 1).
    scheduler_lease: str = "dra-system/dra-extender-scheduler"
    # With a client CA: only clients whose certificate carries one of these names are served
    # (extender.api.tls.client_names says which names count); empty: any the CA signed.
    client_allowed_names: tuple[str, ...] = ()
    # Device preemption: "verb" answers kube-scheduler's preempt calls only; "evict" (--kube)
    # also evicts for a pod no node fits when kube-scheduler does not ask
    # (scheduling/evict.py). A hold of evict mode not used within
    # preemption_hold_s is dropped.
    preemption: str = "verb"
    preemption_hold_s: float = 120.0

    def __post_init__(self) -> None:
        namespace, slash, name = self.scheduler_lease.partition("/")
        if self.scheduler_lease and not (namespace and slash and name and "/" not in name):
            raise ConfigError(f"--scheduler-lease {self.scheduler_lease!r}: expected NAMESPACE/NAME (or '')")
        if self.score_policy not in SCORE_POLICIES:
            choices = ", ".join(SCORE_POLICIES)
            raise ConfigError(f"score policy {self.score_policy!r}: choose one of {choices}")
        if self.cel_engine not in ENGINE_CHOICES:
            raise ConfigError(f"CEL engine {self.cel_engine!r}: choose one of {', '.join(ENGINE_CHOICES)}")
        if not 0 < self.port < 65536:
            raise ConfigError(f"port {self.port} out of range")
        if set(self.body_limits) != set(BODY_LIMITS) or min(self.body_limits.values()) <= 0:
            raise ConfigError(f"body limits: a positive size for each of {', '.join(BODY_LIMITS)}")
        if self.max_json_elements <= 0:
            raise ConfigError("the JSON element limit must be positive")
        if self.state_dir is not None and self.kube:
            raise ConfigError("--state and --kube exclude each other")
        if self.node_filter_timeout_s < 0:
            raise ConfigError("the per-node filter timeout must be zero (none) or positive")
        if self.fence_after_s <= 0:
            raise ConfigError("the fence delay must be positive")
        if self.preemption not in PREEMPTION_MODES:
            raise ConfigError(f"preemption {self.preemption!r}: choose one of {', '.join(PREEMPTION_MODES)}")
        if self.preemption == "evict" and not self.kube:
            raise ConfigError("--preemption=evict needs --kube (it evicts through the API server)")
        if self.preemption_hold_s <= 0:
            raise ConfigError("the preemption hold timeout must be positive")
        if self.inflight_ttl_s <= self.bind_timeout_s:
            raise ConfigError(
                "the in-flight TTL must exceed the bind timeout, or a slow bind loses its devices"
            )

    @property
    def handled_scheduler_names(self) -> tuple[str, ...] | None:
        """The schedulerNames whose pods this extender schedules; None means every pod."""
        if self.scheduler_names is not None:
            return self.scheduler_names
        return DEFAULT_SCHEDULER_NAMES if self.kube else None

    def handles(self, pod: PodInfo) -> bool:
        """Pods of another scheduler pass untouched; a pod without schedulerName counts as ours."""
        names = self.handled_scheduler_names
        return names is None or pod.scheduler_name is None or pod.scheduler_name in names

    @property
    def local(self) -> bool:
        return not self.kube

    @property
    def node_timeout_s(self) -> float | None:
        """How long one node's allocation may take within a request's budget (None: no limit
        of its own), as upstream's DynamicResources Filter does."""
        if self.feature_gates.scheduler_filter_timeout and self.node_filter_timeout_s > 0:
            return self.node_filter_timeout_s
        return None

    def with_release(self, release: str) -> Config:
        """This configuration with ``release``'s gate defaults under the --feature-gates
        overrides; ConfigError for an override that release's kube-scheduler does not have."""
        try:
            features = Features.for_release(release, self.feature_gate_overrides)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        return replace(self, kubernetes_version=release, feature_gates=features)

    def describe(self) -> dict[str, object]:
        """What /debug/config shows: everything in force, nothing secret."""
        return {
            "mode": "kube" if self.kube else "local",
            "stateDir": str(self.state_dir) if self.state_dir else None,
            "kubeconfig": self.kubeconfig,
            "host": self.host,
            "port": self.port,
            "kubernetesVersion": self.kubernetes_version,
            "featureGates": view(self.feature_gates, self.kubernetes_version or DEFAULT_RELEASE),
            "celEngine": self.cel_engine,
            "celEngineInUse": self.cel_engine_in_use,
            "scorePolicy": self.score_policy,
            "schedulerNames": "all" if (names := self.handled_scheduler_names) is None else list(names),
            "maxBodyBytes": dict(self.body_limits),
            "maxJSONElements": self.max_json_elements,
            "filterTimeoutSeconds": self.filter_timeout_s,
            "nodeFilterTimeoutSeconds": self.node_timeout_s,
            "resultTTLSeconds": self.result_ttl_s,
            "inflightTTLSeconds": self.inflight_ttl_s,
            "fenceAfterSeconds": self.fence_after_s,
            "bindTimeoutSeconds": self.bind_timeout_s,
            "leaderElection": {
                "enabled": self.kube and self.leader_elect,
                "lease": f"{self.lease_namespace}/{self.lease_name}",
                "schedulerLease": self.scheduler_lease or None,
            },
            "clientAllowedNames": list(self.client_allowed_names) or None,
            "preemption": {"mode": self.preemption, "holdSeconds": self.preemption_hold_s},
        }
