"""The engine protocol: what every CEL backend (C++ or pure Python) offers the environment.

Engines compile an expression once into a :class:`Program`; the program is then run on many
devices, each presented as an already parsed :class:`~extender.cel.device.DeviceView`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from extender.cel import Checkpoint
    from extender.cel.device import DeviceView
    from extender.model import AttributeValue

ENGINE_CHOICES = ("auto", "cpp", "python")

# Engine name -> module that defines ``make() -> Engine``; imported lazily so one missing
# backend never breaks the other.
_ENGINE_MODULES = {"cpp": "extender.cel.cpp.engine", "python": "extender.cel.python.engine"}


class Program(Protocol):
    """A compiled, type-checked selector."""

    def evaluate(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> bool:
        """Return the selector's verdict; raise ``CelRuntimeError(message, expression)``.

        ``checkpoint`` is called every ``CHECK_EVERY_COST`` cost units of evaluation (see
        ``extender.cel``); what it raises goes through unchanged."""
        ...


class DerivedProgram(Protocol):
    """A compiled, type-checked derived attribute expression (DRADerivedAttributes)."""

    def derive(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> AttributeValue:
        """Return the value constraints compare; raise ``CelRuntimeError(message, expression)``
        (also for a result of a type a derived attribute may not have)."""
        ...


class Engine(Protocol):
    """A CEL backend configured with Kubernetes' DRA environment."""

    name: str  # "cpp" | "python"

    def compile(self, expression: str) -> Program:
        """Parse and check ``expression``; raise ``CelCompileError(message, expression)``."""
        ...

    def compile_derived(self, expression: str) -> DerivedProgram:
        """As :meth:`compile`, for a derived attribute: its result must be a scalar (string,
        integer, boolean, semver) or a list of them (``extender.cel.runtime.derived``)."""
        ...


def _load(name: str) -> Engine:
    if name not in _ENGINE_MODULES:
        raise ValueError(f"unknown CEL engine {name!r}; choose one of {', '.join(ENGINE_CHOICES)}")
    module = importlib.import_module(_ENGINE_MODULES[name])
    engine: Engine = module.make()  # each engine module's ``make`` returns its Engine
    return engine


def unavailable_reason(name: str) -> str | None:
    """Why engine ``name`` cannot be used here (its ImportError), or None when it can."""
    try:
        _load(name)
    except ImportError as exc:
        return f"{name} engine not installed: {exc}"
    return None


def available_engines() -> list[str]:
    """Names of the engines whose backend library and module import in this process."""
    return [name for name in _ENGINE_MODULES if unavailable_reason(name) is None]


def make_engine(name: str = "auto") -> Engine:
    """Build an engine; ``auto`` is the pure-Python one.

    Both engines pass every parity and cel-spec case; the Python one is the faster in
    ``python -m loadtest.bench_cel`` (compile, first and later evaluations) and end to end
    (docs/performance.md), and it installs everywhere. Raises ValueError for an unknown name
    and ImportError when the engine asked for cannot be loaded.
    """
    return _load("python" if name == "auto" else name)
