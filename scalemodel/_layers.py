"""The package's layers, bottom to top: a module imports only from its own layer or below.

Every module of ``scalemodel`` is in exactly one layer of :data:`LAYERS`.
``tests/test_layers.py`` checks the rule on every import statement, at the top of a module
or inside a function (parsed with ``ast``; importing ``scalemodel.calibrate.fit`` also
imports the ``scalemodel.calibrate`` package), and imports the modules layer by layer in a
fresh interpreter, with the package's ``__init__`` (the public facade, layer ``"api"``)
skipped, to see that none pulls in a module above it. Modules inside one layer may import
each other; across layers the stack is one-way.

The LLM side (GPU specs in ``"hardware and network"``; configurations, Hugging Face key
names and the default efficiency in ``"llm"``; memory and the job settings that change it
in ``"job"``) sits under the model. The profile record and its file format
(:mod:`scalemodel.profile_format`) sit under the LLM configurations, which build profiles;
name resolution (:func:`scalemodel.load_profile`: built-in files, aliases, LLM names,
paths) sits above them, in :mod:`scalemodel.profiles`.
"""

from __future__ import annotations

LAYERS = (
    ("foundation", ("exceptions", "units", "_jsonfile", "fit_priors", "derivations",
                    "_layers")),
    ("hardware and network", ("hardware", "nccl", "topology", "overlap", "hostcosts")),
    ("collectives", ("collectives", "fusion", "knobs")),
    ("profile record", ("profile_format",)),
    ("llm", ("efficiency", "hf_configs", "workloads")),
    ("profiles", ("profiles",)),
    ("job", ("parallel", "checkpointing", "offload", "memory", "sharding")),
    ("cluster", ("discrepancy", "cluster")),
    ("compression", ("compressors", "codec_costs")),
    ("model", ("model", "intervals", "framework")),
    ("solvers", ("solvers", "sensitivity", "buckets", "whatif")),
    ("planner", ("planner", "plot")),
    ("calibration", ("runs", "fit_problem", "fit_codec", "fit_transport", "fitting",
                     "calibrate", "calibrate.fit", "calibrate.nccl_tests",
                     "calibrate.overhead", "calibrate.uncertainty", "calibrate.trace",
                     "calibrate.trace_read", "calibrate.trace_analysis",
                     "calibrate.trace_report", "calibrate.compute", "calibrate.models",
                     "calibrate.transport", "calibrate.scaling", "calibrate.netem",
                     "calibrate.codec_bench", "calibrate.wrapper", "calibrate._parser")),
    ("api", ("",)),
    ("cli", ("cli", "__main__", "calibrate.__main__")),
)
"""``(name, modules)`` bottom to top; modules relative to ``scalemodel`` (``""`` is the
package itself, its ``__init__``)."""


def layer_of(module: str) -> int:
    """Index in :data:`LAYERS` of ``module`` (``"scalemodel.x"`` or ``"x"``) [-].

    Parameters
    ----------
    module : str
        A module of the package, dotted [-].

    Raises
    ------
    KeyError
        The module is in no layer.
    """
    rel = module.removeprefix("scalemodel").removeprefix(".")
    for i, (_, modules) in enumerate(LAYERS):
        if rel in modules:
            return i
    raise KeyError(module)
