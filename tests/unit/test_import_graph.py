"""The house rules of our own imports, checked over the whole tree.

The graph: one node per module of ``protocol``, ``proxy`` and ``tiering`` (packages and
subpackages included, a package being its ``__init__``), one edge per import of one of ours,
wherever it is written: at the top, inside a function (a deferred import is still a dependency)
and under ``if TYPE_CHECKING:``. TYPE_CHECKING imports count toward cycles too: they are still a
dependency between the two modules (a cycle broken only for the interpreter is a design cycle),
and counting them keeps the rule one that can be read off the import lines. ``from pkg import
name`` points at ``pkg.name`` when that is a module, else at ``pkg``. The parent package a
submodule import runs first is not an edge: otherwise every package whose ``__init__``
re-exports its modules would be a cycle.

Rules:

a. no import cycle anywhere;
b. layers: ``protocol`` imports nothing of ours outside ``protocol``; ``tiering`` never imports
   ``proxy``;
c. no module over ``MAX_LINES`` lines;
d. the proxy's core imports no filter: a module of ``proxy/filters/`` is imported only by the
   modules in ``CHAIN_BUILDERS`` (the package itself, which builds the chain, and the entry
   points), and filters do not import each other (a module of filter X may import X's own
   modules, never filter Y's) nor the server (``SERVER``).

The checks are pure functions over a ``{module: {imported modules}}`` dict, so the fixture tests
below prove each rule catches what it should before the real tree is held to them.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("protocol", "proxy", "tiering")
MAX_LINES = 500
FILTERS = "proxy.filters"
# The only modules that may import a filter: the package that builds the chain and the entry points.
CHAIN_BUILDERS = frozenset({"proxy.filters", "proxy.cli", "proxy.demo"})
SERVER = "proxy.server"  # filters see the core through proxy.chain, never the server object

Graph = Mapping[str, set[str]]


# -- building the graph --------------------------------------------------------------------------


def module_files(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    found = {}
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


def imports_of(module: str, source: str, known: Iterable[str], is_package: bool = False,
               ours: Iterable[str] = PACKAGES) -> set[str]:
    """The modules of ours that ``source`` (the text of ``module``) imports, anywhere in it."""
    known = set(known)
    roots = set(ours)
    found = set()

    def add(name: str) -> None:
        if name.split(".")[0] in roots and name != module:
            found.add(name)

    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                base = ".".join(package + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                add(submodule if submodule in known else base)
    return found


def build_graph(root: Path = ROOT, packages: Iterable[str] = PACKAGES) -> tuple[dict[str, set[str]], dict[str, int]]:
    """The import graph of the tree under ``root`` and each module's line count."""
    files = module_files(root, packages)
    graph, lines = {}, {}
    for module, path in files.items():
        text = path.read_text()
        lines[module] = len(text.splitlines())
        graph[module] = imports_of(module, text, files, is_package=path.name == "__init__.py", ours=packages)
    return graph, lines


# -- the rules, as pure functions ----------------------------------------------------------------


