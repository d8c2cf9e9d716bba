"""DRADerivedAttributes in the allocator: constraints read a request's derived attribute in
place of the device's own (k8s.io/dynamic-resource-allocation v0.37.2, experimental allocator:
validateDeviceRequest, lookupAttribute), evaluated only where a constraint asks, after the
device passed the request's selectors, once per device and expression; errors are fatal."""

from __future__ import annotations

from typing import Any

import pytest

from extender.allocator.budget import Budget
from extender.allocator.outcome import TIMED_OUT
from extender.cel import EvaluationInterrupted
from extender.cel.environment import Environment
from tests.allocator.builders import allocator, claim, dev, failure, node, picked, request, resource_slice
from tests.cel.test_environment import ENGINES

GATE = ["DRADerivedAttributes", "DRAPrioritizedList"]
TOPOLOGY = 'int(device.attributes["driver-a"].topology.split("numa-")[1])'


def derived(name: str, expression: str) -> list[dict[str, str]]:
    return [{"name": name, "expression": expression}]


def gpu_and_nic_slices() -> list[Any]:
    """GPUs say ``numa``, NICs only a topology string: derived attributes line them up."""
    gpus = [dev("gpu-0", kind="gpu", numa=0), dev("gpu-1", kind="gpu", numa=1)]
    nics = [
        dev("nic-0", kind="nic", topology="socket-0/numa-1"),
        dev("nic-1", kind="nic", topology="socket-0/numa-0"),
    ]
    return [resource_slice(devices=gpus + nics)]


def gpu_request(**extra: Any) -> dict[str, Any]:
    selectors = [{"cel": {"expression": 'device.attributes["driver-a"].kind == "gpu"'}}]
    return request("gpu", selectors=selectors, **extra)


def nic_request(**extra: Any) -> dict[str, Any]:
    selectors = [{"cel": {"expression": 'device.attributes["driver-a"].kind == "nic"'}}]
    return request("nic", selectors=selectors, **extra)


@pytest.fixture(params=ENGINES)
def cel(request: pytest.FixtureRequest) -> Environment:
    return Environment.create(request.param)


def test_devices_of_different_drivers_line_up_on_a_derived_attribute(cel: Environment) -> None:
    claims = [
        claim(
            gpu_request(derivedAttributes=derived("derived/numa", 'device.attributes["driver-a"].numa')),
            nic_request(derivedAttributes=derived("derived/numa", TOPOLOGY)),
            constraints=[{"matchAttribute": "derived/numa"}],
        )
    ]
    # gpu-0 (numa 0) goes with nic-1 (topology numa-0), not with nic-0 that comes first.
    assert picked(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), claims)) == [
        [("gpu", "gpu-0"), ("nic", "nic-1")]
    ]


def test_a_derived_attribute_shadows_the_device_attribute_of_its_name(cel: Environment) -> None:
    slices = [resource_slice(devices=[dev("d0", numa=0), dev("d1", numa=1), dev("d2", numa=2)])]
    parity = derived("driver-a/numa", 'device.attributes["driver-a"].numa % 2')
    constraints = [{"matchAttribute": "driver-a/numa"}]
    shadowed = claim(request(count=2, derivedAttributes=parity), constraints=constraints)
    own = claim(request(count=2), constraints=constraints)
    assert picked(allocator(slices, gates=GATE, cel=cel).allocate(node(), [shadowed])) == [
        [("req-0", "d0"), ("req-0", "d2")]
    ]
    failure(allocator(slices, gates=GATE, cel=cel).allocate(node(), [own]))


def test_only_the_request_that_derives_an_attribute_reads_it(cel: Environment) -> None:
    # gpu derives driver-a/numa as 1 for every device; nic reads its devices' own (none here).
    slices = [resource_slice(devices=[dev("gpu-0", kind="gpu", numa=0), dev("nic-0", kind="nic", numa=1)])]
    claims = [
        claim(
            gpu_request(derivedAttributes=derived("driver-a/numa", "1")),
            nic_request(),
            constraints=[{"matchAttribute": "driver-a/numa"}],
        )
    ]
    assert picked(allocator(slices, gates=GATE, cel=cel).allocate(node(), claims)) == [
        [("gpu", "gpu-0"), ("nic", "nic-0")]
    ]


def test_a_subrequest_derives_for_its_own_devices(cel: Environment) -> None:
    slices = [resource_slice(devices=[dev("d0", numa=0), dev("d1", numa=1), dev("d2", numa=2)])]
    subs = [
        {"name": "strict", "deviceClassName": "class-a", "count": 2},
        {
            "name": "parity",
            "deviceClassName": "class-a",
            "count": 2,
            "derivedAttributes": derived("driver-a/numa", 'device.attributes["driver-a"].numa % 2'),
        },
    ]
    constraints = [{"matchAttribute": "driver-a/numa"}]
    claims = [claim({"name": "req", "firstAvailable": subs}, constraints=constraints)]
    results = allocator(slices, gates=GATE, cel=cel).allocate(node(), claims)
    assert picked(results) == [[("req/parity", "d0"), ("req/parity", "d2")]]


