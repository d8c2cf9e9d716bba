"""Process-wide state in extender/ is the exception, each case listed here with its reason.

A cache or a background task belongs to an object the app makes and drops (``ArgsDecoder``,
``Environment``, the C++ engine's ``QuantityMessages`` ...). What stays at module level is a
pure function of immutable input, bounded, so that sharing it between app instances is the
same as each having its own. The scan finds module-level caches (``lru_cache``, ``cache``, and
objects of the cache classes) and module-level containers that the module changes after import;
a new one fails here until it is given an owner or a reason below (and next to its definition).
The scan sees a container changed by name in its module, not one handed to a helper that
changes it: such a table must be listed by hand.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "extender"

# Classes whose objects hold state that changes as they are used.
_STATEFUL = {
    "LRUCache", "TTLCache", "TextCache", "OrderedDict", "defaultdict", "WeakValueDictionary",
    "WeakKeyDictionary", "WeakSet", "ContentMemo", "SharedJson", "OncePerSecond", "Lock", "RLock",
}
_CACHE_DECORATORS = {"lru_cache", "cache", "functools.lru_cache", "functools.cache"}
_MUTATORS = {"append", "add", "update", "setdefault", "pop", "popitem", "clear", "extend", "insert",
             "discard", "remove", "__setitem__"}

# (module, name) -> why it may be process-wide. Each is bounded and a pure function of what it
# is keyed by (or, for the tables filled at import, a constant of the code).
ALLOWED = {
    ("cel/cpp/library.py", "_parse_quantity"): "lru_cache: a quantity literal's parse, immutable",
    ("cel/cpp/values.py", "_semver_message_for"): "lru_cache: a semver's message, immutable",
    ("cel/cpp/values.py", "_semver_from_key"): "lru_cache: a semver key's parse, immutable",
    ("cel/python/strings.py", "cached_regex"): "lru_cache: a compiled RE2, immutable",
    ("cel/python/syntax.py", "_lark"): "cache: the parser of a fixed grammar, one entry",
    ("cel/runtime/k8s_functions.py", "_regex"): "lru_cache: a compiled RE2, immutable",
    ("cel/runtime/semver.py", "_parse_strict"): "lru_cache: a version's parse, immutable",
    ("cel/runtime/semver.py", "_parse_normalized"): "lru_cache: a version's parse, immutable",
    ("model/quantity.py", "_parse"): "lru_cache: a quantity's parse, immutable",
    ("cel/python/library.py", "_DECLARED"): "filled at import, published read-only as FUNCTIONS",
    ("model/_shared.py", "_by_content"): "weak: a device content's CEL memo, alive with its devices",
    ("model/_shared.py", "_lock"): "guards _by_content",
    ("model/resource_claim.py", "_SPECS"): "ContentMemo: a claim spec's parse by content, 1024",
    ("model/resource_slice.py", "_ATTRIBUTES"): "ContentMemo: an attribute map's parse, 4096",
    ("model/resource_slice.py", "_CAPACITIES"): "ContentMemo: a capacity map's parse, 4096",
    ("model/resource_slice.py", "_SHARED_JSON"): "SharedJson: equal subtrees made one, 100,000",
    ("model/resource_slice.py", "_DEVICE_BODIES"): "ContentMemo: a device's parse but its pool, 4096",
    ("logs.py", "_local_second"): "OncePerSecond: one entry, a function of the second",
    ("logs.py", "utc_rfc3339"): "OncePerSecond: one entry, a function of the second",
}

# Process-wide state another change of this step gives an owner (the stale-release tasks go to
# an object the app closes): not required to be here, so that either merge order passes.
PENDING = {("scheduling/stale.py", "_running")}


def module_state(path: Path) -> set[str]:
    """Names of the module's process-wide state, as the module docstring defines it."""
    tree = ast.parse(path.read_text())
    found: set[str] = set()
    literals: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if any(ast.unparse(d).split("(")[0] in _CACHE_DECORATORS for d in node.decorator_list):
                found.add(node.name)
            continue
        targets, value = _assignment(node)
        names = [t.id for t in targets if isinstance(t, ast.Name)]
        if isinstance(value, ast.Call) and _called(value) in _STATEFUL:
            found.update(names)
        elif isinstance(value, (ast.Dict, ast.List, ast.Set, ast.DictComp, ast.ListComp, ast.SetComp)) or (
            isinstance(value, ast.Call) and _called(value) in {"dict", "list", "set"}
        ):
            literals.update(names)
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, (ast.Store, ast.Del)):
            target = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr not in _MUTATORS:
                continue
            target = node.func.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in literals and target.id != "__all__":
            found.add(target.id)
    return found


def _assignment(node: ast.stmt) -> tuple[list[ast.expr], ast.expr | None]:
    if isinstance(node, ast.Assign):
        return node.targets, node.value
    if isinstance(node, ast.AnnAssign):
        return [node.target], node.value
    return [], None


def _called(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def test_process_wide_state_is_only_what_is_listed_with_its_reason() -> None:
    found = {(str(p.relative_to(ROOT)), name) for p in ROOT.rglob("*.py") for name in module_state(p)}
    assert found - ALLOWED.keys() - PENDING == set(), "process-wide state without an owner or a reason"
    assert ALLOWED.keys() - found == set(), "listed here but gone: drop it from ALLOWED"


def test_the_scan_finds_each_kind_of_state() -> None:
    source = (
        "import functools\nfrom cachetools import LRUCache\n"
        "A = LRUCache(maxsize=1)\nB = {}\nC = {}\nD: list[int] = []\n"
        "@functools.lru_cache(maxsize=8)\ndef e(x): return x\n"
        "def f(): B['k'] = 1; D.append(2); return C.get('k')\n"
    )
    path = Path(__file__).parent / "_module_state_sample.py"
    try:
        path.write_text(source)
        assert module_state(path) == {"A", "B", "D", "e"}  # C is only read: a constant table
    finally:
        path.unlink()
