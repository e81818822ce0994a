"""The layers, as imports: who may import whom.

- One entry point per stage: only ``t2g_core.stages`` loads a stage's inputs and calls the library for its work. The
  Prefect tasks (``tasks/``) and the CLI commands (``t2g_cli/``) wrap those functions. Before, both layers called the
  library themselves and had drifted apart (the CLI's reward-model data builder got the align settings, the task's
  did not); a wrapper that imports one of the stage-work functions below is that drift starting again.
- Inside ``t2g_core`` imports run one way: the stages on top, the library packages below them, ``config`` and ``rl``
  at the ground, and no two packages importing each other.
- Around it: ``t2g_cli`` -> ``flows`` -> ``tasks`` -> the adapters ``t2g_mlflow`` and ``t2g_env`` -> ``t2g_core``,
  never back up (the CLI imports no task; ``t2g_mlflow`` may read ``t2g_env``); only ``t2g_mlflow`` imports mlflow.

Imports count wherever they sit (inside functions too: heavy imports are lazy in this code base).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ROOT / "t2g_core"
# what each package outside the library may import of the project's own packages (besides itself)
MAY_IMPORT = {
    "deployments": {"t2g_cli", "flows", "t2g_core"},
    "t2g_cli": {"flows", "t2g_mlflow", "t2g_env", "t2g_core"},  # never a task: it calls the stage functions
    "flows": {"tasks", "t2g_mlflow", "t2g_env", "t2g_core"},
    "tasks": {"t2g_mlflow", "t2g_env", "t2g_core"},
    "t2g_mlflow": {"t2g_env", "t2g_core"},  # t2g_env: where this machine keeps the migrated databases
    "t2g_env": {"t2g_core"},
}
FIRST_PARTY = {*MAY_IMPORT, "t2g_core", "benchmarks"}
NOT_SOURCE = ("tests", ".venv", "t2g-workspace")
STAGE_WORK = {
    "t2g_core.spans": {"align_frame"},
    "t2g_core.annotators": {"annotate"},
    "t2g_core.reward_model.data": {"build_rm_data"},
    "t2g_core.reward_model.train": {"train_rm"},
    "t2g_core.reward_model.evaluate": {"evaluate_model", "write_eval_report"},
    "t2g_core.reward_model.tagger_train": {"fit_tagger"},
    "t2g_core.ppo.run": {"prepare_run", "run_from_dir"},
    "t2g_core.ppo": {"train"},
    "t2g_core.evaluation": {"evaluate_policies"},
    "t2g_core.evaluation.results": {"evaluate_policies"},
    "t2g_core.models.tiny": {"ensure_demo_models"},
    "t2g_core.warmup": {"train_warmup", "warmup_pairs"},
    "t2g_core.validation": {"check_batch", "review_sample", "make_batch", "write_report", "with_review"},
    "t2g_core.demo": {"make_demo_feedback"},
    "t2g_core.ingest": {"ingest"},
}


def _imports(path: Path) -> list[tuple[str, str, int]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [
        (node.module or "", alias.name, node.lineno)
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def _modules_imported(path: Path) -> set[str]:
    """Every module an ``import`` or ``from ... import`` in ``path`` names, at any depth of the file."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
    return found


def _source_files(root: Path = ROOT) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if p.relative_to(root).parts[0] not in NOT_SOURCE)


def _core_package(module: str) -> str:
    """``t2g_core.ppo.trainer`` -> ``t2g_core.ppo``; a top-level module (``t2g_core.spans``) is its own package."""
    return ".".join(module.split(".")[:2])