def test_distinct_attribute_compares_derived_values(cel: Environment) -> None:
    slices = [resource_slice(devices=[dev("d0", numa=0), dev("d1", numa=2), dev("d2", numa=1)])]
    parity = derived("derived/parity", 'device.attributes["driver-a"].numa % 2')
    claims = [
        claim(
            request(count=2, derivedAttributes=parity),
            constraints=[{"distinctAttribute": "derived/parity"}],
        )
    ]
    assert picked(allocator(slices, gates=GATE, cel=cel).allocate(node(), claims)) == [
        [("req-0", "d0"), ("req-0", "d2")]
    ]


def test_with_the_gate_off_a_request_with_derived_attributes_is_refused() -> None:
    constraints = [{"matchAttribute": "derived/x"}]
    claims = [claim(request(derivedAttributes=derived("derived/x", "1")), constraints=constraints)]
    for gates in ([], ["DRAListTypeAttributes"], ["DRAConsumableCapacity"]):  # every variant
        fatal = failure(allocator(gpu_and_nic_slices(), gates=gates).allocate(node(), claims), "fatal")
        assert fatal.reason == (
            "claim default/claim-0, request req-0: cannot handle request with derived attributes, "
            "the feature is disabled"
        )


def test_a_runtime_error_is_fatal_and_named(cel: Environment) -> None:
    expression = 'device.attributes["driver-a"].topology'
    claims = [
        claim(
            gpu_request(derivedAttributes=derived("derived/numa", expression)),
            constraints=[{"matchAttribute": "derived/numa"}],
        )
    ]
    fatal = failure(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), claims), "fatal")
    assert fatal.reason == (
        "claim default/claim-0, request gpu: evaluate derived attribute derived/numa on device "
        f"driver-a/pool-1/gpu-0 failed: no such key: topology (expression: {expression})"
    )


def test_only_devices_that_pass_the_selectors_are_evaluated(cel: Environment) -> None:
    # NICs have no numa attribute: the expression would fail on them, but they are not GPUs.
    claims = [
        claim(
            gpu_request(
                count=2, derivedAttributes=derived("derived/any", 'device.attributes["driver-a"].numa >= 0')
            ),
            constraints=[{"matchAttribute": "derived/any"}],
        )
    ]
    assert picked(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), claims)) == [
        [("gpu", "gpu-0"), ("gpu", "gpu-1")]
    ]


def test_selectors_do_not_see_derived_attributes(cel: Environment) -> None:
    selectors = [{"cel": {"expression": '"x" in device.attributes["derived"]'}}]
    claims = [
        claim(
            request(selectors=selectors, derivedAttributes=derived("derived/x", "1")),
            constraints=[{"matchAttribute": "derived/x"}],
        )
    ]
    failure(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), claims))


def test_a_compile_error_counts_only_where_a_constraint_reads_the_attribute(cel: Environment) -> None:
    broken = derived("derived/x", "1.5")
    read = claim(request(derivedAttributes=broken), constraints=[{"matchAttribute": "derived/x"}])
    unread = claim(request(derivedAttributes=broken), constraints=[{"matchAttribute": "driver-a/kind"}])
    fatal = failure(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), [read]), "fatal")
    assert fatal.reason.startswith(
        "claim default/claim-0, request req-0: compile derived attribute derived/x failed: must evaluate to"
    )
    assert "(expression: 1.5)" in fatal.reason
    assert picked(allocator(gpu_and_nic_slices(), gates=GATE, cel=cel).allocate(node(), [unread])) == [
        [("req-0", "gpu-0")]
    ]


def test_each_device_and_expression_is_evaluated_once(cel: Environment) -> None:
    # Two requests and two names with one expression; a search that backtracks over them.
    same = 'device.attributes["driver-a"].numa'
    slices = [resource_slice(devices=[dev(f"d{i}", numa=i % 3) for i in range(6)])]
    claims = [
        claim(
            request("a", count=2, derivedAttributes=derived("derived/n", same) + derived("derived/m", same)),
            request("b", count=2, derivedAttributes=derived("derived/n", same)),
            constraints=[
                {"matchAttribute": "derived/n"},
                {"distinctAttribute": "derived/m", "requests": ["a"]},
            ],
        )
    ]
    results = allocator(slices, gates=GATE, cel=cel).allocate(node(), claims)
    failure(results)  # 2 + 2 devices of one numa value among 6 with two per value: impossible
    # Once per distinct content: devices that CEL sees alike (d0 and d3, ...) share one memo.
    assert cel.stats.evaluations == 3
    assert cel.stats.compilations == 1


def test_a_deadline_passed_inside_an_evaluation_is_a_timeout(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    checks = []

    def deadline_passed(budget: Budget) -> None:
        checks.append(1)
        raise EvaluationInterrupted(TIMED_OUT)

    monkeypatch.setattr(Budget, "in_evaluation", deadline_passed)
    slow = derived("derived/x", "lists.range(20000).filter(i, i % 2 == 0).size()")
    claims = [claim(request(derivedAttributes=slow), constraints=[{"matchAttribute": "derived/x"}])]
    timeout = failure(allocator(gpu_and_nic_slices(), gates=GATE).allocate(node(), claims), "timeout")
    assert timeout.reason == TIMED_OUT and checks
