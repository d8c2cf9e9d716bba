"""What the code's comments and docstrings name exists: a module moved or renamed leaves no
pointer to where it used to be.

Checked in every comment and string of extender/: file paths ending in ``.py`` (from the
repository, from extender/, or from the folder of the file or one above it) and dotted names
under ``extender.`` (a module, or a name defined in one; logger names are not modules). Also
the modules pyproject.toml's mypy sections name.
"""

from __future__ import annotations

import importlib
import io
import re
import tokenize
import tomllib
from pathlib import Path
from types import ModuleType

REPO = Path(__file__).resolve().parents[1]
EXTENDER = REPO / "extender"

_PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)\b")
_DOTTED = re.compile(r"(?<![\w.-])(extender(?:\.\w+)+)")
_LOGGER = re.compile(r"getLogger\(\"([\w.]+)\"\)")


def _texts(path: Path) -> list[tuple[int, str]]:
    """The comments and string literals of a module, with their line."""
    tokens = tokenize.generate_tokens(io.StringIO(path.read_text()).readline)
    return [(t.start[0], t.string) for t in tokens if t.type in (tokenize.COMMENT, tokenize.STRING)]


def path_exists(ref: str, where: Path) -> bool:
    """Whether ``ref`` names a file from the repository, from extender/, or from the folder of
    ``where`` or a folder above it within extender/; a bare file name, from anywhere in extender/."""
    bases = [REPO, EXTENDER, *(d for d in where.parents if d == EXTENDER or EXTENDER in d.parents)]
    if any((base / ref).exists() for base in bases):
        return True
    return "/" not in ref and any(EXTENDER.rglob(ref))


def dotted_exists(ref: str, loggers: set[str]) -> bool:
    """Whether ``ref`` is a module of extender or a name defined in one, or a logger's name."""
    if ref in loggers:
        return True
    parts = ref.split(".")
    for end in range(len(parts), 0, -1):
        try:
            found: ModuleType | object = importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        for name in parts[end:]:
            if not hasattr(found, name):
                return False
            found = getattr(found, name)
        return True
    return False


def dangling(path: Path, loggers: set[str]) -> list[str]:
    out = []
    for line, text in _texts(path):
        for match in _PATH.finditer(text):
            if not path_exists(match.group(1), path):
                out.append(f"{path.relative_to(REPO)}:{line}: {match.group(1)}")
        for match in _DOTTED.finditer(text):
            if not dotted_exists(match.group(1), loggers):
                out.append(f"{path.relative_to(REPO)}:{line}: {match.group(1)}")
    return out


def test_comments_and_docstrings_name_modules_that_exist() -> None:
    sources = sorted(EXTENDER.rglob("*.py"))
    loggers = {name for path in sources for name in _LOGGER.findall(path.read_text())}
    assert [ref for path in sources for ref in dangling(path, loggers)] == []


def test_mypy_sections_name_modules_that_exist() -> None:
    mypy = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    named = [m for section in mypy.get("overrides", []) for m in _list(section["module"])]
    ours = [m for m in named if m.startswith("extender")]
    assert ours
    missing = [m for m in ours if not dotted_exists(m.removesuffix(".*"), set())]
    assert missing == []


def _list(value: str | list[str]) -> list[str]:
    return [value] if isinstance(value, str) else value


def test_a_dangling_reference_is_found(tmp_path: Path) -> None:
    sample = EXTENDER / "cel" / "_references_sample.py"
    try:
        sample.write_text(
            '"""See ``cel/python/engine.py``, cpp/values.py and extender.cel.environment.Environment;\n'
            'not cel/gone.py, extender.cel.gone or extender.cel.environment.Gone."""\n'
            "# nor python/old_library.py\n"
        )
        assert [ref.split(": ")[1] for ref in dangling(sample, set())] == [
            "cel/gone.py", "extender.cel.gone", "extender.cel.environment.Gone", "python/old_library.py",
        ]
    finally:
        sample.unlink()
