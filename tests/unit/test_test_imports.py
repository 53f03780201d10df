"""No module under tests/ imports a test module (test_*.py): what tests share lives in helper
modules (tests/builders, tests/fakes, and the helpers beside the tests that use them), so that
running, moving or deleting one test module never changes what another one runs."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def imported(path: Path, source: str) -> Iterator[tuple[int, str]]:
    """(line, module) for each module the source of `path` imports, relative imports resolved against its
    package; `from package import name` yields package.name too, as name may be a module."""
    package = list(path.relative_to(TESTS.parent).parent.parts)
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            yield node.lineno, module
            for alias in node.names:
                yield node.lineno, f"{module}.{alias.name}"


def is_test_module(module: str) -> bool:
    return module.split(".")[0] == "tests" and module.rsplit(".", 1)[-1].startswith("test_")


def test_no_module_under_tests_imports_a_test_module() -> None:
    found = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imported(path, path.read_text())
        if is_test_module(module)
    ]
    assert not found, "move what they share into a helper module (not test_*):\n" + "\n".join(found)


def test_the_check_resolves_relative_imports() -> None:
    """The rule itself: a relative import of a test module is one, a helper's is not."""
    here = TESTS / "unit" / "cache" / "test_x.py"
    source = "from .test_store import Clock\nfrom .. import test_y\nfrom . import helper\n"
    modules = [m for _, m in imported(here, source)]
    assert [m for m in modules if is_test_module(m)] == [
        "tests.unit.cache.test_store",
        "tests.unit.test_y",
    ]
