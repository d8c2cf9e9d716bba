"""Google's C++ CEL runtime (``cel_expr_python``) set up as Kubernetes' DRA selector environment.

The C++ checker gives cel-go's static typing; what the library lacks or does differently is
patched here and in the other modules of ``cel/cpp/``: ``tokens.py`` (scanning the source),
``rewrite.py`` (rewriting it), ``homogeneity.py`` (mixed literal lists), ``library.py``
(Kubernetes' functions), ``types.py``/``values.py`` (library types as messages),
``equality.py`` and ``formatting.py`` (Python implementations) and ``errors.py`` (cel-go's wording):

- ``device`` is declared as four qualified variables (``device.driver``, ...), because a
  protobuf message cannot hold the map-of-maps that ``attributes`` and ``capacity`` are;
  the checker then rejects unknown fields as an object type would.
- Missing-domain default: ``device.attributes[X]`` runs as ``device.attributes[?X].orValue({})``,
  also through a ``cel.bind`` name bound to the map; an optional lookup of a domain is always
  present and ``has(device.attributes.X)`` always true, as upstream's map finds every key.
- Library types (kubernetes.Quantity/Semver/URL, net.IP/CIDR) are protobuf messages holding a
  value-canonical key. Quantity keys also carry the integer trait, so relations that may
  compare quantities run through Python (equality by value, in lists and maps too). Functions
  of one name and argument kinds share one Python implementation (a C++ registry limit).
- Checks cel-go does that the C++ one does not: homogeneous aggregate literals, conversions of
  constants (where cel-go's planner folds them), literal regexes, durations, timestamps,
  double overflow and literal ``format`` calls at compile time, the lists library's element
  types (probe declarations); cross-type comparison of numeric literals (``1 < 1.5``) is
  admitted by widening an operand to dyn.
- ``indexOf``/``lastIndexOf`` (strings and Kubernetes' lists), ``format`` (cel-go's formatter),
  ``getMilliseconds`` (a duration's total), ``bool`` (Go's ParseBool), ``string`` of IPs, CIDRs,
  doubles, timestamps and durations (Go's formatting) and ``transformMap`` run through aliases
  or wrappers, because declared functions cannot be extended.
- Library values answer "no such overload" to ``==``/``!=``/``in`` with another type: a native
  type guard around relations whose left operand is dyn.
- Long ``+`` chains are regrouped when the parser's nesting limit (32, cel-go's is 250) is hit.
- An optional value reaching a Python function crashes the runtime: such expressions run on
  the pure-Python engine, as do those using the format library (optional results), and loops
  beyond the runtime's fixed 10,000-iteration budget (Kubernetes' cost limit is far higher).
- The runtime has no cost tracking: expressions whose cost can grow with the data (loops,
  ``lists``/``sets`` functions, sorting and other whole-list functions) run on the pure-Python
  engine, which counts cel-go's costs and calls the caller's checkpoint (``_COSTLY_CALLS``).
- Activations are cached per device view and per thread (the library's arenas are thread-bound).
"""

from __future__ import annotations

import itertools
import math
import re
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_optional

from extender.cel import CelCompileError, CelRuntimeError, Checkpoint
from extender.cel.cpp.errors import MIXED_LISTS, compile_text, lint, runtime_text
from extender.cel.cpp.formatting import literal_format_problems
from extender.cel.cpp.homogeneity import MAX_LOCATING_PROBES, homogeneity_probes, homogeneity_variant
from extender.cel.cpp.library import ABORTED, LIST_FUNCTION_PROBES, UNHASHABLE, function_decls
from extender.cel.cpp.literals import literal_mismatches
from extender.cel.cpp.rewrite import (
    VALUE_RELATIONS,
    Edit,
    alias_net_strings,
    balanced_sums,
    field_presence,
    go_number_edits,
    go_string_edits,
    optional_index_edits,
    relation_operands,
    rewrite,
    stale_slot_risk,
    widen_numeric_comparisons,
    without_doubled_parentheses,
)
from extender.cel.cpp.tokens import (
    LITERAL_WORDS,
    Token,
    closing,
    in_literal_planned_by_go,
    is_bytes_literal,
    later_optional_map_entry,
    literal_conversions,
    literal_patterns,
    may_hold_optionals,
    member_calls,
    odd_map_key,
    position,
    split_top,
    texts,
    tokens,
    unknown_character,
    uses_format_library,
)
from extender.cel.cpp.types import (
    CALL_ALIASES,
    CONFIG_YAML,
    FORMAT_CALLS,
    GLOBAL_ALIASES,
    POOL,
    QT,
    T,
    status_text,
)
from extender.cel.cpp.values import QuantityMessages, to_cel
from extender.cel.engine import DerivedProgram, Engine, Program, make_engine
from extender.cel.runtime.derived import result_type_problem, to_attribute
from extender.cel.runtime.timestamps import parse_duration, parse_timestamp
from extender.cel.runtime.values import EvalError

if TYPE_CHECKING:
    from extender.cel.device import DeviceView
    from extender.model import AttributeValue

