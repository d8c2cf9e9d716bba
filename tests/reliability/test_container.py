"""The extender's container: non-root, read-only root filesystem, no capabilities, debug endpoints off.

tests/manifests checks runAsNonRoot, readOnlyRootFilesystem and the Dockerfile's USER; these are
the remaining parts of the hardening (issue 7) that nothing else pins down.
"""

from __future__ import annotations

from extender.cli import _parser
from tests.manifests.loader import one


def extender_pod() -> dict:
    return one("Deployment", "dra-extender")["spec"]["template"]["spec"]


def test_no_capabilities_no_escalation_and_the_default_seccomp_profile() -> None:
    spec = extender_pod()
    (container,) = spec["containers"]
    assert spec["securityContext"]["runAsUser"] != 0 and spec["securityContext"]["runAsGroup"] != 0
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert not container["securityContext"].get("privileged", False)


def test_the_only_writable_path_is_a_bounded_scratch_volume() -> None:
    spec = extender_pod()
    (container,) = spec["containers"]
    volumes = {v["name"]: v for v in spec.get("volumes") or ()}
    writable = [m for m in container.get("volumeMounts") or () if not m.get("readOnly")]
    assert [m["mountPath"] for m in writable] == ["/tmp"]
    scratch = volumes[writable[0]["name"]]
    assert "emptyDir" in scratch and scratch["emptyDir"].get("sizeLimit")


def test_the_deployed_arguments_leave_the_debug_endpoints_off() -> None:
    (container,) = extender_pod()["containers"]
    args = _parser().parse_args(container["args"])
    assert args.kube and args.enable_debug_endpoints is not True  # None: off in --kube mode