def core_graph() -> dict[str, set[str]]:
    """Each package of t2g_core -> the other t2g_core packages its files import."""
    graph: dict[str, set[str]] = {}
    for path in CORE.rglob("*.py"):
        rel = path.relative_to(ROOT).with_suffix("")
        if rel.parts[-1] == "__init__" and len(rel.parts) == 2:
            continue  # t2g_core/__init__.py
        package = _core_package(".".join(rel.parts))
        imported = {_core_package(m) for m in _modules_imported(path) if m.startswith("t2g_core.")}
        graph.setdefault(package, set()).update(imported - {package})
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import loop of ``graph`` (a list of packages), or [] when it has none."""
    state: dict[str, str] = {}

    def visit(node: str, path: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*path[path.index(nxt) :], nxt] if nxt in path else [node, nxt]
            if nxt not in state and (loop := visit(nxt, [*path, nxt])):
                return loop
        state[node] = "done"
        return []

    for start in sorted(graph):
        if start not in state and (loop := visit(start, [start])):
            return loop
    return []


def test_core_imports_run_one_way_down_from_the_stages():
    graph = core_graph()
    assert "t2g_core.ppo" in graph and "t2g_core.stages" in graph  # the walk found the packages
    up = sorted(f"{p} imports t2g_core.stages" for p, deps in graph.items() if "t2g_core.stages" in deps)
    assert up == [], "only the adapters outside t2g_core call the stages (the settings live in t2g_core.config)"
    # the ground floor: config imports nothing; rl's math may read config's plain values (the Sampling dataclass)
    for ground, allowed in (("t2g_core.config", set()), ("t2g_core.rl", {"t2g_core.config"})):
        assert graph[ground] <= allowed, f"{ground} imports {sorted(graph[ground] - allowed)}"
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_a_loop_is_found():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []


def layer_offenders(root: Path) -> list[str]:
    """Imports of a project package that ``MAY_IMPORT`` does not allow, in the source files under ``root``."""
    offenders = []
    for path in _source_files(root):
        own = path.relative_to(root).parts[0]
        for module in sorted(_modules_imported(path)):
            top = module.split(".")[0]
            if own in MAY_IMPORT and top in FIRST_PARTY and top != own and top not in MAY_IMPORT[own]:
                offenders.append(f"{path.relative_to(root)} imports {module}")
    return offenders


def test_the_layers_around_the_library_import_only_downwards():
    """t2g_cli -> flows -> tasks -> t2g_mlflow, t2g_env -> t2g_core; the CLI imports no task (it calls the stage
    functions, and the adapters for MLflow and API keys)."""
    assert layer_offenders(ROOT) == []


def test_a_cli_that_imports_a_task_is_caught(tmp_path):
    (tmp_path / "t2g_cli").mkdir()
    (tmp_path / "t2g_cli" / "eval.py").write_text("def f():\n    from tasks.evaluate import x\n")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "ppo.py").write_text("import flows.stages\nfrom t2g_mlflow import registry\n")
    assert layer_offenders(tmp_path) == [
        "t2g_cli/eval.py imports tasks.evaluate",
        "tasks/ppo.py imports flows.stages",
    ]


def test_only_the_mlflow_adapter_imports_mlflow():
    offenders = [
        f"{path.relative_to(ROOT)} imports {m}"
        for path in _source_files()
        if path.relative_to(ROOT).parts[0] != "t2g_mlflow"
        for m in sorted(_modules_imported(path))
        if m.split(".")[0] == "mlflow"
    ]
    assert offenders == [], "go through t2g_mlflow:\n" + "\n".join(offenders)


def test_wrappers_call_stage_functions_not_the_library():
    offenders = [
        f"{path.relative_to(ROOT)}:{line} imports {module}.{name}"
        for folder in ("tasks", "t2g_cli", "flows")
        for path in sorted((ROOT / folder).glob("*.py"))
        for module, name, line in _imports(path)
        if name in STAGE_WORK.get(module, ())
    ]
    assert offenders == [], "call the t2g_core.stages function instead:\n" + "\n".join(offenders)


# tests/core and tests/stages test the library alone: no command line, Prefect or MLflow (tests/cli, tests/tasks...)
NOT_IN_CORE_TESTS = {"t2g_cli", "typer", "prefect", "mlflow", "t2g_mlflow", "tasks", "flows"}
T2G_COMMAND = {"t2g", "t2g_cli"}  # the console script, or ``python -m t2g_cli``, run as a subprocess


def core_test_offenders(folder: Path, rules: Path | None = None) -> list[str]:
    """Files under ``folder`` (but ``rules``, the file that names the packages) that import a layer above the library
    or spell the ``t2g`` command."""
    offenders = []
    for path in sorted(folder.rglob("*.py")):
        if rules is not None and path == rules:
            continue
        name = path.relative_to(folder.parent)
        offenders += [
            f"{name} imports {m}" for m in sorted(_modules_imported(path)) if m.split(".")[0] in NOT_IN_CORE_TESTS
        ]
        strings = {
            n.value for n in ast.walk(ast.parse(path.read_text(encoding="utf-8"))) if isinstance(n, ast.Constant)
        }
        offenders += [f"{name} runs the command ({s!r})" for s in sorted(strings & T2G_COMMAND, key=str)]
    return offenders


def test_core_and_stage_tests_stay_below_the_command_line_prefect_and_mlflow():
    """A test of the command goes to tests/cli, of a task or the MLflow adapter to tests/tasks, of a flow to
    tests/flows: then `pytest tests/core tests/stages` checks the library and its stage functions without the layers
    (or the servers) built on them."""
    assert core_test_offenders(ROOT / "tests" / "core", Path(__file__).resolve()) == []
    assert core_test_offenders(ROOT / "tests" / "stages") == []


def test_a_core_test_that_drives_the_command_is_caught(tmp_path):
    (tmp_path / "core").mkdir()
    (tmp_path / "core" / "test_a.py").write_text("def test_a():\n    from typer.testing import CliRunner\n")
    (tmp_path / "core" / "test_b.py").write_text("import mlflow\nfrom tasks.ppo import x\nRUN = ['t2g', 'ppo']\n")
    (tmp_path / "core" / "test_c.py").write_text("from t2g_core.spans import align_frame\nNAME = 't2g_core'\n")
    assert core_test_offenders(tmp_path / "core") == [
        "core/test_a.py imports typer.testing",
        "core/test_b.py imports mlflow",
        "core/test_b.py imports tasks.ppo",
        "core/test_b.py runs the command ('t2g')",
    ]


def test_code_style_is_enforced():
    """ruff (line length 120, complexity limit) and its formatter, as `make lint` runs them."""
    ruff = Path(sys.executable).parent / "ruff"
    for args in (["check", "."], ["format", "--check", "."]):
        out = subprocess.run([str(ruff), *args], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-1000:]


# ------------------------------------------------------------------------------------------- file-level import circles
PROJECT = ("t2g_core", "t2g_mlflow", "t2g_env", "tasks", "flows", "t2g_cli", "deployments", "benchmarks")


def module_files(root: Path = ROOT) -> dict[str, Path]:
    """Module name -> file, for every file of the project's packages (the benchmarks, scripts run from their folder,
    import ``testbed`` as a top-level package)."""
    found = {}
    for package in PROJECT:
        base = root / "benchmarks" if package == "benchmarks" else root
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def project_imports(path: Path, files: dict[str, Path]) -> set[str]:
    """The project's modules that the imports in ``path`` load, at any depth of the file: ``from a.b import c`` loads
    ``a.b.c`` when that is a module, else ``a.b`` (the packages above a module are not counted). An import under
    ``if TYPE_CHECKING:`` loads nothing: it names a type for annotations and never runs."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
        for statement in node.body
        for inner in ast.walk(statement)
    }
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            subs = (f"{node.module}.{alias.name}" for alias in node.names)
            found.update(sub if sub in files else node.module for sub in subs)
    return found & files.keys()


