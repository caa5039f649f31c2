"""No import cycles in the package (issue 11), counting lazy imports inside functions too: a lazy
import that closes a loop is the same tangle, only deferred. Imports under ``if TYPE_CHECKING:``
are annotations, not dependencies, and are skipped."""

import ast
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[2] / "simtrain"


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"


def _imports(tree: ast.AST):
    todo = [tree]
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module
            yield from (f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        todo.extend(ast.iter_child_nodes(node))


def import_graph() -> nx.DiGraph:
    files = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    g = nx.DiGraph()
    g.add_nodes_from(files)
    for name, path in files.items():
        for target in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if target in files and target not in (name, "simtrain"):
                g.add_edge(name, target)
    return g


def test_the_graph_sees_lazy_imports():
    g = import_graph()
    assert g.has_edge("simtrain.graph.model", "simtrain.graph.capture.importer")  # a lazy import
    assert g.has_edge("simtrain.estimator", "simtrain.parallel.program")


def test_no_import_cycles():
    cycles = [sorted(c) for c in nx.strongly_connected_components(import_graph()) if len(c) > 1]
    assert cycles == [], f"import cycles: {cycles}"
