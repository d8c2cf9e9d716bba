"""Reading counters from the server's Prometheus exposition."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

# Counters about evaluations that are not themselves evaluations (errors are a subset of them).
_NOT_EVALUATIONS = ("error", "fail", "cache", "cost")


def cel_evaluations(exposition: str) -> float | None:
    """Sum of every CEL evaluation counter the server exports, or None when it has none.

    The name is matched loosely (prefix `dra_extender_`, containing `cel` and `eval`) because
    the server's metric names are its own choice; labels (engine, result) are summed over.
    Untyped `_total` samples count too: hand-written expositions often declare the type under
    the name without the suffix, which leaves the sample untyped for the parser. Error counters
    are left out because they count a subset of the evaluations again.
    """
    total = None
    for family in text_string_to_metric_families(exposition):
        name = family.name
        if family.type not in ("counter", "unknown") or not name.startswith("dra_extender_"):
            continue
        if "cel" not in name or "eval" not in name or any(w in name for w in _NOT_EVALUATIONS):
            continue
        for sample in family.samples:
            if sample.name.endswith("_total"):
                total = (total or 0.0) + sample.value
    return total
