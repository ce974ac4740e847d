"""loadgen uses only aiohttp's public API (issue 21): an aiohttp upgrade cannot break it.

The aiohttp streams client, the one user of aiohttp's internals (its ResponseHandler,
TCPConnector._factory, a response's _payload), is bench/'s comparison now. This walks
every module under loadgen/ (AST, not a regex over text) and fails on: an import of an
aiohttp module outside the public ones, a private aiohttp name imported or reached as
`aiohttp.x._y`, and, in a class deriving from an aiohttp class, a private attribute that
aiohttp itself defines on that base.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
from pathlib import Path

import loadgen

PUBLIC_MODULES = {"aiohttp", "aiohttp.web", "aiohttp.typedefs"}
ROOT = Path(loadgen.__file__).parent


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _member(module: str, name: str) -> object:
    """What `from module import name` binds: an attribute, else a submodule."""
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        return importlib.import_module(f"{module}.{name}")


def _aiohttp_names(tree: ast.Module) -> dict[str, object]:
    """The local names bound to aiohttp objects (`import aiohttp`, `from aiohttp import web`)."""
    names: dict[str, object] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "aiohttp":
                    # `import aiohttp.x as y` binds y to aiohttp.x; `import aiohttp.x`, aiohttp
                    module = a.name if a.asname else "aiohttp"
                    names[a.asname or "aiohttp"] = importlib.import_module(module)
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "aiohttp":
            module = node.module or "aiohttp"
            names |= {a.asname or a.name: _member(module, a.name) for a in node.names}
    return names


def _base_privates(node: ast.ClassDef, bound: dict[str, object]) -> set[str]:
    """The private attributes aiohttp defines on the aiohttp bases of `node`."""
    privates: set[str] = set()
    for base in node.bases:
        head, *rest = ast.unparse(base).split(".")
        if head not in bound:
            continue
        owner = bound[head]
        for part in rest:
            owner = getattr(owner, part)
        for cls in inspect.getmro(owner) if isinstance(owner, type) else ():
            if cls.__module__.startswith("aiohttp"):
                privates |= {n for n in (*vars(cls), *getattr(cls, "__slots__", ())) if _private(n)}
                # instance attributes its methods set (`self._factory = ...` in __init__)
                privates |= set(re.findall(r"self\.(_[a-z]\w*)", inspect.getsource(cls)))
    return privates


def offences(source: str) -> list[str]:
    tree = ast.parse(source)
    bound = _aiohttp_names(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [
                f"import {a.name}"
                for a in node.names
                if a.name.startswith("aiohttp.") and a.name not in PUBLIC_MODULES
            ]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith("aiohttp"):
            if node.module not in PUBLIC_MODULES:
                found.append(f"from {node.module} import")
            found += [f"{node.module}.{a.name}" for a in node.names if _private(a.name)]
        elif isinstance(node, ast.Attribute) and _private(node.attr):
            if ast.unparse(node).split(".")[0] in bound:
                found.append(ast.unparse(node))
        elif isinstance(node, ast.ClassDef):
            privates = _base_privates(node, bound)
            for inner in ast.walk(node):
                if isinstance(inner, ast.Attribute) and inner.attr in privates:
                    found.append(f"{node.name}: {ast.unparse(inner)} (aiohttp's own)")
    return found


def test_the_check_catches_what_the_comparison_client_did() -> None:
    """The check fails on the very uses bench/aiohttp_client.py makes (so it can fail)."""
    bench = (ROOT.parent / "bench" / "aiohttp_client.py").read_text()
    caught = offences(bench)
    assert "from aiohttp.client_proto import" in caught
    assert any("self._factory" in line for line in caught)
    sample = (
        "from aiohttp import web\n"
        "class Site(web.BaseSite):\n"
        "    def start(self):\n"
        "        return self._runner\n"
        "x = web._private_thing\n"
    )
    assert offences(sample) == ["Site: self._runner (aiohttp's own)", "web._private_thing"]


def test_loadgen_uses_only_aiohttp_public_api() -> None:
    found = {
        str(path.relative_to(ROOT)): lines
        for path in sorted(ROOT.rglob("*.py"))
        if (lines := offences(path.read_text()))
    }
    assert found == {}


def test_aiohttp_has_no_upper_pin() -> None:
    """`pip install loadgen` must never downgrade a newer aiohttp (the upgrade test builds
    a venv to prove it; this says why it can hold)."""
    import tomllib

    project = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["project"]
    (aiohttp_req,) = [d for d in project["dependencies"] if d.split(">")[0].strip() == "aiohttp"]
    assert "<" not in aiohttp_req and "==" not in aiohttp_req and "~=" not in aiohttp_req
