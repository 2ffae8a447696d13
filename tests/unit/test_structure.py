"""The floors of the house: which package may import which, no import circle, no oversized module.

The ground floor (`cluster`, `cluster.formats`, `cluster.runtime`) is what every node and
controller process loads; `node` and `controller` stand on it and never on each other; the user
floor (launch, tools, CLI, benches, the pytest plugin) may import everything and nothing imports
it. Imports inside functions count as much as those at the top: a late import is still a
dependency.
"""
from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("cluster", "node", "controller", "spark_jobs", "benchmarks")
MAX_LINES = 600
GROUND = "ground"
USER = "user"

# What each floor may import besides itself.
MAY_IMPORT = {
    GROUND: {GROUND},
    "node": {GROUND, "node"},
    "controller": {GROUND, "controller"},
    "spark_jobs": {GROUND, "spark_jobs"},
    USER: {GROUND, "node", "controller", "spark_jobs", USER},
    "benchmarks": {GROUND, "node", "controller", "spark_jobs", USER, "benchmarks"},
}


def _module_files() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            modules[".".join(parts)] = path
    return modules


MODULES = _module_files()


def floor_of(module: str) -> str:
    if module == "cluster" or module.startswith(("cluster.formats", "cluster.runtime")):
        return GROUND
    if module.startswith("cluster."):
        return USER
    return module.split(".")[0]


def _ours(name: str) -> str | None:
    """The module of ours that an imported name lives in (a package's name stands for its __init__)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    tree = ast.parse(MODULES[module].read_text(), filename=str(MODULES[module]))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        found.update(filter(None, map(_ours, names)))
    found.discard(module)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def _circles() -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iteratively)."""
    index, low, on_stack, stack, circles = {}, {}, set(), [], []
    counter = 0
    for start in GRAPH:
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            module, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = counter
                    counter += 1
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(GRAPH[target]))))
                    break
                if target in on_stack:
                    low[module] = min(low[module], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[module])
                if low[module] == index[module]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == module:
                            break
                    if len(component) > 1:
                        circles.append(sorted(component))
    return circles


def test_the_modules_are_found():
    assert {"cluster.formats.records", "node.server", "controller.server", "cluster.cli"} <= MODULES.keys()
    assert any(floor_of(target) == GROUND for target in GRAPH["node.server"])
    assert "cluster.launch.cluster" in GRAPH["cluster.launch"]


def test_no_import_circle():
    assert _circles() == []


def test_each_floor_imports_only_what_stands_beneath_it():
    wrong = sorted(
        f"{module} ({floor_of(module)}) imports {target} ({floor_of(target)})"
        for module, targets in GRAPH.items()
        for target in targets
        if floor_of(target) not in MAY_IMPORT[floor_of(module)]
    )
    assert wrong == []


def test_no_module_over_the_line_limit():
    long_ones = sorted(
        f"{path.relative_to(ROOT)}: {lines} lines"
        for module, path in MODULES.items()
        if floor_of(module) != "benchmarks"
        and (lines := len(path.read_text().splitlines())) > MAX_LINES
    )
    assert long_ones == []


def test_development_benches_live_outside_the_packages():
    inside = sorted(
        module for module in MODULES
        if floor_of(module) != "benchmarks" and "bench" in module and not module.startswith("cluster.bench")
    )
    assert inside == []


def test_a_node_process_loads_no_user_floor():
    """A node and a controller import their own code and the ground floor; the CLI's libraries and
    the launcher stay out of them (they cost start-up time in every one of N processes)."""
    probe = (
        "import sys, node.server, node.broker, controller.server\n"
        "loaded = [name for name in sys.modules if name in ('click', 'rich') or name.startswith("
        "('cluster.launch', 'cluster.cli', 'cluster.tools', 'cluster.bench', 'benchmarks'))]\n"
        "print(','.join(sorted(loaded)))\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == ""
