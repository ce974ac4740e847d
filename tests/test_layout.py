"""tests/ is laid out like the packages it tests: a test file sits in the folder of the
package whose module it tests (tests/run/ for loadgen/run/, tests/client/native/ for
loadgen/client/native/, tests/encoders/ for encoders/), a test of one of loadgen's
top-level modules sits at the top (tests/test_tokenizer*.py for loadgen/tokenizer.py),
and helpers that several test files share live in tests/support/, never in a test file
another one imports.

The folders that mirror no package: integration (real vLLM and Dynamo end to end),
container (loadgen's image), scripts (the repository's scripts/), support and fixtures
(no tests)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
LOADGEN, ENCODERS = ROOT / "loadgen", ROOT / "encoders"
KEPT = {"integration", "container", "scripts", "support", "fixtures"}
# Top-level test files about the suite itself rather than a module of loadgen.
SUITE = {"test_layout.py", "test_suite_parallel.py"}


def all_test_files() -> list[Path]:
    return sorted(
        path for path in TESTS.rglob("test_*.py") if path.relative_to(TESTS).parts[0] != "fixtures"
    )


def mirrors_a_package(folder: tuple[str, ...]) -> bool:
    """tests/<a>/<b>/ mirrors loadgen/<a>/<b>/, and tests/encoders/<b>/ encoders/<b>/."""
    base, rest = (ENCODERS, folder[1:]) if folder[0] == ENCODERS.name else (LOADGEN, folder)
    return (base.joinpath(*rest) / "__init__.py").is_file()


def misplaced(path: Path) -> str | None:
    *folder, name = path.relative_to(TESTS).parts
    if not folder:
        modules = {p.stem for p in LOADGEN.glob("*.py") if p.stem != "__init__"}
        stem = name.removeprefix("test_").removesuffix(".py")
        if name in SUITE or any(stem == m or stem.startswith(m + "_") for m in modules):
            return None
        return f"{name} names no top-level module of loadgen ({', '.join(sorted(modules))})"
    if folder[0] in KEPT or mirrors_a_package(tuple(folder)):
        return None
    return f"tests/{'/'.join(folder)}/ mirrors no package of loadgen or encoders"


def test_every_test_file_is_in_the_folder_of_a_package() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}: {why}" for path in all_test_files() if (why := misplaced(path))
    ]
    assert not wrong, "\n".join(wrong)


def test_every_folder_of_tests_is_a_package_that_mirrors_one() -> None:
    """A folder holds an __init__.py (test modules are imported by their package name, so
    two files of one name in two folders do not collide) and is one the check allows:
    an empty leftover folder is caught too."""
    wrong = []
    for folder in sorted(p for p in TESTS.rglob("*") if p.is_dir()):
        parts = folder.relative_to(TESTS).parts
        if parts[0] == "fixtures" or "__pycache__" in parts:
            continue
        if not (folder / "__init__.py").is_file():
            wrong.append(f"tests/{'/'.join(parts)}/ has no __init__.py")
        elif parts[0] not in KEPT and not mirrors_a_package(parts):
            wrong.append(f"tests/{'/'.join(parts)}/ mirrors no package of loadgen or encoders")
    assert not wrong, "\n".join(wrong)


def test_no_test_file_imports_another() -> None:
    """Shared helpers are in tests/support/ (or a folder's conftest.py): a test file that
    imports another runs that file's module-level code, and moves break it."""
    wrong = []
    for path in [*all_test_files(), *TESTS.rglob("conftest.py")]:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            elif isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                continue
            wrong += [
                f"{path.relative_to(ROOT)}:{node.lineno} imports {name}"
                for name in names
                if name.startswith("tests.") and not name.startswith("tests.support")
            ]
    assert not wrong, "\n".join(wrong)


def test_the_check_tells_a_misplaced_file_from_a_placed_one() -> None:
    assert misplaced(TESTS / "run" / "test_x.py") is None
    assert misplaced(TESTS / "client" / "native" / "test_x.py") is None
    assert misplaced(TESTS / "encoders" / "test_x.py") is None
    assert misplaced(TESTS / "integration" / "test_x.py") is None
    assert misplaced(TESTS / "test_tokenizer_hub_backoff.py") is None
    assert misplaced(TESTS / "test_layout.py") is None
    assert misplaced(TESTS / "persist" / "test_x.py") is not None
    assert misplaced(TESTS / "run" / "nowhere" / "test_x.py") is not None
    assert misplaced(TESTS / "test_encoders" / "test_x.py") is not None
    assert misplaced(TESTS / "test_front_door.py") is not None
