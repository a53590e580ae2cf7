"""The design guide's equations render offline: MathJax ships with the HTML.

A one-page Sphinx project with the math extensions of ``docs/conf.py`` is built; its page
must load MathJax from ``_static/`` (no CDN), and, where Debian's ``chromium`` is
installed, a headless browser with its network off must typeset every equation.
Needs the ``docs`` extra (sphinx and sphinx-mathjax-offline); skipped without it.
"""

import ast
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra: pip install -e '.[docs]'")

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow  # a Sphinx build and a browser

PAGE = """\
Offline math
============

.. math::
   :label: sf

   S(n) = \\frac{T_1}{T_n}

Inline :math:`\\alpha + \\beta m` and :math:`B_\\text{eff}`, and eq. :eq:`sf`.
"""


def guide_math_extensions():
    """The math extensions ``docs/conf.py`` enables."""
    tree = ast.parse((ROOT / "docs" / "conf.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "extensions"
                                                for t in node.targets):
            return [e for e in ast.literal_eval(node.value) if "math" in e]
    raise AssertionError("docs/conf.py sets no extensions")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    exts = guide_math_extensions()
    if importlib.util.find_spec("sphinx-mathjax-offline") is None:
        pytest.skip("sphinx-mathjax-offline is not installed (the docs extra)")
    src = tmp_path_factory.mktemp("src")
    (src / "conf.py").write_text(f"extensions = {exts!r}\nmath_numfig = True\n")
    (src / "index.rst").write_text(PAGE)
    out = src / "_build"
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html",
                           str(src), str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return out


def test_mathjax_is_shipped_not_fetched(built):
    html = (built / "index.html").read_text()
    scripts = re.findall(r'<script[^>]*src="([^"]*)"', html)
    mathjax = [s for s in scripts if "mathjax" in s.lower()]
    assert mathjax, scripts
    assert all(not s.startswith(("http:", "https:", "//")) for s in mathjax), mathjax
    for s in mathjax:
        assert (built / s.split("?")[0]).is_file(), s
    # MathJax loads its fonts and components relative to itself: they are there too
    assert list((built / "_static" / "mathjax").rglob("*.woff"))


def test_equations_render_in_a_browser_without_network(built, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here (Debian package chromium)")
    proc = subprocess.run(
        [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}",
         "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
         "--virtual-time-budget=20000", "--dump-dom", (built / "index.html").as_uri()],
        capture_output=True, text=True, timeout=180)
    dom = proc.stdout
    assert "Offline math" in dom, proc.stderr[-2000:]
    # one display equation and two inline ones, each typeset by MathJax
    assert dom.count("<mjx-container") == 3, dom[:3000]
    assert "\\frac" not in dom and "\\alpha" not in dom  # no raw LaTeX left
