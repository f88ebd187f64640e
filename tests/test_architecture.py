"""The package's shape, read from its source tree: module sizes, every module in use, no name
shadowing a subpackage, no import cycle, every top-level module placed in a layer.

The layer contracts themselves are checked by ``lint-imports`` (import-linter, ``make test``) from
``[tool.importlinter]`` in pyproject.toml; these tests keep that configuration complete.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import inspect
import re
import sys
import tomllib
from pathlib import Path

import networkx as nx

import dpgm

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO / "dpgm"
MAX_LINES = 600
# run by name, not imported: the ``dpgm`` command (``python -m dpgm.cli``) and the package itself;
# dpgm.testing is the public module of test oracles, imported by the tests and by users
ENTRY_POINTS = {"dpgm", "dpgm.cli.__main__", "dpgm.testing"}


def _modules() -> dict[str, Path]:
    """Module name -> source file of every module under dpgm/ (a package is its ``__init__``)."""
    modules = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(name: str, path: Path, modules: dict[str, Path], *, lazy: bool) -> set[str]:
    """The dpgm modules ``name`` imports: ``import a.b``, ``from a import b`` (the module a.b if there is
    one, else a), relative imports; annotations under ``if TYPE_CHECKING`` are not imports. With
    ``lazy``, also the imports inside functions; without, only those run when the module is imported."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if not lazy and isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
                continue
            if isinstance(child, ast.If) and _type_checking(child):
                for item in child.orelse:
                    visit(item)
                continue
            if isinstance(child, ast.Import):
                found.update(alias.name for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = package.split(".")[: len(package.split(".")) - child.level + 1]
                    target = ".".join(base + ([child.module] if child.module else []))
                else:
                    target = child.module or ""
                for alias in child.names:
                    found.add(f"{target}.{alias.name}" if f"{target}.{alias.name}" in modules else target)
            visit(child)

    visit(tree)
    if lazy and name == "dpgm":  # the public names, imported from their modules on first use (PEP 562)
        import dpgm

        found.update(dpgm._PUBLIC.values())
    return {m for m in found if m in modules and m != name}


@functools.cache
def _graph(*, lazy: bool) -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for name, path in modules.items():
        graph.add_edges_from((name, target) for target in _imports(name, path, modules, lazy=lazy))
    return graph


def test_no_module_is_longer_than_600_lines():
    long = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_tests_mirror_the_package_and_no_test_file_is_longer_than_600_lines():
    """Tests live beside the layer they test (``tests/<layer>/``, named for the package's subpackages), or at
    the top for the package as a whole and its top-level modules; no file is over the package's cap."""
    tests = REPO / "tests"
    layers = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()}
    folders = {path.name for path in tests.iterdir() if path.is_dir() and not path.name.startswith((".", "_"))}
    assert folders <= layers | {"conformance"}, f"test folders that are no layer of dpgm: {folders - layers}"
    long = {str(path.relative_to(tests)): n for path in sorted(tests.rglob("*.py"))
            if (n := len(path.read_text().splitlines())) > MAX_LINES}
    assert not long, f"test files over {MAX_LINES} lines: {long}"
    named = {name for page in [REPO / "README.md", *(REPO / "docs").glob("*.md")]
             for name in re.findall(r"tests/[\w/]+\.py", page.read_text())}
    missing = sorted(name for name in named if not (REPO / name).exists())
    assert not missing, f"the docs name test files that do not exist: {missing}"


def test_every_module_is_imported_by_another_module():
    graph = _graph(lazy=True)
    modules = set(graph)
    unused = []
    for name in sorted(modules - ENTRY_POINTS):
        importers = set(graph.predecessors(name))
        # importing a submodule runs its package's __init__: a package is in use if any submodule is
        if not importers and any(m.startswith(name + ".") and set(graph.predecessors(m)) - {name}
                                 for m in modules):
            continue
        if not importers:
            unused.append(name)
    assert not unused, f"modules no other module of dpgm imports: {unused}"


