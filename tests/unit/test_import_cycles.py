"""No import cycles in the package or in the validation suite (issues 11 and 38), counting lazy
imports inside functions and type-only imports under ``if TYPE_CHECKING:`` too: a lazy import that
closes a loop is the same tangle, only deferred, and a circle of types means two modules share one
concept that belongs in a third."""

import ast
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("simtrain", "validation")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST):
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        todo.extend(ast.iter_child_nodes(node))


def import_graph() -> nx.DiGraph:
    files = {_module_name(p): p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        for target in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target in files and target not in (name, *PACKAGES):
                g.add_edge(name, target)
    return g


def test_the_graph_sees_lazy_and_type_only_imports():
    g = import_graph()
    assert g.has_edge("simtrain.graph.model", "simtrain.graph.capture.importer")  # a lazy import
    assert g.has_edge("simtrain.estimator", "simtrain.parallel.program")
    assert g.has_edge("validation.published.heldout", "simtrain.cost.realisation")   # the suite is scanned
    tree = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from simtrain.graph.model import Model\n")
    assert "simtrain.graph.model" in set(_imports(tree))                           # type-only imports count


def test_no_import_cycles():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"
