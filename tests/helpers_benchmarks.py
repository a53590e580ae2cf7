"""Loading a script of benchmarks/ or calibration/ as a module, for the tests of that
script."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def load_benchmark(stem, name=None, folder="benchmarks"):
    """``<folder>/<stem>.py`` executed as the module ``name`` (default: ``stem``).

    The module is registered in ``sys.modules`` under ``name`` (dataclasses look their
    module up there; a distinct name gives a test file its own copy) and removed again
    if executing it fails; ``sys.path`` is left as it was (the scripts put their folder
    first to import their neighbours).
    """
    name = name or stem
    spec = importlib.util.spec_from_file_location(name, ROOT / folder / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    path = list(sys.path)
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        del sys.modules[name]
        raise
    finally:
        sys.path[:] = path
    return mod


def load_calibration(stem, name=None):
    """``calibration/<stem>.py`` executed as a module (see :func:`load_benchmark`)."""
    return load_benchmark(stem, name, folder="calibration")