# The C++ parser's and checker's nesting limit (32) was hit.
_RECURSION_LIMIT = re.compile(r"recursion (?:depth|limit)")
# Library functions implemented in Python that take values of any type (through list(dyn)).
_PYTHON_VALUE_FUNCTIONS = frozenset(
    {
        *("sum", "min", "max", "isSorted", "includes", "transformMap", "transformMapEntry"),
        *("sort", "distinct", "sortBy"),
        *CALL_ALIASES.values(),
    }
)
GO_NUMBER_SYNTAX = {"int": re.compile(r"[+-]?[0-9]+"), "uint": re.compile(r"[0-9]+")}
GO_TIME_PARSERS = {"duration": parse_duration, "timestamp": parse_timestamp}


_BUILTIN_TYPE = re.compile(r"\b[A-Z][A-Z0-9_]*\b")


def _type_name(t: Any) -> str:
    """cel-go's spelling of a static type: ``list(string)``, ``kubernetes.Quantity``."""
    name = _BUILTIN_TYPE.sub(lambda m: m.group().lower(), str(t.name()))
    return name.replace("<", "(").replace(">", ")")


def _value_type_name(t: Any) -> str:
    """cel-go's name of a value's runtime type, which carries no parameters: ``list``."""
    return _type_name(t).split("(", 1)[0]


_FOREIGN_ARENA = "No PyCelArena found"
_GUARDED_RELATIONS = frozenset({"==", "!=", "in"})
# Calls making library values, and the static type of a list or map holding them.
_LIBRARY_CONSTRUCTORS = frozenset({"semver", "quantity", "ip", "cidr", "url", "capacity", "attributes"})
_LIBRARY_IN_CONTAINER = re.compile(r"(?:list|map)\(.*\b(?:kubernetes|net)\.")
# A list or map of dyn values, which may be library values (attributes, dyn(semver(...))).
_DYN_IN_CONTAINER = re.compile(r"(?:list|map)\(.*\bdyn\b")
_LIBRARY_TYPE_NAMES = ("kubernetes.Semver", "kubernetes.Quantity", "kubernetes.URL", "net.IP", "net.CIDR")
_ITERATION_BUDGET = "Iteration budget exceeded"
# What makes an evaluation's cost grow with the data: loops (the macros) and the functions that
# build or walk whole lists. The C++ runtime cannot count cel-go's costs, so expressions using
# them run on the python engine, which counts them exactly; without them, an expression's cost
# is bounded by its length and the device's values, far below Kubernetes' limit.
_COSTLY_CALLS = frozenset(
    {
        *("all", "exists", "exists_one", "existsOne", "map", "filter"),
        *("transformList", "transformMap", "transformMapEntry", "sortBy"),
        *("sort", "distinct", "flatten", "slice", "reverse"),
    }
)
_COSTLY_NAMESPACES = frozenset({"lists", "sets"})
# What the C++ runtime answers to a presence test or optional selection (has(x.f), x.?f,
# x[?k], and a qualifier after an optional value) on null, a number, a string or a library
# value, where cel-go finds nothing (false, optional.none(); interpreter/attributes.go,
# refQualify), and to ``x in m`` with an ``x`` the map's keys cannot be (bytes, null, a list),
# where cel-go finds nothing: the python engine, which does as cel-go does, decides. Error
# path only.
_PYTHON_DECIDES = re.compile(
    r"Applying SELECT to non-message type|No matching overloads found : (?:_(?:\?\._|\[\?_\])|@in\b)"
    r"|no_such_field"
)
_DUPLICATE_KEY = "duplicate key in map"


def _bind_edits(
    toks: list[Token], start: int, op: int, end: int, left: str, right: str, body: str
) -> list[Edit]:
    """``A op B`` -> ``cel.bind(left, A, cel.bind(right, B, body))``: each operand evaluated
    once. Safe from stale_slot_risk: an expression with an ``exists`` or ``all`` runs on the
    python engine (``_COSTLY_CALLS``) and is never rewritten."""
    return [
        (toks[start].start, toks[start].start, 0, f"cel.bind({left}, "),
        (toks[op].start, toks[op].end, 2, f", cel.bind({right}, "),
        (toks[end - 1].end, toks[end - 1].end, 3, f", {body}))"),
    ]


# Names bound lazily: by cel.bind and by the optMap/optFlatMap macros (see stale_slot_risk).
_LAZY_BINDINGS = frozenset({"bind", "optMap", "optFlatMap"})


def _stale_bind_risk(toks: list[Token]) -> bool:
    """Whether a name the user binds lazily may read a loop variable left behind by an
    ``exists`` or ``all`` that stopped early (see stale_slot_risk); the python engine runs
    such expressions."""
    return bool(member_calls(toks) & _LAZY_BINDINGS) and stale_slot_risk(toks)


_INVALID_QUALIFIER = "invalid qualifier type"
# The static types of an index cel-go can qualify by (interpreter/attributes.go, newQualifier).
_QUALIFIER_TYPES = frozenset({"string", "int", "uint", "double", "bool"})
# Tokens of a constant index cel-go cannot plan: bytes, null, lists, maps, types, durations
# and timestamps (and the conversions making them).
_ODD_QUALIFIER_WORDS = frozenset(
    {
        *("null", "bytes", "duration", "timestamp", "type", "int", "uint", "double", "string"),
        *("bool", "list", "map", "null_type", "dyn", "[", "{"),
    }
)


