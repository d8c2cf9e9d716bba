"""The python engine counts an evaluation's cost as cel-go does for Kubernetes.

The expected costs are cel-go's ``ActualCost`` of each evaluation in the released CEL
environment of k8s.io/dynamic-resource-allocation v0.37.2 (tests/oracle, a "cel" request:
its "cost"): every kind of node, each macro with its early exits and filters, the functions
whose cost depends on their arguments' sizes (by overload or, for Kubernetes' own, by name),
a call cel-go dispatches on a dyn argument (cost 1) and a constant set lookup (free).
"""

from __future__ import annotations

import pytest

from extender.cel import COST_EXCEEDED, CelRuntimeError
from extender.cel.device import PlainDevice, build_device_view
from extender.cel.engine import available_engines
from extender.cel.python.engine import PythonEngine

pytestmark = pytest.mark.skipif("python" not in available_engines(), reason="python engine not installed")

D = 'device.attributes["gpu.example.com"]'
DEVICE = PlainDevice(
    driver="gpu.example.com",
    attributes={
        "model": {"string": "a100"},
        "index": {"int": 3},
        "serial": {"string": "GPU-0123456789abcdef"},
        "version": {"version": "1.2.3"},
    },
    capacity={"memory": {"value": "80Gi"}},
    allow_multiple_allocations=False,
)

# (expression with @D for the device's attribute domain, cel-go's actual cost)
CASES = [
    ('true', 0),
    ('device.driver == "gpu.example.com"', 4),
    ('@D.model == "a100"', 5),
    ('@D.model == "a100" && @D.index > 2', 10),
    ('@D.model == "h100" && @D.index > 2', 5),
    ('@D.model == "a100" || @D.index > 2', 5),
    ('@D.model == "h100" || @D.index > 2', 10),
    ('@D.index > 2 ? @D.model == "a100" : @D.model.size() > 2', 10),
    ('has(@D.model)', 3),
    ('"model" in @D', 4),
    ('@D.model in ["a100", "h100", "l4"]', 4),
    ('{"a": @D.index}["a"] == 3', 37),
    ('cel.bind(x, @D.model, x == "a100" || x == "h100")', 6),
    ('cel.bind(x, @D.model.lowerAscii(), true)', 0),
    ('[1, 2, 3].all(i, i < @D.index)', 28),
    ('[1, 2, 3, 4, 5].exists(i, i == @D.index)', 34),
    ('[1, 2, 3, 4, 5].exists_one(i, i > @D.index)', 36),
    ('[1, 2, 3, 4, 5].map(i, i * @D.index).size() == 5', 93),
    ('[1, 2, 3, 4, 5].map(i, i > @D.index, i * 2).size() == 2', 61),
    ('[1, 2, 3, 4, 5].filter(i, i > @D.index).size() == 2', 59),
    ('[1, 2, 3].transformList(i, v, v + i).size() == 3', 48),
    ('{"a": 1, "b": 2}.transformMap(k, v, v + @D.index).size() == 2', 21),
    ('{"a": 1, "b": 2}.transformMapEntry(k, v, {k + "x": v}).size() == 2', 73),
    ('@D.serial.startsWith("GPU-") && @D.serial.endsWith("ff")', 10),
    ('@D.serial.contains("1234")', 6),
    ('@D.serial.matches("^GPU-[0-9a-f]+$")', 16),
    ('@D.serial.lowerAscii().upperAscii() == "GPU-0123456789ABCDEF"', 10),
    ('"GPU-1234".split("-").size() == 2 && ["a", "b"].join("-") == "a-b"', 6),
    ('string(@D.serial).split("-").size() == 2 && ["a", string(@D.model)].join("-") == "a-a100"', 29),
    ('string(@D.serial) + string(@D.model) != "x"', 14),
    ('(@D.serial.size() > 3 ? @D.model : "x") == "a100"', 10),
    ('(@D.serial.size() > 30 ? @D.model : "x") == "x"', 7),
    ('@D.serial.replace("-", "_").indexOf("_") == 3', 11),
    ('@D.serial + @D.model != "x"', 10),
    ('@D.serial < @D.model', 9),
    ('quantity("40Gi").isLessThan(device.capacity["gpu.example.com"].memory)', 6),
    ('@D.version.isGreaterThan(semver("1.0.0"))', 6),
    ('[3, 1, 2].sort() == [1, 2, 3] && [1, 1, 2].distinct().size() == 2', 61),
    ('lists.range(@D.index + 7).reverse().slice(1, 3).size() == 2', 62),
    ('[[1], [2, 3]].flatten().size() == 3', 15),
    ('[int(@D.index), 1, 2].isSorted() || [int(@D.index), 1].sum() > 0', 36),
    ('sets.contains([1, 2, 3, int(@D.index)], [1, 2])', 24),
    ('sets.equivalent([1, 2, int(@D.index)], [3, 2, 1])', 34),
    ('[string(@D.model), "b"].sortBy(e, e).size() == 2', 65),
    ('{"a": 1}.a + [1][0] == 2 && [1, 2, 3].sort()[0] == 1', 38),
    ('lists.range(10).map(i, [i, int(@D.index)]).filter(p, p[0] > 5).exists(p, p[1] == 3)', 396),
    ('lists.range(30).filter(i, i % 3 == 0).map(i, string(i)).exists(s, s.size() > 1)', 442),
    ('@D.model.format([]) == "a100" && "%s-%d".format([@D.model, @D.index]) == "a100-3"', 26),
    ('url("https://example.com/a").getHost() == "example.com"', 6),
    ('ip("10.0.0.1").family() == 4 && cidr("10.0.0.0/8").containsIP("10.1.2.3")', 6),
    # A constant empty ``in`` list is planned as false: the item is never evaluated.
    ('@D.model in [] || @D.index in []', 0),
    # A qualifier applied "if present" (optional, or after an optional one) costs only when it
    # finds something, and the attribute's later qualifiers are not applied.
    ('@D.model[?"foo"].hasValue() || @D.index.?foo.hasValue()', 10),
    ('{"a": @D.model}.?b.c.hasValue()', 36),
    ('{"a": @D.model}.?a.?b.hasValue()', 37),
    ('{"a": [@D.model]}.?a[1].hasValue()', 47),
    ('[@D.model][?1].hasValue()', 16),
    ('[@D.model][?0].hasValue()', 17),
    ('optional.none().?a.hasValue()', 3),
]


