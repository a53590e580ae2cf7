"""The package's stack is one-way (issue 20 item 8): no module imports one above it.

The layers are :data:`scalemodel._layers.LAYERS`. Two checks: every import statement of
every module (top level and inside functions, parsed with :mod:`ast`) names a module of the
same layer or below; and importing the modules layer by layer in a fresh interpreter (the
package's ``__init__``, the facade that imports everything, skipped) never loads a module
of a higher layer.
"""

from __future__ import annotations

import ast
import json
import pathlib
import subprocess
import sys

import pytest

from scalemodel._layers import LAYERS, layer_of

PKG = pathlib.Path(__file__).resolve().parents[1] / "scalemodel"


def _modules():
    """``{"scalemodel.x": path}`` for every Python module of the package."""
    out = {}
    for path in sorted(PKG.rglob("*.py")):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _imports(name, path):
    """``(line, imported module)`` for each import of a package module in ``path``; a
    ``from . import x`` of a submodule counts as importing it, and a submodule's parent
    packages (other than ``scalemodel`` itself) as imported with it."""
    tree = ast.parse(path.read_text(), str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [f"{target}.{a.name}" if f"{target}.{a.name}" in MODULES else target
                       for a in node.names]
        elif isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        else:
            continue
        for t in targets:
            if not (t == "scalemodel" or t.startswith("scalemodel.")):
                continue
            parts = t.split(".")
            for k in range(2, len(parts) + 1):  # the parents a submodule import runs
                found.append((node.lineno, ".".join(parts[:k])))
            if t == "scalemodel":
                found.append((node.lineno, t))
    return [(line, t) for line, t in found if t != name]


def test_every_module_is_in_exactly_one_layer():
    listed = [m for _, mods in LAYERS for m in mods]
    assert len(listed) == len(set(listed)), "a module is in two layers"
    rel = {n.removeprefix("scalemodel").removeprefix(".") for n in MODULES}
    assert rel == set(listed), (f"not in a layer: {sorted(rel - set(listed))}; "
                                f"no such module: {sorted(set(listed) - rel)}")


def test_no_module_imports_one_above_it():
    bad = []
    for name, path in MODULES.items():
        mine = layer_of(name)
        for line, target in _imports(name, path):
            assert target in MODULES, f"{path}:{line} imports {target}, not a module"
            if layer_of(target) > mine:
                bad.append(f"{path.relative_to(PKG.parent)}:{line} ({LAYERS[mine][0]}) "
                           f"imports {target} ({LAYERS[layer_of(target)][0]})")
    assert not bad, "imports going up the stack:\n" + "\n".join(bad)


def test_the_checker_sees_an_upward_import(tmp_path):
    """The parser finds imports inside functions and relative ones (so the check above can
    fail): workloads importing profiles, as it did before the split, is caught."""
    path = tmp_path / "workloads.py"
    path.write_text("def f():\n    from .profiles import load_profile\n"
                    "from . import memory\nimport scalemodel.calibrate.fit\n")
    found = {t for _, t in _imports("scalemodel.workloads", path)}
    assert {"scalemodel.profiles", "scalemodel.memory", "scalemodel.calibrate",
            "scalemodel.calibrate.fit"} <= found
    assert layer_of("scalemodel.profiles") > layer_of("scalemodel.workloads")


_FRESH = r"""
import importlib, json, sys
from importlib import util
sys.path.insert(0, sys.argv[1].rpartition("/")[0])
pkg = util.module_from_spec(util.find_spec("scalemodel"))
sys.modules["scalemodel"] = pkg          # the package, its facade __init__ not run
spec = util.spec_from_file_location("scalemodel._layers", sys.argv[1] + "/_layers.py")
lay = util.module_from_spec(spec); spec.loader.exec_module(lay)
bad, facade = [], False
for i, (layer, mods) in enumerate(lay.LAYERS):
    for m in mods:
        if m == "":                      # the facade, in its layer
            pkg.__spec__.loader.exec_module(pkg)
            facade = True
        elif m not in ("__main__", "calibrate.__main__"):  # (programs run on import)
            assert facade or not hasattr(pkg, "scaling_factor"), "the facade ran early"
            importlib.import_module("scalemodel." + m)
        for loaded in list(sys.modules):
            if loaded.startswith("scalemodel.") and lay.layer_of(loaded) > i:
                bad.append([m, loaded])
print(json.dumps(bad))
"""


@pytest.mark.filterwarnings("ignore")
def test_fresh_interpreter_imports_layer_by_layer():
    proc = subprocess.run([sys.executable, "-c", _FRESH, str(PKG)], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    bad = json.loads(proc.stdout.strip().splitlines()[-1])
    assert bad == [], f"importing a module loaded one above it: {bad}"
