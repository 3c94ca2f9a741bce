"""The package's import graph: no cycles, and layers point one way (docs/architecture.md).

Every import counts, including those inside functions (the lazy imports that keep the CLIs fast), since a
cycle through a lazy import is still a cycle in the design.
"""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "rllib_caps"

# Lowest first; a module may import from its own layer or lower ones. `report` must not import `sweeps`, except the
# trial-config schema the sweep writes and the report reads (a pure module: no Ray, no other sweep module).
LAYERS = {"utils": 0, "envs": 0, "data": 0, "core": 1, "algorithms": 2, "sweeps": 3, "report": 3}
CLI_LAYER = 4  # rllib_caps/{tasks,train,evaluate,export,tune,bench,onnx_runtime}.py, report/__main__.py, the facade
FORBIDDEN = {("report", "sweeps"), ("envs", "data"), ("data", "envs")}
SCHEMA = "rllib_caps.sweeps.trial_schema"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the rllib_caps modules it imports (``from pkg import name`` resolves to ``pkg.name`` when that
    is a module, else to ``pkg``)."""
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in modules else node.module
                           for a in node.names]
            else:
                continue
            edges |= {t for t in targets if t.startswith("rllib_caps") and t in modules and t != name}
        graph[name] = edges
    return graph


def layer(module: str) -> tuple[str, int]:
    parts = module.split(".")
    if parts[-1] == "__main__" or len(parts) == 1 or parts[1] not in LAYERS:
        return "cli", CLI_LAYER
    return parts[1], LAYERS[parts[1]]


def test_graph_has_the_expected_edges() -> None:
    """The parser sees real imports, so the checks below are not vacuous."""
    graph = import_graph()
    assert "rllib_caps.core.offline" in graph["rllib_caps.algorithms.caps.caps"]
    assert SCHEMA in graph["rllib_caps.report.records"] and SCHEMA in graph["rllib_caps.sweeps.trials"]
    assert "rllib_caps.sweeps.runner" in graph["rllib_caps.tune"]
    assert layer("rllib_caps.report.__main__") == ("cli", CLI_LAYER) and layer("rllib_caps.report")[0] == "report"


def test_no_import_cycles() -> None:
    try:
        graphlib.TopologicalSorter(import_graph()).prepare()
    except graphlib.CycleError as err:
        pytest.fail(f"import cycle: {' -> '.join(err.args[1])}")


def test_layers_point_one_way() -> None:
    wrong = []
    for module, deps in import_graph().items():
        name, level = layer(module)
        for dep in deps:
            dep_name, dep_level = layer(dep)
            if dep_level > level or ((name, dep_name) in FORBIDDEN and dep != SCHEMA):
                wrong.append(f"{module} ({name}) imports {dep} ({dep_name})")
    assert not wrong, "\n".join(wrong)


def test_a_cycle_is_detected() -> None:
    """The check itself can fail: a graph with a cycle raises."""
    with pytest.raises(graphlib.CycleError):
        graphlib.TopologicalSorter({"a": {"b"}, "b": {"c"}, "c": {"a"}}).prepare()


CAPS = "rllib_caps.algorithms.caps"
CAPS_BACKBONES = ("iql", "sacbc")


def test_the_caps_backbones_stand_alone() -> None:
    """No CAPS backbone package (``caps/iql``, ``caps/sacbc``) imports another: what both need is in CAPS's shared
    modules (``shared_losses``, ``backbone``), and only ``backbones.py`` names them all."""
    graph = import_graph()
    assert {f"{CAPS}.shared_losses", f"{CAPS}.keys"} <= graph[f"{CAPS}.sacbc.losses"]  # the parser sees them
    wrong = [f"{module} imports {dep}" for module, deps in graph.items() for dep in deps
             for own in CAPS_BACKBONES for other in CAPS_BACKBONES
             if own != other and module.startswith(f"{CAPS}.{own}.") and dep.startswith(f"{CAPS}.{other}.")]
    assert not wrong, "\n".join(wrong)
    namers = {module for module, deps in graph.items()
              if {f"{CAPS}.{name}.backbone" for name in CAPS_BACKBONES} <= deps}
    assert namers == {f"{CAPS}.backbones"}


def _edges_between(source: str, target: str) -> list[str]:
    return [f"{module} imports {dep}" for module, deps in import_graph().items() if layer(module)[0] == source
            for dep in deps if layer(dep)[0] == target]


def test_utils_imports_only_utils() -> None:
    """``utils/`` is the bottom of the package: it imports nothing of ``data/``, ``envs/`` or above (its checksum is
    its own, ``utils/checksum.py``, which the datasets' checks import)."""
    graph = import_graph()
    assert "rllib_caps.utils.checksum" in graph["rllib_caps.utils.manifest"]  # the parser sees utils' own imports
    wrong = [edge for target in ("envs", "data", "core", "algorithms", "sweeps", "report", "cli")
             for edge in _edges_between("utils", target)]
    assert not wrong, "\n".join(wrong)


def test_core_imports_no_cli_module() -> None:
    """The CLIs' signal handling is the CLIs' (``rllib_caps/interrupts.py``); ``core/`` imports no CLI module."""
    graph = import_graph()
    assert layer("rllib_caps.interrupts") == ("cli", CLI_LAYER)
    assert "rllib_caps.interrupts" in graph["rllib_caps.evaluate"]  # the CLIs import it
    assert "rllib_caps.core.ray_session" in graph["rllib_caps.interrupts"]
    wrong = _edges_between("core", "cli")
    assert not wrong, "\n".join(wrong)


def test_the_trial_schema_imports_no_sweep_module_and_no_ray() -> None:
    """The report reads the schema without the sweep code: the schema imports no other ``sweeps`` module (directly or
    lazily), and no Ray."""
    assert not {dep for dep in import_graph()[SCHEMA] if layer(dep)[0] == "sweeps"}
    tree = ast.parse((PACKAGE / "sweeps" / "trial_schema.py").read_text())
    roots = {alias.name.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.Import)
             for alias in node.names}
    roots |= {node.module.split(".")[0] for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}
    assert "rllib_caps" in roots and "ray" not in roots