def module_graph(root: Path = ROOT) -> dict[str, set[str]]:
    files = module_files(root)
    return {name: project_imports(path, files) - {name} for name, path in files.items()}


def test_no_two_files_import_each_other_even_round_a_longer_circle():
    """Two files that import each other (even inside a function) are one concern split in two, or a helper that
    belongs below both: move the shared piece down."""
    graph = module_graph()
    assert {"tasks.outcome", "t2g_core.demo.facts", "testbed.tasks"} <= graph.keys()  # the walk found the files
    assert _cycle(graph) == [], " -> ".join(_cycle(graph))


def test_a_deferred_import_circle_is_found(tmp_path):
    for name, text in {
        "tasks/__init__.py": "",
        "tasks/a.py": "def f():\n    from tasks import b\n",
        "tasks/b.py": "from tasks.a import f\nimport numpy\n",
        "tasks/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tasks.d import T\n",
        "tasks/d.py": "import tasks.c\n",  # c names d's type for annotations only: no circle
    }.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    for package in PROJECT:
        (tmp_path / package).mkdir(exist_ok=True)
    assert _cycle(module_graph(tmp_path)) == ["tasks.a", "tasks.b", "tasks.a"]


def test_no_stage_imports_another_stage():
    """A stage function's module imports no other stage's module: what two stages share lives in a shared module of
    ``t2g_core.stages`` (``context``, ``refs``, ``io``, ``preflight``, ``labelling``, ``holdout``) or in the library
    below."""
    from t2g_core.stages.registry import ORDER

    files = module_files()
    stages = {f"t2g_core.stages.{name}" for name in ORDER}
    assert stages <= files.keys(), sorted(stages - files.keys())  # each stage is the module of its name
    offenders = sorted(
        f"{stage} imports {other}"
        for stage in stages
        for other in project_imports(files[stage], files) & stages - {stage}
    )
    assert offenders == [], "move what they share to a shared module:\n" + "\n".join(offenders)


