"""normlab's floors stack (issue 35): no import circle, no import from a lower layer to a higher one, and a
function-local ``normlab`` import only with a reason (a measured start-up cost or an optional dependency).

The test reads the source (``ast``), it imports nothing: every ``import normlab...`` / ``from normlab... import``
counts, at module level, inside a function or under ``if TYPE_CHECKING:`` alike, so that a circle cannot hide
in a function body.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "normlab"

# The floors of normlab, lowest first: a module may import from its own layer and the layers below it, never
# from one above. A module belongs to the layer of the longest name below that is it or a package holding it
# (``normlab.train.run`` is a task, the rest of ``normlab.train`` is training). The one place this order is
# written.
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # file mechanics, the configs, the wording of faults: nothing of normlab below them
    ("ground", ("normlab.files", "normlab.config", "normlab.faults", "normlab.allocator")),
    # what the machine and the installed package provide
    ("platform", ("normlab.assets", "normlab.device")),
    ("data", ("normlab.data",)),
    # the package's __init__ re-exports the model and its config
    ("model", ("normlab", "normlab.model", "normlab.generate", "normlab.metrics", "normlab.hf")),
    ("train", ("normlab.train", "normlab.rundir")),
    # what uses a trained model or trains one for a purpose, and the analyses at initialisation
    ("tasks", ("normlab.train.run", "normlab.translate", "normlab.pretrained", "normlab.finetune", "normlab.lm",
               "normlab.scoring", "normlab.analysis")),
    # the data experiments hand to the report
    ("results", ("normlab.results",)),
    ("report", ("normlab.report",)),
    ("experiments", ("normlab.experiments",)),
    ("cli", ("normlab.cli", "normlab.__main__")),
)

# The function-local normlab imports that stay, by (module, imported module), each for a reason measured or an
# optional dependency; the import's own line says the same in a comment. Every other import is at the top of its
# module, where a reader (and this test) sees what the module stands on.
LOCAL_IMPORTS: dict[tuple[str, str], str] = {
    ("normlab.analysis.run", "normlab.analysis.plots"): "matplotlib, for the figures only",
    ("normlab.__main__", "normlab.cli"): "after the allocator's re-exec: cli imports torch, which the re-executed "
    "process would import again (normlab.allocator)",
}
MAX_LOCAL_IMPORTS = 15

# The experiments write their reports through the report's one entry, never through a page of it; besides the
# entry they read the claims' statistical rules (the seeds row of the mapping table, experiments/figures.py).
REPORT_ENTRY = "normlab.report.render"
REPORT_RULES = "normlab.report.claims"


@dataclass(frozen=True)
class Import:
    module: str  # the importer
    target: str  # the normlab module it imports (a package's __init__ for ``from normlab.data import prepare``)
    line: int
    end: int  # the statement's last line
    local: bool  # inside a function


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(name: str) -> str:
    """The module ``name`` is, or the innermost one that holds it (an attribute such as a function or class)."""
    while name not in MODULES:
        name = name.rpartition(".")[0]
    return name


def _imports(module: str, path: Path) -> list[Import]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found: list[Import] = []

    def visit(node: ast.AST, local: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inner = local or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            names: list[str] = []
            if isinstance(child, ast.Import):
                names = [a.name for a in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:  # relative: from the package that holds this module
                    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
                    package = package[: len(package) - (child.level - 1)]
                    base = ".".join(package + ([base] if base else []))
                # ``from normlab.train import checkpoint`` imports a module; ``from normlab.data import prepare`` a name
                names = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base for a in child.names]
            for name in names:
                if name == "normlab" or name.startswith("normlab."):
                    target = _target(name)
                    if target != module:
                        found.append(Import(module, target, child.lineno, child.end_lineno or child.lineno, inner))
            visit(child, inner)

    visit(tree, False)
    return found


# one per statement and target (``from normlab.x import a, b`` is one import of normlab.x)
IMPORTS = list(dict.fromkeys(imp for module, path in MODULES.items() for imp in _imports(module, path)))


def layer_of(module: str) -> int:
    best, index = "", -1
    for i, (_, prefixes) in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > len(best):
                best, index = prefix, i
    return index


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A circle of imports ``[a, b, ..., a]``, or None (a depth-first search; the first circle found)."""
    state: dict[str, int] = {}  # 1 on the current path, 2 done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (cycle := dfs(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := dfs(node)):
            return cycle
    return None


def test_every_module_has_a_layer():
    missing = [m for m in MODULES if layer_of(m) < 0]
    assert not missing, f"modules in no layer of LAYERS (tests/test_layers.py): {missing}"


def test_no_import_circle():
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        graph[imp.module].add(imp.target)
    cycles = []
    while cycle := find_cycle(graph):  # report every circle, each broken at its first edge to find the next
        cycles.append(" -> ".join(cycle))
        graph[cycle[0]].discard(cycle[1])
    assert not cycles, "import circles in normlab/:\n  " + "\n  ".join(cycles)


def test_no_import_from_a_lower_layer_to_a_higher_one():
    upward = [f"{imp.module} ({LAYERS[layer_of(imp.module)][0]}) imports {imp.target} "
              f"({LAYERS[layer_of(imp.target)][0]}), line {imp.line}"
              for imp in IMPORTS if layer_of(imp.target) > layer_of(imp.module)]  # fmt: skip
    assert not upward, "imports from a lower layer to a higher one:\n  " + "\n  ".join(upward)


def test_function_local_imports_have_a_reason():
    local = [imp for imp in IMPORTS if imp.local]
    unlisted = [f"{imp.module}:{imp.line} imports {imp.target}" for imp in local
                if (imp.module, imp.target) not in LOCAL_IMPORTS]  # fmt: skip
    assert not unlisted, ("function-local normlab imports without a reason in LOCAL_IMPORTS (move them to the top "
                          "of the module, or measure why not):\n  " + "\n  ".join(unlisted))  # fmt: skip
    assert len(local) <= MAX_LOCAL_IMPORTS, f"{len(local)} function-local normlab imports; at most {MAX_LOCAL_IMPORTS}"
    uncommented = []
    for imp in local:
        lines = MODULES[imp.module].read_text(encoding="utf-8").splitlines()
        if not any("#" in line for line in lines[imp.line - 1 : imp.end]):
            uncommented.append(f"{imp.module}:{imp.line}")
    assert not uncommented, f"function-local imports without their reason in a comment: {uncommented}"


def test_experiments_reach_the_report_through_its_entry():
    bad = [f"{imp.module}:{imp.line} imports {imp.target}" for imp in IMPORTS
           if imp.module.startswith("normlab.experiments.") and imp.target.startswith("normlab.report.")
           and imp.target not in (REPORT_ENTRY, REPORT_RULES)]  # fmt: skip
    assert not bad, f"experiments import report modules other than {REPORT_ENTRY} (and {REPORT_RULES}): {bad}"


@pytest.mark.parametrize("pair", sorted(LOCAL_IMPORTS))
def test_listed_local_imports_exist(pair):
    """A reason for an import that is no longer local is stale."""
    assert any((imp.module, imp.target) == pair and imp.local for imp in IMPORTS), f"{pair} is not a local import"


def test_the_finder_finds_a_circle():
    """The check itself: a circle of three, with a branch beside it."""
    graph = {"a": {"b"}, "b": {"c", "d"}, "c": {"a"}, "d": set()}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None
