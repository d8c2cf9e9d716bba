"""pytest plugin of scripts/mutation.py: each mutant's tests run fastest first.

mutmut runs a mutant's tests with ``-x``, so a killed mutant costs the tests up to the first
that fails. In the order mutmut passes them (a set's), a slow end-to-end test often runs before
the unit test that fails in milliseconds; ordered by the durations mutmut measured (its
``mutmut-stats.json``, in the directory the tests run from), the same tests kill the same mutants
in a fraction of the time. Which tests run, and so what counts as killed, is unchanged.
Loaded through ``PYTEST_PLUGINS``, which leaves mutmut's configuration (and its cache) as is.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def pytest_collection_modifyitems(session: Any, config: Any, items: list[Any]) -> None:
    stats = Path("mutmut-stats.json")
    if not stats.exists():
        return
    durations = json.loads(stats.read_text()).get("duration_by_test") or {}
    items.sort(key=lambda item: durations.get(item.nodeid, 0.0))
