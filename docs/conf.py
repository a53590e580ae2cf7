"""Sphinx configuration of the scalemodel design guide.

Build (warnings are errors, every reference must resolve)::

    python -m sphinx -W -n -b html docs docs/_build/html
    python -m sphinx -W -n -b doctest docs docs/_build/doctest

Figures and tables are computed from the library at build time by ``_ext/scalemodel_docs``
(written to the git-ignored ``docs/generated/``).

External references: the build machine has no internet, so intersphinx is not used
(it would need to download the numpy/python/sympy inventories). Instead:

* numpydoc cross-references only the types of this package (``numpydoc_xref_ignore =
  "all"`` plus the aliases below); built-in and numpy type names in parameter lists stay
  plain text;
* signatures carry no annotations (``autodoc_typehints = "none"``): the numpydoc
  Parameters sections hold the types and units;
* the few explicit roles to outside objects are listed, one by one, in ``nitpick_ignore``.
"""

from __future__ import annotations

import doctest
import sys
from datetime import date
from pathlib import Path

from numpydoc.xref import DEFAULT_LINKS

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))  # the checkout, also when it is not installed

import scalemodel  # noqa: E402

project = "scalemodel"
author = "the scalemodel developers"
copyright = f"{date.today().year}, {author}"
release = version = scalemodel.__version__

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
    # MathJax shipped with the guide (copied to _static/mathjax): the equations render
    # offline, with no request to a CDN (package sphinx-mathjax-offline, the docs extra)
    "sphinx-mathjax-offline",
    "numpydoc",
    "scalemodel_docs",  # figures and tables from the library, at build time
]

root_doc = "index"
exclude_patterns = ["_build", "generated", "_ext", "Thumbs.db", ".DS_Store"]
nitpicky = True
math_numfig = True
numfig = False

html_theme = "furo"
html_title = f"scalemodel {release} design guide"
html_show_sourcelink = False
html_static_path = ["_static"]
html_css_files = ["wrap.css"]  # long code and output lines wrap, no horizontal scrollbar

# --------------------------------------------------------------------------- autodoc
autodoc_typehints = "none"
autodoc_member_order = "bysource"
add_module_names = False

# --------------------------------------------------------------------------- numpydoc
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_xref_param_type = True
numpydoc_xref_ignore = "all"
# numpydoc's built-in aliases point into the Python and NumPy inventories (intersphinx);
# map them to themselves so they stay plain text.
numpydoc_xref_aliases = {key: key for key in DEFAULT_LINKS}
numpydoc_xref_aliases.update({
    name: f"scalemodel.{name}" for name in (
        "WorkloadProfile", "ClusterProfile", "ReductionCost", "CollectiveOptions",
        "IterationTime", "CompressionResult", "BandwidthResult", "Scenario", "DDPBuckets",
        "HorovodFusion", "PerTensor", "CompressionPlan", "PlanRow", "Sensitivities",
        "CodecCost")
})
numpydoc_xref_aliases.update({
    "CollectiveCost": "scalemodel.collectives.CollectiveCost",
    "Buckets": "scalemodel.fusion.Buckets",
    "OverlapLines": "scalemodel.overlap.OverlapLines",
    "Compressor": "scalemodel.compressors.Compressor",
    "TensorCosts": "scalemodel.compressors.TensorCosts",
    "Sharding": "scalemodel.Sharding",
    "SizeWrap": "scalemodel.SizeWrap",
    "ShardedSchedule": "scalemodel.sharding.ShardedSchedule",
    "ShardUnits": "scalemodel.sharding.ShardUnits",
})

# --------------------------------------------------------------------------- nitpicky
# Explicit roles in docstrings that point outside this project (no intersphinx here).
nitpick_ignore = [
    ("py:class", "ValueError"),  # scalemodel.exceptions module docstring
    ("py:class", "TypeError"),
    ("py:func", "sympy.latex"),  # scalemodel.derivations module docstring
]

# --------------------------------------------------------------------------- doctest
doctest_global_setup = """
import math
import numpy as np
import scalemodel
import scalemodel as sm
"""
doctest_default_flags = (doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
                         | doctest.DONT_ACCEPT_TRUE_FOR_1)
