"""The design guide's equations render offline: MathJax ships with the HTML; and no page
of the guide shows an error box.

A one-page Sphinx project with the math extensions of ``docs/conf.py`` is built; its page
must load MathJax from ``_static/`` (no CDN), and, where Debian's ``chromium`` is
installed, a headless browser with its network off must typeset every equation.
The whole guide is built too (``-W -n``): no page may carry an error box (a docutils
system message, a problematic reference, or a ``.. contents::`` block, which Furo paints
as a red "ERROR: Adding a table of contents ..." box although the build passes), and,
with ``chromium``, every page is opened in the headless browser, which must log no
console error. Needs the ``docs`` extra (sphinx and sphinx-mathjax-offline); skipped
without it.
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


# --------------------------------------------------------------------------- the whole guide

# what a reader sees as an error box: docutils' system messages and unresolved references,
# an "error" admonition, and Furo's red box over a table of contents (``.. contents::``)
ERROR_BOXES = {
    "a docutils system message": re.compile(r'class="[^"]*\bsystem-message\b'),
    "a problematic reference": re.compile(r'class="[^"]*\bproblematic\b'),
    "an error admonition": re.compile(r'class="[^"]*\badmonition\b[^"]*\berror\b'),
    "a table of contents (Furo's red error box)": re.compile(
        r'class="(?![^"]*this-will-duplicate-information)[^"]*\bcontents\b[^"]*"'),
}


@pytest.fixture(scope="module")
def guide(tmp_path_factory):
    """The design guide, built as the README says (``-W -n``)."""
    if importlib.util.find_spec("sphinx-mathjax-offline") is None:
        pytest.skip("sphinx-mathjax-offline is not installed (the docs extra)")
    out = tmp_path_factory.mktemp("guide")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "-n", "-q", "-b", "html",
                           str(ROOT / "docs"), str(out)], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


def guide_pages(built):
    """The built page of every ``docs/*.rst`` file [paths]."""
    pages = [built / f"{src.stem}.html" for src in sorted((ROOT / "docs").glob("*.rst"))]
    assert pages and all(p.is_file() for p in pages), [p for p in pages if not p.is_file()]
    return pages


def error_boxes(html):
    return [what for what, pattern in ERROR_BOXES.items() if pattern.search(html)]


def test_the_error_box_patterns_find_what_they_are_for():
    assert error_boxes('<nav class="contents local" id="on-this-page">') == \
        ["a table of contents (Furo's red error box)"]
    assert error_boxes('<div class="system-message">') == ["a docutils system message"]
    assert error_boxes('<div class="admonition error">') == ["an error admonition"]
    assert error_boxes('<nav class="contents this-will-duplicate-information-and-it-is-'
                       'still-useful-here">') == []
    assert error_boxes('<div class="content"><div class="toc-tree">') == []


def test_no_page_of_the_guide_has_an_error_box(guide):
    found = {p.name: error_boxes(p.read_text(encoding="utf-8")) for p in guide_pages(guide)}
    assert not {k: v for k, v in found.items() if v}


def test_every_page_of_the_guide_opens_without_error_in_a_browser(guide, tmp_path):
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.skip("no chromium here (Debian package chromium)")
    problems = {}
    for page in guide_pages(guide):
        proc = subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
             "--no-first-run", "--disable-background-networking",
             "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
             "--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>",
             "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
            capture_output=True, text=True, timeout=180)
        # console messages of the page (uncaught exceptions, console.error, failed loads)
        console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line
                   and re.search(r"Uncaught|Error|error|Failed to load", line)]
        boxes = error_boxes(proc.stdout)
        if "</html>" not in proc.stdout:
            boxes.append("the page did not load")
        if console or boxes:
            problems[page.name] = boxes + console[:3]
    assert not problems, problems