@pytest.mark.parametrize(("expression", "cost"), CASES, ids=[str(n) for n in range(len(CASES))])
def test_the_cost_of_one_evaluation_is_cel_gos(expression, cost):
    program = PythonEngine().compile(expression.replace("@D", D))
    view = build_device_view(DEVICE)
    program.evaluate(view)  # no case fails (semantics are the parity cases' business)
    assert program.actual_cost(view) == cost


# Over the limit in cel-go too (1,000,001 and 1,017,683 there).
OVER_THE_LIMIT = [
    "lists.range(1000).exists(a, lists.range(1000).exists(b, a + b < 0)) || true",
    "lists.range(1000).exists(i, lists.range(100 + i % 2).sort()[0] < 0)",
]


@pytest.mark.parametrize("expression", OVER_THE_LIMIT)
def test_an_evaluation_over_the_limit_fails_and_nothing_absorbs_that(expression):
    program = PythonEngine().compile(expression)
    with pytest.raises(CelRuntimeError, match=COST_EXCEEDED):
        program.evaluate(build_device_view(DEVICE))


def test_what_is_never_evaluated_costs_nothing():
    # cel-go: true, cost 0; the right side would go over the limit.
    over = "lists.range(1000).exists(a, lists.range(1000).exists(b, a + b < 0))"
    program = PythonEngine().compile(f"true || {over}")
    view = build_device_view(DEVICE)
    assert program.evaluate(view) is True
    assert program.actual_cost(view) == 0