def _may_index_by_odd_constant(toks: list[Token]) -> bool:
    """Whether some index ``x[...]`` (or ``x[?...]``) holds a bytes literal or a token of
    _ODD_QUALIFIER_WORDS: a cheap screen before _check_constant_indexes asks the planner."""
    for i, tok in enumerate(toks):
        if tok.text != "[" or i == 0:
            continue
        prev = toks[i - 1]
        if not (prev.kind in ("id", "str") or prev.text in (")", "]", "}")):
            continue  # a list literal, not an index
        close = closing(toks, i)
        inner = toks[i + 1 : close] if close is not None else []
        if any(t.text in _ODD_QUALIFIER_WORDS or is_bytes_literal(t) for t in inner):
            return True
    return False


def _has_presence_test(toks: list[Token]) -> bool:
    """Whether the expression has a presence test, where the C++ runtime may fail while cel-go
    answers (see _PYTHON_DECIDES)."""
    return any(tok.text == "has" for tok in toks)


def _constant_scalar_list(toks: list[Token], a: int, b: int) -> bool:
    """Whether ``toks[a:b]`` is a non-empty list literal of constant scalars other than bytes
    and null (cel-go's types.IsPrimitiveType): literals, signed numbers, and the conversions
    to a scalar of a literal, which cel-go's planner folds (``[dyn('a'), int('1')]``)."""
    if b - a < 3 or toks[a].text != "[" or toks[b - 1].text != "]" or closing(toks, a) != b - 1:
        return False
    elements = split_top(toks, a + 1, b - 1, ",")
    return bool(elements) and all(_is_set_element(toks[lo:hi]) for lo, hi in elements)


# Conversions cel-go folds whose result of a scalar literal is a scalar (bytes is no set
# element), by their own names and the aliases the rewritten source calls them by.
_SCALAR_CONVERSIONS = frozenset({"int", "uint", "double", "string", "bool", "dyn", *GLOBAL_ALIASES.values()})


def _is_set_element(element: list[Token]) -> bool:
    if len(element) == 4 and element[0].text in _SCALAR_CONVERSIONS and element[1].text == "(":
        if element[3].text != ")":
            return False
        element = element[2:3]
    if len(element) == 2 and element[0].text == "-" and element[1].kind == "num":
        element = element[1:]
    if len(element) != 1:
        return False
    tok = element[0]
    return (tok.kind in ("str", "num") or tok.text in ("true", "false")) and not is_bytes_literal(tok)


def _quotes_a_field(expression: str) -> bool:
    """Whether the expression has a backtick-quoted field name (``x.`a-b```), which the C++
    parser reads but the tokens behind every rewrite do not: the python engine runs those."""
    at = unknown_character(expression)
    return at is not None and expression[at] == "`"


def _is_float_literal(tok: Token) -> bool:
    text = tok.text.lower()
    return (
        tok.kind == "num"
        and not text.startswith("0x")
        and not text.endswith("u")
        and any(c in text for c in ".e")
    )


def _is_literal(toks: list[Token], a: int, b: int) -> bool:
    """Whether ``toks[a:b]`` is one scalar literal (a string, a number, true, false or null)."""
    return b - a == 1 and (toks[a].kind in ("str", "num") or toks[a].text in LITERAL_WORDS)


def _shallower_sources(source: str, toks: list[Token]) -> Iterator[str]:
    """``source`` rewritten to nest less for the C++ parser: without doubled parentheses, with
    long sums regrouped, then both."""
    unnested = without_doubled_parentheses(source, toks)
    if unnested is not None:
        yield unnested
    balanced = balanced_sums(source, toks)
    if balanced is not None:
        yield balanced
    if unnested is not None and balanced is not None:
        unnested_toks = tokens(unnested)
        both = None if unnested_toks is None else balanced_sums(unnested, unnested_toks)
        if both is not None:
            yield both


class _OnPython:
    """Why the python engine must answer where the C++ runtime cannot give Kubernetes' answer."""

    __slots__ = ("why",)

    def __init__(self, why: str) -> None:
        self.why = why


# Static result types whose values the runtime hands back exactly (plain_value): others may
# hold semver messages (which drop build metadata) or uints, which read as ints in a list.
_EXACT_LIST_RESULTS = frozenset({"list(int)", "list(bool)", "list(string)"})