def test_the_checks_see_the_imports():
    """The graph the other checks read is the real one: known edges are found, lazy and eager."""
    eager, everything = _graph(lazy=False), _graph(lazy=True)
    assert eager.has_edge("dpgm.api.bayesian", "dpgm.algorithms.bayesian")
    assert everything.has_edge("dpgm.cli.fitting", "dpgm.api")  # a lazy import inside the command
    assert not eager.has_edge("dpgm.cli.fitting", "dpgm.api")
    assert everything.has_edge("dpgm.cli", "dpgm.cli.datasets")  # ``from dpgm.cli import datasets``


def test_no_public_name_of_dpgm_shadows_a_subpackage():
    submodules = {path.stem if path.name != "__init__.py" else path.parent.name
                  for path in ROOT.glob("*.py")} | {path.parent.name for path in ROOT.glob("*/__init__.py")}
    submodules.discard("__init__")
    assert {"api", "models", "inference", "cli"} <= submodules
    public = {name for name in dir(dpgm) if not name.startswith("_")}
    shadowing = sorted(name for name in public & submodules
                       if not isinstance(getattr(dpgm, name), type(sys)))
    assert not shadowing, f"dpgm.<name> is not the module dpgm/<name>: {shadowing}"


def test_no_import_cycle_at_import_time():
    graph = _graph(lazy=False)
    cycles = list(nx.simple_cycles(graph))
    assert not cycles, f"modules that import each other when imported: {cycles[:5]}"


def test_no_import_cycle_between_top_level_modules():
    """Counting lazy imports too, the subpackages form a DAG (what the layers contract orders)."""
    graph = _graph(lazy=True)
    top = nx.DiGraph()
    for a, b in graph.edges:
        first, second = a.split(".")[:2], b.split(".")[:2]
        if len(first) == 2 and len(second) == 2 and first != second:
            top.add_edge(".".join(first), ".".join(second))
    cycles = list(nx.simple_cycles(top))
    assert not cycles, f"subpackages that import each other: {cycles[:5]}"


def test_every_top_level_module_has_a_layer():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    contracts = config["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}
    top = {name for name in _modules() if name.count(".") == 1 and not name.endswith("__main__")}
    assert not top - placed, f"top-level modules in no layer of pyproject's layers contract: {sorted(top - placed)}"
    assert not placed - top, f"layers naming no module of dpgm: {sorted(placed - top)}"


def test_fit_results_and_convergence_warnings_are_made_in_one_place():
    """``FitResult(...)`` is built and ``ConvergenceWarning`` raised by dpgm/api/results.py only."""
    makers, warners = set(), set()
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "FitResult":
                makers.add(name)
            if isinstance(node, ast.Name) and node.id == "ConvergenceWarning":
                warners.add(name)
    assert makers == {"dpgm.api.results"}, f"modules building a FitResult: {sorted(makers)}"
    assert warners == {"dpgm.api.results"}, f"modules naming ConvergenceWarning: {sorted(warners)}"


ITERATIVE_ALGORITHMS = {
    "dpgm.algorithms.gis": ["gis"],
    "dpgm.algorithms.gradient": ["lbfgs", "newton", "proximal_gradient"],
    "dpgm.algorithms.weights": ["fit_weights"],
    "dpgm.algorithms.gaussian": ["ips", "graphical_lasso"],
    "dpgm.algorithms.ipf": ["ipf"],
    "dpgm.algorithms.tree_ipf": ["tree_ipf"],
    "dpgm.algorithms.irls": ["irls"],
}


def test_each_iterative_algorithm_returns_a_frozen_result_type():
    """No tuple or dict: every iterative algorithm is annotated to return a frozen dataclass."""
    loose = []
    for module_name, names in ITERATIVE_ALGORITHMS.items():
        module = importlib.import_module(module_name)
        for name in names:
            function = getattr(module, name)
            annotation = inspect.signature(function).return_annotation
            kind = eval(annotation, vars(module)) if isinstance(annotation, str) else annotation
            if not (dataclasses.is_dataclass(kind) and kind.__dataclass_params__.frozen):
                loose.append(f"{module_name}.{name} -> {annotation}")
    assert not loose, f"algorithms without a frozen result type: {loose}"
