"""Measured runs, as :func:`~scalemodel.fit_cluster` takes them: validated one by one.

A run names its ``model`` (built-in name, profile file or profile), the worker count ``n``
and line rate ``bw`` [bits/s] and either its ``scaling_factor`` or its ``iteration_time``
[s]; see :mod:`scalemodel.fitting` for the optional keys. :func:`load_runs` reads a list of
mappings or a CSV file whose header names the keys.
"""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path

import attrs

from ._jsonfile import read_text_file
from .exceptions import InvalidParameterError, ParameterTypeError, ProfileFormatError
from .profiles import WorkloadProfile, load_profile
from .units import check_count, parse_bandwidth

__all__ = ["Run", "load_runs", "DEFAULT_UNCERTAINTY"]

DEFAULT_UNCERTAINTY = 0.02
"""Relative standard uncertainty of a measured iteration time when a run does not say:
2 %, the run-to-run spread typical of throughput benchmarks (and about the reading error
of the published figures scalemodel validates on) [-]."""


_RUN_KEYS = {"model", "n", "bw", "scaling_factor", "iteration_time", "single_worker_time",
             "compute_time", "fusion", "algorithm", "uncertainty", "label"}


# --------------------------------------------------------------------------- runs


@attrs.frozen(eq=False)
class Run:
    """One measured run, validated.

    Attributes
    ----------
    label : str
        Name for reports.
    profile : WorkloadProfile
        The workload.
    n : int
        Workers [workers].
    bw : float
        Line rate [bits/s].
    scaling_factor : float or None
        Measured scaling factor [-].
    iteration_time : float or None
        Measured iteration time [s].
    single_worker_time : float or None
        Measured single-worker iteration time [s].
    compute_time : float or None
        Forward + backward measured in this run, per iteration (every micro-batch's) [s].
    fusion, algorithm : str or None
        This run's fusion and collective, if they differ from the fit's [-].
    uncertainty : float
        Relative standard uncertainty of the measured time [-].
    """

    label: str
    profile: WorkloadProfile
    n: int
    bw: float
    scaling_factor: float | None
    iteration_time: float | None
    single_worker_time: float | None
    compute_time: float | None
    fusion: object
    algorithm: object
    uncertainty: float

    @property
    def measured_sf(self):
        """Measured scaling factor, or None when only an absolute time is known [-]."""
        if self.scaling_factor is not None:
            return self.scaling_factor
        if self.iteration_time is not None and self.single_worker_time is not None:
            return self.single_worker_time / self.iteration_time
        return None


