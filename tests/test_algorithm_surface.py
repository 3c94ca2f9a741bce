"""The generic layers carry no algorithm's surface (issue 39): outside ``rllib_caps/algorithms/``, no sweep option,
trial-record field, report column or CLI flag is hard-coded for CAPS's K, backbone, actor, critic or FQE steps; they
come from the registry entries' declarations (``SweepAxis``, ``SweepSetting``, ``TrainFlag``). Checked on the AST:
dataclass fields, ``add_argument`` flags and ``dest``s, and string constants used as keys (subscripts, ``.get``/
``.pop``/``.setdefault`` arguments, dict-literal keys, ``getattr``/``hasattr`` names)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "rllib_caps"
SURFACE_NAMES = {"heads", "num_heads", "num_policy_heads", "backbone", "backbones", "actor", "actors", "critic",
                 "critics", "fqe_steps"}
KEY_METHODS = {"get", "pop", "setdefault"}
# Known exceptions, each (module, what) exactly, with why.
KNOWN = {
    # The standalone ONNX Runtime of CAPS's exported policy imports no rllib_caps (it cannot read the registry).
    ("rllib_caps/onnx_runtime.py", "key 'num_heads' (subscript)"),
    # bench: the benchmark of CAPS's learner step against its plain-PyTorch loop (the only reference loop), as a
    # matrix over K and hidden sizes; it would read the entry's declarations once a second algorithm has a loop.
    ("rllib_caps/bench.py", "flag --heads"), ("rllib_caps/bench.py", "flag --backbone"),
    ("rllib_caps/bench.py", "key 'heads' (dict)"), ("rllib_caps/bench.py", "key 'heads' (subscript)"),
    ("rllib_caps/bench.py", "key 'backbone' (dict)"),
}


def generic_modules() -> list[Path]:
    """Every module of the package outside ``algorithms/`` (whose entries declare the surface)."""
    return sorted(p for p in PACKAGE.rglob("*.py") if "algorithms" not in p.relative_to(PACKAGE).parts)


def _surface(text: object) -> bool:
    return isinstance(text, str) and text.lstrip("-").replace("-", "_") in SURFACE_NAMES


def _is_dataclass(node: ast.ClassDef) -> bool:
    return any("dataclass" in ast.unparse(decorator) for decorator in node.decorator_list)


def surface_uses(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) for each hard-coded surface name in ``tree``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and _is_dataclass(node):
            found += [(item.lineno, f"dataclass field {item.target.id}") for item in node.body
                      if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name)
                      and _surface(item.target.id)]
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name == "add_argument":
                found += [(node.lineno, f"flag {arg.value}") for arg in node.args
                          if isinstance(arg, ast.Constant) and _surface(arg.value)]
                found += [(node.lineno, f"dest {kw.value.value}") for kw in node.keywords
                          if kw.arg == "dest" and isinstance(kw.value, ast.Constant) and _surface(kw.value.value)]
            elif name in KEY_METHODS | {"getattr", "hasattr", "setattr"}:
                found += [(node.lineno, f"key {arg.value!r} ({name})") for arg in node.args[:2]
                          if isinstance(arg, ast.Constant) and _surface(arg.value)]
        elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and _surface(node.slice.value):
            found.append((node.lineno, f"key {node.slice.value!r} (subscript)"))
        elif isinstance(node, ast.Dict):
            found += [(key.lineno, f"key {key.value!r} (dict)") for key in node.keys
                      if isinstance(key, ast.Constant) and _surface(key.value)]
    return found


def test_no_generic_module_hard_codes_an_algorithms_surface() -> None:
    found = [f"{module}:{line}: {what}" for path in generic_modules()
             for line, what in surface_uses(ast.parse(path.read_text()))
             if (module := str(path.relative_to(PACKAGE.parent))) and (module, what) not in KNOWN]
    assert not found, "an algorithm's surface hard-coded outside its registry entry:\n" + "\n".join(found)


def test_the_check_finds_each_kind_of_surface() -> None:
    """The check itself can fail: each kind of hard-coded surface in a module is found."""
    source = '''
@dataclass
class Options:
    heads: list[int]
parser.add_argument("--backbones", nargs="+")
parser.add_argument("--x", dest="fqe_steps")
value = params["critic"] or params.get("actors") or getattr(record, "num_heads")
setup = {"critics": []}
'''
    assert sorted(what for _, what in surface_uses(ast.parse(source))) == sorted([
        "dataclass field heads", "flag --backbones", "dest fqe_steps", "key 'critic' (subscript)",
        "key 'actors' (get)", "key 'num_heads' (getattr)", "key 'critics' (dict)"])