def find_cycles(graph: Graph) -> list[list[str]]:
    """One cycle per strongly connected component that has one, as a path that ends where it
    starts (``[a, b, c, a]``): the shortest cycle through the component's first module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    nodes = sorted(set(graph) | {m for targets in graph.values() for m in targets})

    for start in nodes:  # Tarjan's algorithm, iterative so deep graphs cannot overflow
        if start in index:
            continue
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph.get(node, ()):
                    components.append(sorted(component))

    cycles = []
    for component in sorted(components):
        members, first = set(component), component[0]
        # Breadth-first from `first` inside the component back to `first`.
        paths = {first: [first]}
        queue = [first]
        cycle = None
        while queue and cycle is None:
            node = queue.pop(0)
            for child in sorted(graph.get(node, ())):
                if child == first:
                    cycle = paths[node] + [first]
                    break
                if child in members and child not in paths:
                    paths[child] = paths[node] + [child]
                    queue.append(child)
        cycles.append(cycle or [first, first])
    return cycles


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def layer_violations(graph: Graph) -> list[str]:
    problems = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if _in(source, "protocol") and not _in(target, "protocol"):
                problems.append(f"{source} imports {target}: protocol imports nothing of ours outside protocol")
            if _in(source, "tiering") and _in(target, "proxy"):
                problems.append(f"{source} imports {target}: tiering never imports proxy")
    return problems


def _filter_of(module: str) -> str | None:
    """The filter a module of proxy/filters/ belongs to (``proxy.filters.x.y`` -> ``x``); None
    for the package itself and for modules outside it."""
    if not module.startswith(FILTERS + "."):
        return None
    return module[len(FILTERS) + 1 :].split(".")[0]


def filter_violations(graph: Graph, chain_builders: Iterable[str] = CHAIN_BUILDERS) -> list[str]:
    builders = set(chain_builders)
    problems = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if _in(source, FILTERS) and _in(target, SERVER):
                problems.append(f"{source} imports {target}: filters never import the server")
            if not _in(target, FILTERS) or source in builders:
                continue
            mine, theirs = _filter_of(source), _filter_of(target)
            if mine is None:
                problems.append(f"{source} imports {target}: only the chain builders ({', '.join(sorted(builders))}) "
                                "may import a filter")
            elif theirs is None:
                problems.append(f"{source} imports {target}: a filter may not import the filters package "
                                "(it imports every filter)")
            elif mine != theirs:
                problems.append(f"{source} imports {target}: filters do not import each other")
    return problems


def oversized(lines: Mapping[str, int], max_lines: int = MAX_LINES) -> list[str]:
    return [f"{module}: {n} lines (max {max_lines})" for module, n in sorted(lines.items()) if n > max_lines]


def check(graph: Graph, lines: Mapping[str, int] | None = None,
          chain_builders: Iterable[str] = CHAIN_BUILDERS) -> list[str]:
    """Every broken rule, one line each."""
    problems = [f"import cycle: {' -> '.join(cycle)}" for cycle in find_cycles(graph)]
    problems += layer_violations(graph)
    problems += filter_violations(graph, chain_builders)
    problems += oversized(lines or {})
    return problems


def _report(problems: list[str]) -> str:
    return f"{len(problems)} problem(s):\n  " + "\n  ".join(problems)


# -- the rules catch what they should ------------------------------------------------------------

CLEAN = {
    "protocol.errors": set(),
    "protocol.records": {"protocol.errors"},
    "tiering.reader": {"protocol.records", "tiering.storage"},
    "tiering.storage": set(),
    "proxy.chain": {"protocol.records"},
    "proxy.server": {"proxy.chain", "tiering.reader"},
    "proxy.filters": {"proxy.filters.a", "proxy.filters.b", "proxy.chain"},
    "proxy.filters.a": {"proxy.chain", "proxy.filters.a.helpers", "tiering.reader"},
    "proxy.filters.a.helpers": {"protocol.records"},
    "proxy.filters.b": {"proxy.chain"},
    "proxy.cli": {"proxy.filters", "proxy.server"},
    "proxy.demo": {"proxy.filters.a", "proxy.cli"},
}


def _with(**edges: set[str]) -> dict[str, set[str]]:
    graph = {module: set(targets) for module, targets in CLEAN.items()}
    for module, targets in edges.items():
        graph.setdefault(module.replace("__", "."), set()).update(targets)
    return graph


def test_a_clean_graph_passes():
    assert check(CLEAN, {"protocol.records": MAX_LINES}) == []


def test_a_cycle_is_reported_with_its_path():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycles(graph) == [["a", "b", "c", "a"]]
    assert check(graph) == ["import cycle: a -> b -> c -> a"]


def test_each_cycle_is_reported_once_with_the_shortest_path_through_it():
    graph = _with(tiering__storage={"tiering.reader"}, proxy__cli={"proxy.demo"}, tiering__service={"tiering.service"})
    assert find_cycles(graph) == [
        ["proxy.cli", "proxy.demo", "proxy.cli"],
        ["tiering.reader", "tiering.storage", "tiering.reader"],
        ["tiering.service", "tiering.service"],
    ]


def test_protocol_importing_tiering_is_reported():
    problems = check(_with(protocol__records={"tiering.storage"}))
    assert problems == ["protocol.records imports tiering.storage: protocol imports nothing of ours outside protocol"]


def test_tiering_importing_proxy_is_reported():
    problems = check(_with(tiering__storage={"proxy.config"}))
    assert problems == ["tiering.storage imports proxy.config: tiering never imports proxy"]


def test_a_filter_importing_another_filter_is_reported():
    problems = check(_with(proxy__filters__b={"proxy.filters.a.helpers"}))
    assert problems == ["proxy.filters.b imports proxy.filters.a.helpers: filters do not import each other"]
    problems = check(_with(proxy__filters__b={"proxy.filters"}))
    assert any("proxy.filters.b imports proxy.filters: a filter may not import the filters package" in p
               for p in problems), problems


def test_a_core_module_importing_a_filter_is_reported():
    problems = check(_with(proxy__server={"proxy.filters.b"}))
    assert problems == ["proxy.server imports proxy.filters.b: only the chain builders "
                        "(proxy.cli, proxy.demo, proxy.filters) may import a filter"]


def test_a_filter_importing_the_server_is_reported():
    problems = check(_with(proxy__filters__a={"proxy.server"}))
    assert problems == ["proxy.filters.a imports proxy.server: filters never import the server"]


def test_an_oversized_module_is_reported():
    assert check(CLEAN, {"protocol.records": MAX_LINES + 1}) == [f"protocol.records: {MAX_LINES + 1} lines (max 500)"]


def test_imports_are_found_wherever_they_are_written():
    source = '''
from __future__ import annotations
import json
from typing import TYPE_CHECKING
import tiering.storage.api
from protocol import records, errors as e
from protocol.records import Record
from .sibling import thing
if TYPE_CHECKING:
    from proxy.config import ProxyConfig
def later():
    from tiering.metadata import manager
    import protocol.apis
class C:
    def m(self):
        from tiering.read.reader import RemoteReader
'''
    known = {"protocol", "protocol.records", "protocol.errors", "protocol.apis", "proxy.config",
             "tiering.storage.api", "tiering.metadata", "tiering.metadata.manager", "tiering.read.reader",
             "tiering.read.sibling"}
    assert imports_of("tiering.read.index_cache", source, known) == {
        "tiering.storage.api", "protocol.records", "protocol.errors", "tiering.read.sibling", "proxy.config",
        "tiering.metadata.manager", "protocol.apis", "tiering.read.reader",
    }


# -- the real tree -------------------------------------------------------------------------------


def test_the_tree_is_read():
    graph, lines = build_graph()
    assert {"protocol.errors", "proxy.cli"} <= set(graph), sorted(graph)
    assert "protocol.errors" in graph["protocol.headers"]


def test_no_import_cycles():
    graph, _ = build_graph()
    cycles = [f"import cycle: {' -> '.join(cycle)}" for cycle in find_cycles(graph)]
    assert not cycles, _report(cycles)


def test_layers():
    graph, _ = build_graph()
    problems = layer_violations(graph)
    assert not problems, _report(problems)


def test_filters_are_imported_only_by_the_chain_builders_and_not_by_each_other():
    graph, _ = build_graph()
    problems = filter_violations(graph)
    assert not problems, _report(problems)


def test_no_module_over_the_line_limit():
    _, lines = build_graph()
    problems = oversized(lines)
    assert not problems, _report(problems)