# ------------------------------------------------------------------------------------------- imports at the top
# The project's own modules are imported at the top of a file, where the structure shows; an import inside a function
# is allowed only where moving it up would make the file load a heavy library it does not load already. Heavy: the ML
# and orchestration stacks, and the data stack the command line should not pay for at start (with those at the top
# of the commands, `import t2g_cli` took 2.0 s instead of 0.6 s).
HEAVY = frozenset(
    "torch transformers peft trl accelerate datasets vllm mlflow prefect pandas numpy scipy pyarrow openai aiohttp "
    "httpx gguf sklearn".split()
)


def _file(root: Path, module: str) -> Path | None:
    base = root.joinpath(*module.split("."))
    return next((p for p in (base / "__init__.py", base.with_suffix(".py")) if p.is_file()), None)


def _top_level_imports(tree: ast.Module) -> set[str]:
    """What a module imports when it is imported: module-level statements, not functions nor TYPE_CHECKING blocks."""
    found: set[str] = set()

    def walk(body):
        for node in body:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.Import):
                found.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.update({node.module, *(f"{node.module}.{a.name}" for a in node.names)})
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.ClassDef)):
                walk(getattr(node, "body", []) + getattr(node, "orelse", []) + getattr(node, "finalbody", []))

    walk(tree.body)
    return found


@cache
def heavy_by_module(root: Path) -> dict[str, frozenset[str]]:
    """Each project module -> the heavy libraries importing it loads, through the top-level imports (a fixed point
    over the import graph, so circles through packages settle)."""
    deps: dict[str, set[str]] = {}
    for package in PROJECT:
        for path in (root / package).rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            deps[name] = _top_level_imports(ast.parse(path.read_text(encoding="utf-8")))
            deps[name] |= {".".join(parts[:i]) for i in range(1, len(parts) - (parts[-1] == "__init__"))}
    heavy = {m: {d.split(".")[0] for d in ds} & HEAVY for m, ds in deps.items()}
    changed = True
    while changed:
        changed = False
        for m, ds in deps.items():
            more = set().union(*(heavy.get(d, set()) for d in ds)) - heavy[m]
            if more:
                heavy[m] |= more
                changed = True
    return {m: frozenset(h) for m, h in heavy.items()}


def heavy_loaded(root: Path, module: str) -> frozenset[str]:
    top = module.split(".")[0]
    return frozenset({top} & HEAVY) if top not in PROJECT else heavy_by_module(root).get(module, frozenset())


def needless_deferrals(root: Path) -> list[str]:
    """``file:line: statement`` of each import of a project module inside a function that could sit at the top."""
    out = []
    for package in PROJECT:
        for path in sorted((root / package).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"))
            loaded = frozenset().union(*(heavy_loaded(root, m) for m in _top_level_imports(tree)))
            for fn in (n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
                for node in (n for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom))):
                    names = [node.module] if isinstance(node, ast.ImportFrom) else [a.name for a in node.names]
                    if getattr(node, "level", 0) or not all(n and n.split(".")[0] in PROJECT for n in names):
                        continue
                    names += [f"{node.module}.{a.name}" for a in node.names if isinstance(node, ast.ImportFrom)]
                    if not frozenset().union(*(heavy_loaded(root, n) for n in names)) - loaded:
                        out.append(f"{path.relative_to(root)}:{node.lineno}: {ast.unparse(node)}")
    return out


def test_the_projects_own_modules_are_imported_at_the_top_unless_that_loads_a_heavy_library():
    offenders = needless_deferrals(ROOT)
    assert offenders == [], "move these imports to the top of their files:\n" + "\n".join(offenders)


def test_a_needless_deferral_is_found_and_a_paying_one_is_not(tmp_path):
    (tmp_path / "t2g_core").mkdir()
    (tmp_path / "t2g_core" / "__init__.py").write_text("")
    (tmp_path / "t2g_core" / "light.py").write_text("import json\n")
    (tmp_path / "t2g_core" / "heavy.py").write_text("import torch\n")
    (tmp_path / "t2g_core" / "user.py").write_text(
        "def f():\n    from t2g_core import light\n    from t2g_core.heavy import x\n    import json\n"
    )
    assert needless_deferrals(tmp_path) == ["t2g_core/user.py:2: from t2g_core import light"]