class CppProgram:
    """One compiled selector or derived attribute; evaluation reuses the device's cached
    activation."""

    __slots__ = (
        "_compiled",
        "_derived",
        "_engine",
        "_fallback",
        "_may_abort",
        "_python_decides_errors",
        "_static",
        "expression",
    )

    def __init__(
        self,
        engine: CppEngine,
        expression: str,
        compiled: Any,
        python_decides_errors: bool = False,
        may_abort: bool = False,
        static: str = "bool",
        derived: bool = False,
    ) -> None:
        self._engine = engine
        self._compiled = compiled
        # The python engine's, for over-budget loops and repeated map keys (see _python).
        self._fallback: Any = None
        # Whether any runtime error is the python engine's to confirm: the expression qualifies
        # values the C++ runtime may fail on where cel-go finds nothing (_PYTHON_DECIDES), and
        # that failure may surface as another operand's error (``error && false``).
        self._python_decides_errors = python_decides_errors
        # Whether a guard may note a panic of cel-go's (library.UNHASHABLE) to raise afterwards.
        self._may_abort = may_abort
        self._static = static  # the checked result type, as cel-go spells it
        self._derived = derived  # a derived attribute's expression (derive), not a selector's
        self.expression = expression

    def evaluate(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> bool:
        result = self._native(view)
        if isinstance(result, _OnPython):
            return bool(self._python(result.why).evaluate(view, checkpoint))
        kind = result.type()
        if kind == T.BOOL:
            return bool(result.value())
        raise CelRuntimeError(
            f"CEL result of type {_value_type_name(kind)} could not be converted to bool", self.expression
        )

    def derive(self, view: DeviceView, checkpoint: Checkpoint | None = None) -> AttributeValue:
        """The value as a derived attribute (``runtime.derived``). Only booleans, integers,
        strings and lists of them statically typed so come back exactly from the runtime; the
        python engine gives every other value, and the errors about it."""
        result = self._native(view)
        why = result.why if isinstance(result, _OnPython) else "a result the C++ runtime cannot give exactly"
        if not isinstance(result, _OnPython):
            kind = result.type()
            if kind in (T.BOOL, T.INT, T.STRING) or (kind == T.LIST and self._static in _EXACT_LIST_RESULTS):
                return to_attribute(result.plain_value())
        derived: AttributeValue = self._python(why).derive(view, checkpoint)
        return derived

    def _native(self, view: DeviceView) -> Any:
        """The runtime's result (never an error value), or where the python engine must answer.
        The native evaluation is one call that cannot stop for a checkpoint; it is short by
        construction: at most the runtime's 10,000 loop iterations in all, after which the
        python engine, which calls the checkpoint, takes over (docs/reliability.md)."""
        if view.error is not None:
            raise CelRuntimeError(view.error, self.expression)
        may_abort = self._may_abort
        if may_abort:
            ABORTED.message = None
        try:
            with self._engine.lock:
                result = self._eval(view)
            if may_abort and ABORTED.message is not None:
                raise CelRuntimeError(ABORTED.message, self.expression)
        except RuntimeError as exc:  # the iteration budget and a repeated map key abort the evaluation
            if _ITERATION_BUDGET in str(exc):
                # The runtime's fixed budget (10,000 loop iterations) is far below Kubernetes'
                # cost limit; the python engine, which charges Kubernetes-like costs, decides.
                return _OnPython("loop too long for the C++ runtime")
            if _DUPLICATE_KEY in str(exc):
                # cel-go keeps the last value of a repeated map key, where the C++ runtime fails.
                return _OnPython("repeated map key")
            if self._python_decides_errors or _PYTHON_DECIDES.search(str(exc)):
                return _OnPython("a value the C++ runtime cannot qualify or key")
            raise CelRuntimeError(runtime_text(str(exc)), self.expression) from None
        except (TypeError, ValueError) as exc:  # a device value the runtime cannot take
            raise CelRuntimeError(f"device value not representable in CEL: {exc}", self.expression) from None
        if result.type() == T.ERROR:
            message = str(result.value())
            if self._python_decides_errors or _PYTHON_DECIDES.search(message):
                return _OnPython("a value the C++ runtime cannot qualify or key")
            raise CelRuntimeError(runtime_text(message), self.expression)
        return result

    def _python(self, why: str) -> Any:
        """The python engine's program, where the C++ runtime cannot give Kubernetes' answer
        (``why``)."""
        if self._fallback is None:
            try:
                self._fallback = self._engine.python_program(self.expression, self._derived)
            except CelCompileError as exc:
                raise CelRuntimeError(f"{why}: {exc.message}", self.expression) from None
        return self._fallback

    def _eval(self, view: DeviceView) -> Any:
        # An activation only works on the thread that built it (cel-expr-python keeps its
        # arenas per thread), so each thread has its own; a thread id reused by a new thread
        # finds a stale one, which is rebuilt once.
        key = (self._engine, threading.get_ident())
        activation = view.engine_cache.get(key)
        if activation is not None:
            try:
                result = self._compiled.eval(activation)
            except RuntimeError as exc:
                if _FOREIGN_ARENA not in str(exc):
                    raise
            else:
                if result.type() != T.ERROR or _FOREIGN_ARENA not in str(result.value()):
                    return result
        activation = view.engine_cache[key] = self._engine.activation(view)
        return self._compiled.eval(activation)


class CppEngine:
    """Engine protocol implementation on cel-expr-python."""

    name = "cpp"

    def __init__(self) -> None:
        # Serializes every use of the C++ environment (compilation, activations, evaluation).
        self.lock = threading.RLock()
        self._python: Engine | None = None  # see _delegate
        # This engine's quantities as messages and back, shared with its library functions.
        self._quantities = QuantityMessages()
        self._env = cel.NewEnv(
            POOL,
            config=cel.NewEnvConfigFromYaml(CONFIG_YAML),
            variables={
                "device.driver": T.STRING,
                "device.attributes": T.Map(T.STRING, T.Map(T.STRING, T.DYN)),
                "device.capacity": T.Map(T.STRING, T.Map(T.STRING, QT)),
                "device.allowMultipleAllocations": T.BOOL,
            },
            extensions=[ext_bindings.ExtBindings(), ext_optional.ExtOptional()],
            functions=function_decls(self._quantities),
        )

    def compile(self, expression: str) -> Program:
        program: Program = self._compile_checked(expression, derived=False)
        return program

    def compile_derived(self, expression: str) -> DerivedProgram:
        """``expression`` as a derived attribute's (``runtime.derived``): run it with
        :meth:`CppProgram.derive`."""
        program: DerivedProgram = self._compile_checked(expression, derived=True)
        return program

    def _compile_checked(self, expression: str, derived: bool) -> Any:
        try:
            expression.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise CelCompileError(f"expression is not valid Unicode text: {exc.reason}", expression) from None
        with self.lock:
            return self._compile(expression, derived)

    def _result_type(self, expression: str, checked: Any, derived: bool) -> str:
        """The checked result type's spelling; raises CelCompileError where it may not be a
        selector's (bool or dyn) or, with ``derived``, a derived attribute's."""
        result = checked.return_type()
        spelling = _type_name(result)
        problem = (
            result_type_problem(spelling)
            if derived
            else None
            if result in (T.BOOL, T.DYN)
            else f"must evaluate to bool or the unknown type, not {spelling}"
        )
        if problem is not None:
            raise CelCompileError(problem, expression)
        return spelling

    def _compile(self, expression: str, derived: bool) -> Any:
        toks = original_toks = tokens(expression)
        if toks is None and _quotes_a_field(expression):
            return self._delegate(expression, derived)
        if toks is not None and (
            uses_format_library(toks)
            or later_optional_map_entry(toks)
            or _stale_bind_risk(toks)
            or odd_map_key(toks)
            or in_literal_planned_by_go(toks)
            or "NullValue" in (t.text for t in toks)  # the C++ checker also takes it as a type name
        ):
            return self._delegate(expression, derived)
        source = expression if toks is None else field_presence(expression, toks)
        if source != expression:
            toks = tokens(source)
        checked, source = self._check(expression, source, toks)
        static = self._result_type(expression, checked, derived)
        if toks is None:
            return CppProgram(self, expression, checked, static=static, derived=derived)
        optionals = may_hold_optionals(toks)
        if optionals and member_calls(toks) & _PYTHON_VALUE_FUNCTIONS:
            return self._delegate(expression, derived)
        if optionals and self._odd_optional_index(expression, toks):
            return self._delegate(expression, derived)
        lint(expression, toks)
        self._check_constant_indexes(expression, toks, derived)
        self._check_list_functions(expression, source, toks)
        self._check_constants(expression, original_toks or toks)  # the conversions before their aliases
        self._check_homogeneous(expression, toks)
        self._validate_literals(expression, checked)
        self._check_formats(expression, toks)
        if member_calls(toks) & _COSTLY_CALLS or any(t.text in _COSTLY_NAMESPACES for t in toks):
            return self._delegate(expression, derived)  # its cost can approach the limit: counted there
        source_toks = toks if source == expression else tokens(source)
        if source_toks is None:
            rewritten = source
        else:
            routed = self._value_relations(source, source_toks, strict=optionals)
            routed += self._container_relations(source, source_toks, routed)
            rewritten = rewrite(
                source,
                source_toks,
                routed,
                [
                    *go_string_edits(source_toks, self._static_type_of(source, source_toks)),
                    *go_number_edits(source_toks, self._static_type_of(source, source_toks)),
                    *(
                        optional_index_edits(source_toks, self._static_type_of(source, source_toks))
                        if optionals
                        else ()
                    ),
                    *self._library_equality_guards(source, source_toks, routed),
                ],
            )
        python_decides = optionals or _has_presence_test(toks)
        if rewritten != source:
            try:
                checked = self._env.compile(rewritten)
            except RuntimeError:
                rewritten = source  # not expected; it still runs, only without the rewrites
        aborts = UNHASHABLE in rewritten
        return CppProgram(self, expression, checked, python_decides, aborts, static, derived)

    def python_program(self, expression: str, derived: bool = False) -> Any:
        """The pure-Python engine's program for ``expression`` (see ``_delegate``)."""
        return self._delegate(expression, derived)

    def _delegate(self, expression: str, derived: bool = False) -> Any:
        """The pure-Python engine's program for ``expression``.

        The C++ runtime crashes the process (a segmentation fault) when an optional value
        reaches a Python function through a list(dyn) parameter, so expressions that can make
        optional values and call such a function are run by the pure-Python engine; so are
        those using Kubernetes' format library, whose functions return optional values, and
        those where an absent optional map entry may remove an earlier one.
        """
        if self._python is None:
            try:
                self._python = make_engine("python")
            except ImportError as exc:
                raise CelCompileError(
                    f"this expression needs the python engine, which cannot be loaded: {exc}", expression
                ) from None
        return self._python.compile_derived(expression) if derived else self._python.compile(expression)

    def _check(self, original: str, source: str, toks: list[Token] | None) -> tuple[Any, str]:
        """Type-check ``source`` (``original`` after same-length rewrites); returns the checked
        program and the source it was compiled from."""
        try:
            return self._env.compile(source), source
        except RuntimeError as exc:
            raw = str(exc)
        if toks is not None and _RECURSION_LIMIT.search(raw):
            for shallower in _shallower_sources(source, toks):
                try:
                    return self._env.compile(shallower), shallower
                except RuntimeError as exc:
                    if not _RECURSION_LIMIT.search(str(exc)):
                        # Shallow enough; this error is the real one (after regrouping a sum,
                        # positions after the first inserted parenthesis are shifted).
                        raw = str(exc)
                        break
        aliased = None if toks is None else alias_net_strings(source, toks, status_text(raw))
        if aliased is not None:
            try:
                return self._env.compile(aliased), aliased
            except RuntimeError as exc:
                source, toks, raw = aliased, tokens(aliased), str(exc)
        widened = None if toks is None else widen_numeric_comparisons(source, toks, status_text(raw))
        if widened is not None:
            try:
                return self._env.compile(widened), widened
            except RuntimeError:
                pass
        raise CelCompileError(compile_text(raw, toks), original)

    def _value_relations(self, source: str, toks: list[Token], strict: bool) -> list[tuple[int, int, int]]:
        """The ``==``, ``!=`` and ``in`` of ``source`` that may compare quantities.

        Quantity messages compare by key, which also carries the integer trait (see
        values.py); Kubernetes compares quantities by value alone, inside lists and maps
        too, so such relations are run by Python (equality.py). An equality qualifies when an
        operand is statically a quantity, a list of them or a map to them, or both are dyn;
        ``in`` when its list may hold quantities.
        """
        if not any(t.text in ("quantity", "capacity") for t in toks):
            return []
        # With ``strict`` (the expression can make optional values, which crash the runtime's
        # conversion to Python), only operands whose static type rules optionals out qualify.
        typed = {"quantity", "quantities", "quantity_map"}
        found = []
        for start, op, end in relation_operands(toks, VALUE_RELATIONS):
            if _is_literal(toks, start, op) or _is_literal(toks, op + 1, end):
                continue  # a scalar literal never equals a quantity (nor holds one)
            kinds = (
                self._operand_kind(source, toks, start, op),
                self._operand_kind(source, toks, op + 1, end),
            )
            if strict:
                qualifies = set(kinds) <= typed
            elif toks[op].text == "in":
                qualifies = kinds[1] == "quantities" or (kinds[0] == "quantity" and kinds[1] == "list")
            else:
                # Two dyn operands (or lists of dyn) may hold quantities as well.
                qualifies = bool({"quantity", "quantities", "quantity_map"} & set(kinds)) or (
                    kinds[0] == kinds[1] and kinds[0] in ("dyn", "list")
                )
            if qualifies:
                found.append((start, op, end))
        return found

    def _container_relations(
        self, source: str, toks: list[Token], routed: list[tuple[int, int, int]]
    ) -> list[tuple[int, int, int]]:
        """The ``==`` and ``!=`` between lists or maps that may hold library values (their static
        type names one, or dyn where the expression reads attributes or makes library values),
        not yet ``routed``:
        cel-go counts an element's "no such overload" as equal, the C++ runtime as unequal, so
        these run by Python (cpp_equality.go_equal)."""
        if not any(t.text in _LIBRARY_CONSTRUCTORS for t in toks):
            return []
        static_type = self._static_type_of(source, toks)
        found = []
        done = {op for _, op, _ in routed}
        for start, op, end in relation_operands(toks, _GUARDED_RELATIONS - {"in"}):
            if op in done or start >= op or op + 1 >= end:
                continue
            kinds = [static_type(start, op) or "", static_type(op + 1, end) or ""]
            holds_library = any(_LIBRARY_IN_CONTAINER.match(k) or _DYN_IN_CONTAINER.match(k) for k in kinds)
            if holds_library and not any("optional" in k for k in kinds):
                found.append((start, op, end))
        return found

    def _library_equality_guards(
        self, source: str, toks: list[Token], routed: list[tuple[int, int, int]]
    ) -> Iterator[Edit]:
        """Kubernetes' library values answer "no such overload" to ``==`` with a right
        operand of another type, a runtime error (``!=`` is then true); the C++ runtime answers
        false. A dyn left operand (a version attribute, say) compared with anything but a
        library value or null is guarded: ``[A].all(l, [B].all(r, type(l) in [...] &&
        type(r) != type(l) && type(r) != null_type ? k8sdra_no_such_overload() : l == r))``.
        Relations run by Python (``routed``) check this there."""
        routed_ops = {op for _, op, _ in routed}
        static_type = self._static_type_of(source, toks)
        for n, (start, op, end) in enumerate(relation_operands(toks, _GUARDED_RELATIONS)):
            if op in routed_ops or start >= op or op + 1 >= end or _is_literal(toks, start, op):
                continue
            left_type = static_type(start, op)
            if left_type in _LIBRARY_TYPE_NAMES and toks[op].text != "in":
                # A library value against a dyn operand (the checker admits it): guarded too.
                if static_type(op + 1, end) not in ("dyn", None):
                    continue
            elif left_type not in ("dyn", None):  # None: bound names, loop variables
                continue
            left, right = f"k8sdra_l{n}", f"k8sdra_r{n}"
            if toks[op].text == "in":
                # cel-go's list membership ignores an element's "no such overload" (false), but
                # a constant list of scalars becomes a Go set, and hashing a version or bytes
                # there fails (interpreter/decorators.go maybeOptimizeSetMembership).
                if not _constant_scalar_list(toks, op + 1, end):
                    continue
                unhashable = f"type({left}) in [kubernetes.Semver, bytes]"
                guard = f"{unhashable} ? {UNHASHABLE}([{left}]) : {left} in {right}"
                yield from _bind_edits(toks, start, op, end, left, right, guard)
                continue
            right_literal = _is_literal(toks, op + 1, end)
            if right_literal and toks[op + 1].text == "null":
                continue
            if not right_literal and static_type(op + 1, end) in _LIBRARY_TYPE_NAMES:
                continue
            # cel-go's != is "Equal is not true": the "no such overload" of == makes it true.
            mismatch = "k8sdra_no_such_overload()" if toks[op].text == "==" else "true"
            guard = (
                f"type({left}) in [{', '.join(_LIBRARY_TYPE_NAMES)}] && type({right}) != type({left})"
                f" && type({right}) != null_type ? {mismatch} : {left} {toks[op].text} {right}"
            )
            yield from _bind_edits(toks, start, op, end, left, right, guard)

    def _operand_kind(self, source: str, toks: list[Token], a: int, b: int) -> str | None:
        """``quantity``, ``quantities`` (a list of them), ``quantity_map`` (a map to them), ``dyn``,
        ``list`` (of dyn), or None."""
        if a >= b:
            return None
        head, text, tail = (
            source[: toks[a].start],
            source[toks[a].start : toks[b - 1].end],
            source[toks[b - 1].end :],
        )

        def accepts(probe: str) -> bool:
            try:
                self._env.compile(f"{head}{probe}({text}){tail}")
            except RuntimeError:
                return False
            return True

        if accepts("k8sdra_quantity_probe"):
            return "dyn" if accepts("k8sdra_int_probe") else "quantity"
        if accepts("k8sdra_quantities_probe"):
            return "list" if accepts("k8sdra_ints_probe") else "quantities"
        if accepts("k8sdra_quantity_map_probe") and not accepts("k8sdra_int_map_probe"):
            return "quantity_map"
        return None

    def _check_homogeneous(self, expression: str, toks: list[Token]) -> None:
        variant = homogeneity_variant(expression, toks)
        if variant is None:
            return
        mismatch = self._mixed_literal(variant)
        if mismatch is None:
            return
        where: Token | None = None
        for tok, probe in itertools.islice(homogeneity_probes(expression, toks), MAX_LOCATING_PROBES):
            located = self._mixed_literal(probe)
            if located is not None:
                where, mismatch = tok, located
                break
        line, col = position(expression, where.start) if where else (1, 1)
        raise CelCompileError(
            f"ERROR: <input>:{line}:{col}: expected type '{mismatch[0]}' but found '{mismatch[1]}'",
            expression,
        )

    def _validate_literals(self, expression: str, checked: Any) -> None:
        """Kubernetes' homogeneous-literal validator, after checking (see literals.py)."""
        found = literal_mismatches(checked.serialize(), FORMAT_CALLS)
        if found:
            first = found[0]
            line, col = position(expression, first.offset)
            raise CelCompileError(
                f"ERROR: <input>:{line}:{col}: expected type '{first.expected}' but found '{first.found}'",
                expression,
            )

    def _mixed_literal(self, probe: str) -> tuple[str, str] | None:
        """The two element types a probe's checking found different, if it did."""
        try:
            self._env.compile(probe)
        except RuntimeError as exc:
            m = MIXED_LISTS.search(str(exc))
            if m is not None:
                return m.group(1), m.group(2)
        return None

    def _check_constants(self, expression: str, toks: list[Token]) -> None:
        """What cel-go settles while building the program: conversions of a literal and
        literal regular expressions; their failure is a compile error."""
        for tok, call, arg in literal_conversions(toks, GLOBAL_ALIASES):
            detail = self._constant_error(call)
            detail = None if detail is None else runtime_text(detail)
            if detail is None and tok.text in GO_NUMBER_SYNTAX and arg.kind == "str":
                # Go's strconv is stricter than the C++ runtime (no blanks; no sign for uint).
                text = self._env.compile(arg.text).eval().value()
                if not GO_NUMBER_SYNTAX[tok.text].fullmatch(text):
                    detail = f"cannot convert string to {tok.text}"
            if detail is None and tok.text in GO_TIME_PARSERS and arg.kind == "str":
                # Go's time parsing is stricter (a duration fits int64 nanoseconds, about
                # 292 years; the C++ runtime allows 10,000).
                try:
                    GO_TIME_PARSERS[tok.text](self._env.compile(arg.text).eval().value())
                except EvalError as exc:
                    detail = str(exc)
            if detail is not None:
                line, col = position(expression, tok.start)
                raise CelCompileError(f"ERROR: <input>:{line}:{col}: {detail}", expression)
        for tok in toks:
            if _is_float_literal(tok) and math.isinf(float(tok.text)):
                # Go's ParseFloat reports the overflow, so cel-go rejects the literal.
                line, col = position(expression, tok.start)
                raise CelCompileError(f"ERROR: <input>:{line}:{col}: invalid double literal", expression)
        for pattern in literal_patterns(toks):
            detail = self._constant_error(f'"".matches({pattern.text})')
            if detail is not None:
                line, col = position(expression, pattern.start)
                raise CelCompileError(f"ERROR: <input>:{line}:{col}: {detail}", expression)

    def _odd_optional_index(self, expression: str, toks: list[Token]) -> bool:
        """Whether some optional index ``x[?k]`` has a ``k`` that may be neither a string, a
        number nor a bool: cel-go fails to qualify by it (a runtime error), where the C++
        runtime finds nothing. A literal index is fine; any other is typed alone, and one that
        cannot be (a loop variable, a bound name) counts as odd."""
        for i, tok in enumerate(toks):
            if tok.text != "[" or texts(toks, i + 1, 1) != ("?",):
                continue
            close = closing(toks, i)
            if close is None or close <= i + 2:
                return True
            if close == i + 3 and toks[i + 2].kind in ("str", "num") and not is_bytes_literal(toks[i + 2]):
                continue
            if self._static_type(expression[toks[i + 2].start : toks[close - 1].end]) not in _QUALIFIER_TYPES:
                return True
        return False

    def _check_constant_indexes(self, expression: str, toks: list[Token], derived: bool) -> None:
        """cel-go's planner fails on a constant index that is not a string, number or bool
        (``m[b'a']``, ``m[dyn(null)]``: interpreter/attributes.go, NewQualifier), a compile
        error. The python engine's compiler, which plans constants as cel-go does, decides; it
        is asked only when an index holds something that may fold to such a constant."""
        if not _may_index_by_odd_constant(toks):
            return
        try:
            self._delegate(expression, derived)
        except CelCompileError as exc:
            if _INVALID_QUALIFIER in exc.message:
                raise CelCompileError(exc.message, expression) from None

    def _check_list_functions(self, expression: str, source: str, toks: list[Token]) -> None:
        """cel-go rejects ``["a"].sum()`` and ``[[1]].min()`` (see LIST_FUNCTION_PROBES)."""
        if not member_calls(toks) & LIST_FUNCTION_PROBES.keys():
            return
        source_toks = toks if source == expression else tokens(source)
        if source_toks is None:
            return
        probe = source
        for i, tok in enumerate(source_toks):
            alias = LIST_FUNCTION_PROBES.get(tok.text)
            if (
                alias is not None
                and i > 0
                and source_toks[i - 1].text == "."
                and texts(source_toks, i + 1, 1) == ("(",)
            ):
                probe = probe[: tok.start] + alias + probe[tok.end :]
        try:
            self._env.compile(probe)
        except RuntimeError as exc:
            raise CelCompileError(compile_text(str(exc), toks), expression) from None

    def _check_formats(self, expression: str, toks: list[Token]) -> None:
        for tok, problem in literal_format_problems(toks, self._static_type, self._constant):
            line, col = position(expression, tok.start)
            raise CelCompileError(f"ERROR: <input>:{line}:{col}: {problem}", expression)

    def _static_type_of(self, source: str, toks: list[Token]) -> Callable[[int, int], str | None]:
        """The static type of ``toks[a:b]`` standing alone (see _static_type)."""
        return lambda a, b: self._static_type(source[toks[a].start : toks[b - 1].end])

    def _static_type(self, source: str) -> str | None:
        try:
            return _type_name(self._env.compile(source).return_type())
        except RuntimeError:
            return None

    def _constant(self, literal: str) -> Any:
        return self._env.compile(literal).eval().value()

    def _constant_error(self, source: str) -> str | None:
        """The error evaluating a constant expression gives, if any."""
        try:
            result = self._env.compile(source).eval()
        except RuntimeError as exc:
            return status_text(str(exc))
        return status_text(str(result.value())) if result.type() == T.ERROR else None

    def activation(self, view: DeviceView) -> Any:
        return self._env.Activation(
            {
                "device.driver": view.driver,
                "device.attributes": {
                    domain: {name: to_cel(value) for name, value in values.items()}
                    for domain, values in view.attributes.items()
                },
                "device.capacity": {
                    domain: {name: self._quantities.message(q) for name, q in values.items()}
                    for domain, values in view.capacity.items()
                },
                "device.allowMultipleAllocations": bool(view.allow_multiple_allocations),
            }
        )


def make() -> CppEngine:
    return CppEngine()
