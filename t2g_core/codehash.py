"""The code a module runs, as one hash: cache keys that notice code changes without a hand-bumped version.

``code_digest("tasks.ppo")`` hashes the module and every first-party module it imports, at any depth and wherever
the import statement sits (top level or inside a function: heavy imports are lazy in this code base). Each module
contributes its syntax tree with docstrings removed (``ast.dump`` carries no comments, line numbers or formatting),
so editing a comment, a docstring or the layout changes nothing, while changing any statement or constant changes
the digest. A package in the closure also contributes the data files that live in it (prompt templates), because
code reads them. Modules are found on ``sys.path`` as the interpreter would find them, without importing them.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import sys
from functools import cache
from pathlib import Path

FIRST_PARTY = ("t2g_core", "tasks", "flows", "t2g_mlflow", "t2g_env")  # the packages a stage task runs
DATA_SUFFIXES = (".txt", ".json", ".yaml", ".yml", ".jinja", ".j2")


def _is_first_party(module: str) -> bool:
    return module.split(".", 1)[0] in FIRST_PARTY


@cache
def _package_root(top: str) -> Path | None:
    """The folder of a top-level first-party package (found without importing it)."""
    for entry in sys.path:
        folder = Path(entry or ".") / top
        if (folder / "__init__.py").is_file():
            return folder.resolve()
    spec = importlib.util.find_spec(top)  # e.g. an editable install's finder
    return Path(spec.origin).parent if spec and spec.origin else None


@cache
def _source_file(module: str) -> Path | None:
    """The ``.py`` file of ``module`` (a package's ``__init__.py``), or None when it is not a source module."""
    top, *rest = module.split(".")
    root = _package_root(top)
    if root is None:
        return None
    base = root.joinpath(*rest)
    for candidate in (base / "__init__.py", base.with_suffix(".py")):
        if candidate.is_file():
            return candidate
    return None


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant):
                if isinstance(body[0].value.value, str):
                    node.body = body[1:] or [ast.Pass()]
    return tree


def _imports(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """First-party modules named by the import statements of ``module`` (``from pkg import sub`` counts ``pkg.sub``)."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    with_parents = {".".join(name.split(".")[: i + 1]) for name in found for i in range(name.count(".") + 1)}
    return {name for name in with_parents if _is_first_party(name) and _source_file(name) is not None}


@cache
def _module_summary(module: str) -> tuple[str, frozenset[str]]:
    """(digest of the module's docstring-free syntax tree and package data, first-party modules it imports)."""
    path = _source_file(module)
    if path is None:
        raise ModuleNotFoundError(f"no source for module {module!r} on sys.path")
    tree = _strip_docstrings(ast.parse(path.read_text(encoding="utf-8"), filename=str(path)))
    h = hashlib.sha256(ast.dump(tree).encode())
    is_package = path.name == "__init__.py"
    if is_package:
        for data in sorted(_package_data(path.parent)):
            h.update(str(data.relative_to(path.parent)).encode())
            h.update(data.read_bytes())
    return h.hexdigest(), frozenset(_imports(tree, module, is_package))


def _package_data(folder: Path) -> list[Path]:
    """Data files of a package: in its folder and in sub-folders that are not packages themselves."""
    out = [p for p in folder.iterdir() if p.is_file() and p.suffix in DATA_SUFFIXES]
    for sub in folder.iterdir():
        if sub.is_dir() and not (sub / "__init__.py").exists() and sub.name != "__pycache__":
            out += [p for p in sub.rglob("*") if p.is_file() and p.suffix in DATA_SUFFIXES]
    return out


def module_closure(module: str) -> list[str]:
    """``module`` and every first-party module it imports, directly or not, sorted."""
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        todo.extend(_module_summary(name)[1] - seen)
    return sorted(seen)


@cache
def code_digest(module: str) -> str:
    """sha256 over the closure of ``module``: (name, digest) of each module it runs."""
    h = hashlib.sha256()
    for name in module_closure(module):
        h.update(f"{name}={_module_summary(name)[0]};".encode())
    return h.hexdigest()


def function_digest(fn) -> str:
    """The code digest of the module defining ``fn`` (first-party), else of ``fn``'s own source (a test's task)."""
    module = getattr(fn, "__module__", "")
    if _is_first_party(module) and _source_file(module) is not None:
        return code_digest(module)
    import inspect

    try:
        return hashlib.sha256(inspect.getsource(fn).encode()).hexdigest()
    except (OSError, TypeError):
        return f"unhashable:{module}.{getattr(fn, '__qualname__', fn)}"


def clear_cache() -> None:
    """Forget computed digests (a long-lived process whose source files changed)."""
    for fn in (_package_root, _source_file, _module_summary, code_digest):
        fn.cache_clear()
