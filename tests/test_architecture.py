"""The house rules of docs/architecture.md, checked on the source tree itself.

Import arrows only point down the layers, no two files import each other (directly or round a
loop), a sub-folder is a layer below its parent folder, cluster objects are read through the
model, no function grows past 80 lines, no folder past 15 modules, and comments cite files that
exist rather than "§" sections of documents that are not in the repository.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "extender"

# Lowest first. A module may import from its own layer and the ones below it, never above.
# The order is the one-way data flow of docs/architecture.md: sources (kube/, local/) feed the
# state; scheduling reads the state and runs the allocator; the binders (kube/, local/)
# implement scheduling's Binder protocol; api/ exposes the verbs; cli and tools wire it all.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("model",),
    ("cel",),
    ("allocator",),
    ("state",),
    ("config", "metrics", "logs"),
    ("scheduling",),
    ("kube", "local"),
    ("api",),
    ("cli", "__main__", "tools", "demo"),
)
MAX_MODULES_PER_FOLDER = 15


def _room(module: str) -> str:
    """The top-level room of ``extender.x.y`` (``x``), or ``__init__`` for the package itself."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _layer(room: str) -> int:
    for index, rooms in enumerate(LAYERS):
        if room in rooms:
            return index
    raise AssertionError(f"room {room!r} is in no layer of LAYERS: add it where it belongs")


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE.parent).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> Iterator[tuple[str, int]]:
    """Every ``extender`` module imported by ``module`` (type-checking-only imports included)."""
    tree = ast.parse(path.read_text(), str(path))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("extender"):
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")
                anchor = anchor if is_package else anchor[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if not base.startswith("extender"):
                continue
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield (candidate if candidate in MODULES else base), node.lineno


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        targets = graph.setdefault(module, set())
        for target, _ in _imports(module, path):
            while target not in MODULES and "." in target:
                target = target.rsplit(".", 1)[0]
            if target != module:
                targets.add(target)
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (a list of nodes, first repeated last), or None."""
    done: set[str] = set()
    stack: list[str] = []
    on_stack: set[str] = set()

    def visit(node: str) -> list[str] | None:
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target in on_stack:
                return [*stack[stack.index(target) :], target]
            if target not in done and (found := visit(target)):
                return found
        stack.pop()
        on_stack.discard(node)
        done.add(node)
        return None

    for node in sorted(graph):
        if node not in done and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_cycle_between_files() -> None:
    graph = {m: {t for t in targets if t != "extender"} for m, targets in _graph().items()}
    # A package's __init__ re-exporting its own modules is not a cycle of the design.
    for module, targets in graph.items():
        if MODULES[module].name == "__init__.py":
            targets -= {t for t in targets if t.startswith(module + ".")}
        else:
            package = module.rsplit(".", 1)[0]
            targets.discard(package)
    assert _cycle(graph) is None, f"import cycle: {' -> '.join(_cycle(graph) or [])}"


def test_the_import_graph_has_no_cycle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for module, targets in _graph().items():
        package = module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]
        for target in targets:
            target_package = target if MODULES[target].name == "__init__.py" else target.rsplit(".", 1)[0]
            if target_package != package and not package.startswith(target_package + "."):
                graph.setdefault(package, set()).add(target_package)
    assert _cycle(graph) is None, f"package cycle: {' -> '.join(_cycle(graph) or [])}"


def test_imports_point_down_the_layers() -> None:
    upward = []
    for module, path in MODULES.items():
        room = _room(module)
        if room == "__init__":
            continue
        for target, line in _imports(module, path):
            target_room = _room(target)
            if target_room != "__init__" and _layer(target_room) > _layer(room):
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {target}")
    assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_every_room_has_a_layer() -> None:
    for room in {_room(module) for module in MODULES} - {"__init__"}:
        _layer(room)  # raises, naming the room, when LAYERS lacks it


# --- sub-folders are layers --------------------------------------------------------------------

# A sub-folder sits below its parent folder's modules: it imports none of them. These are built
# on a few modules of their parent, which form the parent's base (each module named, and none of
# them may reach back into the sub-folder, checked below).
SUBFOLDER_BASES: dict[str, frozenset[str]] = {
    # The allocator's answers for nodes alike are made of what a search is made of (pools,
    # requests, results, the allocated state, the failure), never of the search itself.
    "extender.allocator.alike": frozenset(
        f"extender.allocator.{m}" for m in ("outcome", "pools", "requests", "result", "state")
    ),
    # The engines implement the engine protocol over the device view, with the package's errors.
    "extender.cel.cpp": frozenset({"extender.cel", "extender.cel.engine", "extender.cel.device"}),
    "extender.cel.python": frozenset({"extender.cel", "extender.cel.engine", "extender.cel.device"}),
    # The runtime shared by both engines keeps Kubernetes' cost limit, declared with the contract.
    "extender.cel.runtime": frozenset({"extender.cel"}),
}


def _folder(module: str) -> str:
    return module if MODULES[module].name == "__init__.py" else module.rsplit(".", 1)[0]


def _resolved(target: str) -> str | None:
    while target not in MODULES and "." in target:
        target = target.rsplit(".", 1)[0]
    return target if target in MODULES else None


def test_sub_folders_import_nothing_of_their_parent_but_its_base() -> None:
    upward = []
    for module, path in MODULES.items():
        folder = _folder(module)
        parent = folder.rsplit(".", 1)[0]
        if parent in ("", "extender"):
            continue
        base = SUBFOLDER_BASES.get(folder, frozenset())
        for target, line in _imports(module, path):
            resolved = _resolved(target)
            if resolved is not None and _folder(resolved) == parent and resolved not in base:
                upward.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {resolved}")
    assert not upward, "sub-folders importing their parent folder:\n" + "\n".join(upward)


@pytest.mark.parametrize("folder", sorted(SUBFOLDER_BASES))
def test_a_sub_folders_base_does_not_reach_back_into_it(folder: str) -> None:
    graph = _graph()
    seen: set[str] = set()
    todo = list(SUBFOLDER_BASES[folder])
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo.extend(t for t in graph.get(module, ()) if t != "extender")
    inside = sorted(m for m in seen if m == folder or m.startswith(folder + "."))
    assert not inside, f"{folder}'s base imports it back: {inside}"


# --- cluster objects are read through the model -------------------------------------------------

# Rooms that read cluster objects as they come: the model parses them, the sources and the API
# receive them, the binders write them.
RAW_READERS = {"model", "kube", "api", "local"}
_TOP_KEYS = {"metadata", "spec", "status"}
# Functions that still read a cluster object's dict, each to move to a field of ``model/``.
RAW_READ_OFFENDERS: dict[str, str] = {
    # state/ receives objects from the sources and keys them before the model has them:
    "state/pod_requests.py:__init__": "a pod's metadata, spec and status",
    "state/pod_requests.py:units_of": "a pod's status and metadata",
    "state/store.py:_rv": "an incoming object's resourceVersion",
    "state/store.py:assume_claim_unless_older": "an incoming claim's metadata",
    # developer tools that write cluster objects of their own:
    "tools/oracle.py:_slice_name": "a case's slice metadata",
    "tools/random_cases.py:_classes": "generated classes",
    "tools/random_cases.py:allocation_case": "generated claims",
    "tools/simulate.py:_add": "a pod being admitted",
    "tools/simulate.py:_created": "a pod's creationTimestamp",
    "tools/simulate.py:_may_preempt": "a pod's preemptionPolicy",
}


def _raw_reads(tree: ast.AST) -> Iterator[ast.expr]:
    """``x.raw[...]``, ``x.raw.get(...)``, and ``[...]`` or ``.get(...)`` of "metadata", "spec" or
    "status" on anything: the reads of a cluster object's dict."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            owner, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            owner, key = node.func.value, (node.args[0] if node.args else None)
        else:
            continue
        of_raw = isinstance(owner, ast.Attribute) and owner.attr == "raw"
        if of_raw or (isinstance(key, ast.Constant) and key.value in _TOP_KEYS):
            yield node


def _functions_reading_raw() -> dict[str, int]:
    found: dict[str, int] = {}
    for module, path in MODULES.items():
        if _room(module) in RAW_READERS:
            continue
        tree = ast.parse(path.read_text())
        functions = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        for read in _raw_reads(tree):
            around = [f for f in functions if f.lineno <= read.lineno <= (f.end_lineno or f.lineno)]
            name = min(around, key=lambda f: (f.end_lineno or f.lineno) - f.lineno).name if around else ""
            found.setdefault(f"{path.relative_to(PACKAGE).as_posix()}:{name}", read.lineno)
    return found


def test_cluster_objects_are_read_through_the_model() -> None:
    found = _functions_reading_raw()
    new = sorted(f"{where} (line {line})" for where, line in found.items() if where not in RAW_READ_OFFENDERS)
    assert not new, "raw reads of cluster objects outside model/, kube/, api/, local/:\n" + "\n".join(new)
    gone = sorted(set(RAW_READ_OFFENDERS) - set(found))
    assert not gone, f"no longer reading raw, strike them from RAW_READ_OFFENDERS: {gone}"


# --- functions are short ----------------------------------------------------------------------------

MAX_FUNCTION_LINES = 80
# Declarative tables: one entry after another, nothing to follow but the list itself.
DECLARATIVE_TABLES: dict[str, str] = {
    "metrics.py:Metrics.__init__": "the declaration of every metric of the app's registry",
    "cel/cpp/library.py:_declarations": "the declaration of every library function of the C++ engine",
}
# Longer than that still, each to split (and to strike from here).
LONG_FUNCTION_OFFENDERS: dict[str, str] = {}  # none left


def _function_lengths() -> dict[str, int]:
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, prefix: str, where: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                lengths[f"{where}:{name}"] = (child.end_lineno or child.lineno) - child.lineno + 1
                visit(child, f"{name}.", where)
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", where)
            else:
                visit(child, prefix, where)

    for path in MODULES.values():
        visit(ast.parse(path.read_text()), "", path.relative_to(PACKAGE).as_posix())
    return lengths


def test_no_function_is_longer_than_eighty_lines() -> None:
    lengths = _function_lengths()
    excused = DECLARATIVE_TABLES.keys() | LONG_FUNCTION_OFFENDERS.keys()
    long = sorted(
        f"{name}: {n} lines" for name, n in lengths.items() if n > MAX_FUNCTION_LINES and name not in excused
    )
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines:\n" + "\n".join(long)
    short = sorted(name for name in LONG_FUNCTION_OFFENDERS if lengths.get(name, 0) <= MAX_FUNCTION_LINES)
    assert not short, f"short enough now (or gone), strike them from LONG_FUNCTION_OFFENDERS: {short}"


FOLDERS = sorted({p.parent for p in PACKAGE.rglob("*.py")})


@pytest.mark.parametrize("folder", FOLDERS, ids=lambda p: str(p.relative_to(PACKAGE.parent)))
def test_no_folder_holds_more_than_fifteen_modules(folder: Path) -> None:
    modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= MAX_MODULES_PER_FOLDER, f"{folder}: {len(modules)} modules, split it into rooms"


def test_comments_cite_files_not_sections_of_absent_documents() -> None:
    cited = [
        f"{path.relative_to(PACKAGE.parent)}:{n}"
        for path in PACKAGE.rglob("*.py")
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "§" in line
    ]
    assert not cited, "comments citing '§' sections:\n" + "\n".join(cited)


# --- tests read the clock when they run, not when they are collected -----------------------------

TESTS = PACKAGE.parent / "tests"
# Calls that read the clock: ``datetime.now()``, ``date.today()``, ``time.time()``, ...
_CLOCK_METHODS = {"now", "utcnow", "today"}
_TIME_FUNCTIONS = {"time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns"}
_CLOCK_NAMES = {"now_rfc3339", "monotonic", "perf_counter", "time_ns"}


def _reads_the_clock(call: ast.Call) -> bool:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id in _CLOCK_NAMES
    if isinstance(func, ast.Attribute):
        if func.attr in _CLOCK_METHODS:
            return True
        return isinstance(func.value, ast.Name) and func.value.id == "time" and func.attr in _TIME_FUNCTIONS
    return False


class _TestModule:
    """A module of tests/: its functions, and the names it imports from other modules of tests/."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.tree = ast.parse(path.read_text())
        self.functions = {
            n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        self.imported: dict[str, tuple[str, str]] = {}
        for node in self.tree.body:
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests."):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (node.module or "", alias.name)


def _test_modules() -> dict[str, _TestModule]:
    return {
        ".".join(p.relative_to(TESTS.parent).with_suffix("").parts): _TestModule(p)
        for p in sorted(TESTS.rglob("*.py"))
    }


def _calls_made(body: ast.AST) -> Iterator[ast.Call]:
    """The calls running ``body`` makes: everything in it but the bodies of the functions and
    lambdas it defines (their decorators and default values included: those run) and a
    ``__main__`` block."""

    def visit(node: ast.AST) -> Iterator[ast.Call]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for child in [*node.decorator_list, *node.args.defaults, *node.args.kw_defaults]:
                if child is not None:
                    yield from visit(child)
            return
        if isinstance(node, ast.Lambda):
            for child in node.args.defaults:
                yield from visit(child)
            return
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Call):
            yield node
        for child in ast.iter_child_nodes(node):
            yield from visit(child)

    if isinstance(body, ast.FunctionDef | ast.AsyncFunctionDef):
        for statement in body.body:
            yield from visit(statement)
    else:
        yield from visit(body)


def test_no_test_reads_the_clock_when_it_is_collected() -> None:
    """A time taken at collection (a module constant, a parametrize argument) is as old as the run
    when the test runs: a claim stamped 10 s ago at collection was past the 600 s binding timeout
    in a suite that had run ten minutes. Such times are taken in the test, or in a fixture."""
    modules = _test_modules()
    reading: dict[tuple[str, str], bool] = {}

    def reads(module: str, name: str) -> bool:
        """Whether calling ``name`` of ``module`` reads the clock, itself or through its callees."""
        key = (module, name)
        if key not in reading:
            reading[key] = False  # a recursive helper reads the clock if its other calls do
            found = modules.get(module)
            if found is not None and name in found.imported:
                reading[key] = reads(*found.imported[name])
            elif found is not None and name in found.functions:
                calls = _calls_made(found.functions[name])
                reading[key] = any(_reads_the_clock(c) or calls_reading(module, c) for c in calls)
        return reading[key]

    def calls_reading(module: str, call: ast.Call) -> bool:
        return isinstance(call.func, ast.Name) and reads(module, call.func.id)

    found = [
        f"{module.path.relative_to(TESTS.parent)}:{call.lineno}: {ast.unparse(call.func)}"
        for name, module in modules.items()
        for call in _calls_made(module.tree)
        if _reads_the_clock(call) or calls_reading(name, call)
    ]
    assert not found, "the clock read when tests are collected:\n" + "\n".join(found)