def _num(run_i, key, value, *, positive=True, allow_none=True):
    name = f"runs[{run_i}].{key}"
    if value is None or (isinstance(value, str) and not value.strip()):
        if allow_none:
            return None
        raise InvalidParameterError(name, value, "is required")
    if isinstance(value, bool):
        raise ParameterTypeError(name, value, "a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise ParameterTypeError(name, value, "a number") from None
    if not math.isfinite(v) or (positive and v <= 0):
        raise InvalidParameterError(name, value, "must be finite and > 0")
    return v


def _one_run(i, raw) -> Run:
    if not isinstance(raw, dict):
        raise ParameterTypeError(f"runs[{i}]", raw, "a mapping with model, n, bw and "
                                 "scaling_factor or iteration_time")
    unknown = set(raw) - _RUN_KEYS
    if unknown:
        raise InvalidParameterError(f"runs[{i}]", sorted(unknown), "has unknown keys",
                                    f"Known keys: {', '.join(sorted(_RUN_KEYS))}")
    label = str(raw.get("label") or f"run {i}")
    if raw.get("model") in (None, ""):
        raise InvalidParameterError(f"runs[{i}].model", raw.get("model"), "is required")
    try:
        profile = load_profile(raw["model"])
    except (InvalidParameterError, ParameterTypeError, ProfileFormatError) as exc:
        raise _renamed(exc, f"runs[{i}].model") from None
    try:
        n = check_count(int(float(raw["n"])) if isinstance(raw.get("n"), str) else raw.get("n"),
                        f"runs[{i}].n")
    except (TypeError, ValueError) as exc:
        if isinstance(exc, (InvalidParameterError, ParameterTypeError)):
            raise
        raise ParameterTypeError(f"runs[{i}].n", raw.get("n"), "an integer >= 1") from None
    if not isinstance(n, int):
        raise ParameterTypeError(f"runs[{i}].n", raw.get("n"), "one integer")
    bw = parse_bandwidth(raw.get("bw"), f"runs[{i}].bw")
    if not isinstance(bw, float):
        raise ParameterTypeError(f"runs[{i}].bw", raw.get("bw"), "one line rate")
    sf = _num(i, "scaling_factor", raw.get("scaling_factor"))
    it = _num(i, "iteration_time", raw.get("iteration_time"))
    t1 = _num(i, "single_worker_time", raw.get("single_worker_time"))
    tc = _num(i, "compute_time", raw.get("compute_time"))
    unc = _num(i, "uncertainty", raw.get("uncertainty")) or DEFAULT_UNCERTAINTY
    if sf is None and it is None:
        raise InvalidParameterError(f"runs[{i}]", label, "needs scaling_factor or "
                                    "iteration_time [s]")
    if sf is not None and not 0 < sf <= 1:
        raise InvalidParameterError(f"runs[{i}].scaling_factor", raw.get("scaling_factor"),
                                    "must be in (0, 1] (a fraction, not a percentage)")
    if it is not None and t1 is not None and it < t1 * (1 - 1e-9):
        raise InvalidParameterError(f"runs[{i}].iteration_time", raw.get("iteration_time"),
                                    f"is shorter than the single-worker time {t1:g} s: a "
                                    "distributed iteration cannot be faster")
    if it is not None and tc is not None and it < tc * (1 - 1e-9):
        raise InvalidParameterError(f"runs[{i}].iteration_time", raw.get("iteration_time"),
                                    f"is shorter than its own compute time {tc:g} s")
    if it is not None and t1 is None and sf is None:
        compute = profile.grad_accum * (profile.forward_time + profile.backward_time)
        if it < compute * (1 - 1e-9):
            raise InvalidParameterError(
                f"runs[{i}].iteration_time", raw.get("iteration_time"),
                f"is shorter than the profile's single-worker compute {compute:g} s",
                "Give single_worker_time, or a profile measured on this hardware")
    return Run(label=label, profile=profile, n=n, bw=bw, scaling_factor=sf,
               iteration_time=it, single_worker_time=t1, compute_time=tc,
               fusion=raw.get("fusion") or None, algorithm=raw.get("algorithm") or None,
               uncertainty=unc)


def _renamed(exc, name):
    """The same error, naming the run's field."""
    if isinstance(exc, ProfileFormatError):
        return exc
    if isinstance(exc, ParameterTypeError):
        return ParameterTypeError(name, exc.value, getattr(exc, "expected", "a model"))
    new = type(exc).__new__(type(exc))
    Exception.__init__(new, str(exc).replace(f"{exc.parameter}=", f"{name}=", 1))
    new.parameter, new.value = name, exc.value
    return new


def load_runs(runs) -> list[Run]:
    """Validate a list of run mappings, or read them from a CSV file.

    Parameters
    ----------
    runs : list of dict, str or os.PathLike
        The runs (see the module) or a CSV file whose header names the keys [-].

    Returns
    -------
    list of Run
        The validated runs.
    """
    if isinstance(runs, (str, os.PathLike)):
        path = Path(runs)
        if not os.path.lexists(path):
            raise InvalidParameterError("runs", os.fspath(runs), "no such file")
        text = read_text_file(path, what="run list", max_bytes=16 * 2**20)
        try:
            rows = list(csv.DictReader(io.StringIO(text, newline="")))
        except csv.Error as exc:
            raise ProfileFormatError(str(path), "<csv>", f"not a readable CSV: {exc}") from None
        base = path.parent
        for row in rows:
            row.pop(None, None)  # cells beyond the header
            if row.get("model") and not os.path.isabs(row["model"]) and \
                    (base / row["model"]).is_file():
                row["model"] = str(base / row["model"])
            for k in list(row):
                if row[k] is None or (isinstance(row[k], str) and not row[k].strip()):
                    row[k] = None
        runs = rows
    if isinstance(runs, dict) or not hasattr(runs, "__iter__"):
        raise ParameterTypeError("runs", runs, "a list of run mappings or a CSV path")
    runs = list(runs)
    if not runs:
        raise InvalidParameterError("runs", runs, "needs at least one run")
    return [_one_run(i, r) for i, r in enumerate(runs)]
