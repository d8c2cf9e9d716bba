"""The containers of the dra-extender pod: non-root, read-only root filesystem, no capabilities,
debug endpoints only where nothing outside the pod reaches them.

tests/manifests checks runAsNonRoot, readOnlyRootFilesystem and the Dockerfile's USER; these are
the remaining parts of the hardening (issue 7) that nothing else pins down.
"""

from __future__ import annotations

import ipaddress

from extender.cli import _parser
from tests.manifests.loader import one


def pod_spec() -> dict:
    return one("Deployment", "dra-extender")["spec"]["template"]["spec"]


def test_no_capabilities_no_escalation_and_the_default_seccomp_profile() -> None:
    spec = pod_spec()
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in spec["containers"]:
        context = container["securityContext"]
        assert context["runAsUser"] != 0 and context["runAsGroup"] != 0, container["name"]
        assert context["capabilities"] == {"drop": ["ALL"]}, container["name"]
        assert context["allowPrivilegeEscalation"] is False, container["name"]
        assert context["readOnlyRootFilesystem"] is True, container["name"]
        assert not context.get("privileged", False), container["name"]


def test_the_only_writable_path_is_a_bounded_scratch_volume() -> None:
    spec = pod_spec()
    volumes = {v["name"]: v for v in spec.get("volumes") or ()}
    writable = [(c["name"], m) for c in spec["containers"] for m in c.get("volumeMounts") or ()
                if not m.get("readOnly")]
    assert [(name, m["mountPath"]) for name, m in writable] == [("extender", "/tmp")]
    scratch = volumes[writable[0][1]["name"]]
    assert "emptyDir" in scratch and scratch["emptyDir"].get("sizeLimit")


def test_the_debug_endpoints_are_served_on_the_loopback_only() -> None:
    """They list every claim and pod: only kubectl port-forward or exec into the pod reaches them."""
    (container,) = [c for c in pod_spec()["containers"] if c["name"] == "extender"]
    args = _parser().parse_args(container["args"])
    assert args.kube
    if args.enable_debug_endpoints:
        assert ipaddress.ip_address(args.host).is_loopback  # the probe port serves no /debug
