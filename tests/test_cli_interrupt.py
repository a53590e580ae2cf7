"""Ctrl-C at any moment of a ``scalemodel`` command ends it in one line, also while the
package imports (about half a second, before :func:`scalemodel.cli.main` runs: the
import's traceback was printed, or numpy's "Importing the numpy C-extensions failed"
when the interrupt met its extension's start-up). The interrupt is delivered by the
child itself when a given module is imported, so the moment is the same every run."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

CHILD = """
import os, signal, sys
class Interrupt:  # Ctrl-C when {module!r} is first imported
    def find_spec(self, name, path=None, target=None):
        if name == {module!r}:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
import scalemodel_launch
sys.meta_path.insert(0, Interrupt())
sys.argv[1:] = ["min-compression", "--model", "bert", "--bw", "10Gbps"]
sys.exit(scalemodel_launch.main())
"""


@pytest.mark.parametrize("module", [
    "scalemodel.model",  # the package's own import
    "datetime",  # imported by numpy's C extension, which turns the interrupt into an
                 # ImportError
    "scalemodel.planner"])
def test_ctrl_c_while_the_package_imports_is_one_line(module):
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    proc = subprocess.run([sys.executable, "-c", CHILD.format(module=module)],
                          capture_output=True, text=True, env=env, timeout=120)
    assert proc.returncode == 130, (proc.returncode, proc.stderr[-2000:])
    assert proc.stderr == "scalemodel: interrupted\n"
    assert proc.stdout == ""


def test_the_console_script_is_the_launcher():
    """The installed ``scalemodel`` command runs :func:`scalemodel_launch.main`, which
    hands over to :func:`scalemodel.cli.main` with Python's own Ctrl-C handler back."""
    import scalemodel_launch

    proc = subprocess.run([sys.executable, "-c", "import signal, sys, scalemodel_launch; "
                           "sys.argv[1:] = ['--version']; code = scalemodel_launch.main(); "
                           "assert signal.getsignal(signal.SIGINT) is "
                           "signal.default_int_handler; sys.exit(code)"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert callable(scalemodel_launch.main)
    exe = shutil.which("scalemodel")
    if exe is None:
        pytest.skip("the scalemodel console script is not on PATH")
    with open(exe, encoding="utf-8", errors="replace") as fh:
        assert "scalemodel_launch" in fh.read()
