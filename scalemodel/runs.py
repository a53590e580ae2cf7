"""Measured runs, as :func:`~scalemodel.fit_cluster` takes them: validated one by one.

A run names its ``model`` (built-in name, profile file or profile), the worker count ``n``
and line rate ``bw`` [bits/s] and one of ``scaling_factor``, ``iteration_time`` [s] or
``tokens_per_second_per_gpu`` [tokens/s]. Optional keys:

``single_worker_time`` [s]
    The same step measured on one worker without the data-parallel wrapper. It is the
    truth about the compute: the run's profile is rescaled to it
    (:meth:`~scalemodel.WorkloadProfile.scaled_to`), so the fit sees the measured
    communication-to-compute ratio. A run up to 2 % (``NOISE_TOLERANCE``) faster than it
    is measurement noise and accepted with a :class:`~scalemodel.CalibrationWarning`;
    more is an error.
``compute_time`` [s]
    Forward + backward measured inside the run, per step (every micro-batch's).
``sharding``
    ``"none"`` (default), ``"zero1"``, ``"zero2"``, ``"zero3"``, ``"hybrid_shard"`` or an
    alias (``"fsdp"``, ``"full_shard"``, ``"shard_grad_op"``, ``"hsdp"``); or a
    :class:`~scalemodel.sharding.Sharding` whose ``param_return="broadcast"`` says how
    the run returned its parameters (kept as given, its ``shard_group`` included).
``shard_group`` [GPUs]
    With ``sharding`` ``"zero1"``, ``"zero2"`` or ``"zero3"``: the state is sharded over
    groups of this many GPUs and replicated across them (InternLM's ``zero1=8``, MiCS,
    HSDP with any group; :class:`~scalemodel.sharding.Sharding`); an integer >= 2 that
    divides ``n``; blank: one group of all ``n`` GPUs.
``grad_accum``
    Micro-batches per optimizer step, an integer >= 1; default the profile's.
``wrapped``
    A single-worker run that used the data-parallel wrapper (DDP on one GPU): true or
    false (a CSV cell ``true``/``false``/``1``/``0``/``yes``/``no``); default false.
``bucket_cap_mb`` [MB]
    The DDP bucket size of this run (0: one collective per tensor); default the fusion's.
``first_bucket_mb`` [MB]
    With ``bucket_cap_mb``: the cap of DDP's first bucket. Blank: 1 (``dist.
    _DEFAULT_FIRST_BUCKET_BYTES``, PyTorch 1.x always, 2.x when no cap was passed);
    PyTorch 2.x with ``bucket_cap_mb`` passed caps the first bucket at it, and the wrapper
    step of ``python -m scalemodel.calibrate`` writes so.
``tokens_per_second_per_gpu`` [tokens/s]
    Instead of ``iteration_time``: the step time is the profile's tokens per optimizer
    step per GPU (micro-batch x sequence x ``grad_accum``; a transformer or LLM profile
    knows them) over this rate.
``tp``, ``pp``, ``microbatches``, ``virtual_stages``, ``sequence_parallel``
    A tensor- and pipeline-parallel run (:mod:`scalemodel.parallel`): integers >= 1,
    ``n`` a multiple of ``tp x pp``, ``microbatches`` required with ``pp > 1``;
    ``virtual_stages`` the model chunks per stage of Megatron's interleaved 1F1B (default
    1), ``sequence_parallel`` true or false (default false). The profile is the whole
    model's (one micro-batch); the run gives ``iteration_time`` or
    ``tokens_per_second_per_gpu`` (a replica's tokens per step over its ``tp x pp``
    GPUs), not a scaling factor.

``compressor``
    The gradient compressor the run used: a name, a spec string such as ``"topk:0.01"``
    or a :class:`~scalemodel.compressors.Compressor` (:func:`~scalemodel.get_compressor`);
    blank or ``"none"``: uncompressed. :func:`~scalemodel.fit_cluster` fits the cluster
    from the uncompressed runs and then that family's codec cost from the compressed
    ones (:mod:`scalemodel.fit_codec`).
``implementation``
    The implementation preset of the run's compressor (``"pytorch"``, ``"grace-tf"``...,
    :data:`~scalemodel.compressors.IMPLEMENTATIONS`): it sets the wire format
    (:func:`~scalemodel.compressors.for_implementation`); blank: the call's, else the
    compressor as given.

``seq`` [tokens], ``micro_batch`` [sequences], ``gpu``
    With a Hugging Face ``config.json`` as ``model`` (Llama, GPT-2, GPT-NeoX, Falcon,
    Qwen, Gemma, MPT, ... key names, :mod:`scalemodel.hf_configs`): the sequence length
    (default the config's context length), sequences per GPU per micro-batch (default
    1) and the GPU (a :func:`~scalemodel.list_gpus` name, default ``"h100-sxm"``) the
    FLOP-derived profile is built for, as the CLI's ``--seq``, ``--micro-batch`` and
    ``--gpu`` build it for a prediction; ``flash_attention`` false for a run whose
    attention writes its scores to memory (``--no-flash-attention``; default true). With
    any other model they are refused by name.

``activation_checkpointing``
    The run's activation checkpointing, as every question takes it (``none``,
    ``selective``, ``full``, ``full-early-stop``, true/false, or a fraction of the
    layers checkpointed fully; :func:`~scalemodel.checkpointing.resolve_checkpointing`):
    each checkpointed block's recompute is added to the run's profile
    (:func:`~scalemodel.checkpointing.with_recompute`, following the profile's attention)
    before anything is fitted, so a fitted efficiency is the one of the blocks' model
    FLOPs and a prediction asked with its own checkpointing charges its own recompute.
    Blank: none (a profile that already holds its recompute stays as it is).

``fusion``, ``algorithm``, ``uncertainty`` [-] (default 2 %) and ``label`` keep their meaning.

Every number must be finite and inside a documented range (``MIN_RUN_TIME`` to
``MAX_RUN_TIME`` for times, ``MIN_RUN_BW`` to ``MAX_RUN_BW`` for line rates,
``fusion.MAX_BUCKET_CAP_MB``); worker counts and micro-batch counts are integers, never
truncated. Bad input raises :class:`~scalemodel.InvalidParameterError` or
:class:`~scalemodel.ParameterTypeError` naming ``runs[i].<key>`` and the value.

:func:`load_runs` reads a list of mappings or a CSV file whose header names the keys
(UTF-8, a byte-order mark allowed). In a CSV, a ``model`` cell that is a path is read
relative to the CSV's folder and may not lead outside it (``..``, an absolute path, a
link pointing out) unless the caller allows another folder (``allow_folder``).
"""

from __future__ import annotations

import csv
import io
import math
import numbers
import os
import re
import warnings
from pathlib import Path

import attrs
import numpy as np

from ._jsonfile import read_text_file
from .efficiency import score_seconds
from .exceptions import (CalibrationWarning, InvalidParameterError, ParameterTypeError,
                         ProfileFormatError, ScalemodelError, UnknownNameError, renamed)
from .fusion import MAX_BUCKET_CAP_MB
from .profiles import MAX_TIME, WorkloadProfile, load_profile
from .units import check_count, parse_bandwidth

__all__ = ["Run", "load_runs", "DEFAULT_UNCERTAINTY", "NOISE_TOLERANCE", "MIN_RUN_TIME",
           "MAX_RUN_TIME", "MIN_RUN_BW", "MAX_RUN_BW"]

DEFAULT_UNCERTAINTY = 0.02
"""Relative standard uncertainty of a measured iteration time when a run does not say:
2 %, the run-to-run spread typical of throughput benchmarks (and about the reading error
of the published figures scalemodel validates on) [-]."""

NOISE_TOLERANCE = 0.02
"""How much faster than its single-worker time a distributed run may be and still be
accepted (as measurement noise, with a warning): 2 %, the default uncertainty, or the
run's own ``uncertainty`` when that is larger [-]."""

MIN_RUN_TIME = 1e-6
"""Shortest accepted iteration, single-worker or compute time of a run: a microsecond
(shorter is a unit slip) [s]."""

MAX_RUN_TIME = MAX_TIME
"""Longest accepted iteration, single-worker or compute time of a run: a day, the
longest step a profile may describe (``scalemodel.profiles.MAX_TIME``) [s]."""

MIN_RUN_BW = 1e6
"""Lowest accepted line rate of a run: 1 Mbit/s (a smaller number is almost surely a
unit slip, such as 10 for 10 Gbit/s) [bits/s]."""

MAX_RUN_BW = 1e15
"""Highest accepted line rate of a run: 1 Pbit/s [bits/s]."""



MIN_UNCERTAINTY = 1e-6
"""Smallest accepted relative uncertainty of a run: one part per million, below any
step-time measurement's noise (1e-300 made the fit fail to start, 'the fit of ceiling
failed to start', with nothing said of the uncertainty) [-]."""

MAX_UNCERTAINTY = 1.0
"""Largest accepted relative uncertainty of a run: 100 % [-]."""

_RUN_KEYS = {"model", "n", "bw", "scaling_factor", "iteration_time", "single_worker_time",
             "compute_time", "fusion", "algorithm", "uncertainty", "label", "sharding",
             "grad_accum", "wrapped", "bucket_cap_mb", "first_bucket_mb",
             "tokens_per_second_per_gpu", "shard_group",
             "compressor", "implementation", "tp", "pp", "microbatches",
             "virtual_stages", "sequence_parallel", "seq", "micro_batch", "gpu",
             "flash_attention", "activation_checkpointing"}

_TRUE = {"true", "yes", "1", "y", "t", "on"}
_FALSE = {"false", "no", "0", "n", "f", "off"}


# --------------------------------------------------------------------------- runs


@attrs.frozen(eq=False)
class Run:
    """One measured run, validated.

    Attributes
    ----------
    label : str
        Name for reports.
    profile : WorkloadProfile
        The workload to fit with: the run's ``grad_accum`` applied, and scaled to its
        ``single_worker_time`` when it gives one. Runs of the same model, accumulation
        and single-worker time share one object.
    n : int
        Workers [workers].
    bw : float
        Line rate [bits/s].
    scaling_factor : float or None
        Measured scaling factor [-].
    iteration_time : float or None
        Measured iteration time, or the one ``tokens_per_second_per_gpu`` implies [s].
    single_worker_time : float or None
        Measured single-worker iteration time [s].
    compute_time : float or None
        Forward + backward measured in this run, per iteration (every micro-batch's) [s].
    fusion, algorithm : str or None
        This run's fusion and collective, if they differ from the fit's [-].
    uncertainty : float
        Relative standard uncertainty of the measured time [-].
    sharding : str
        Canonical sharding strategy: ``"none"``, ``"zero1"``, ``"zero2"``, ``"zero3"``
        or ``"hybrid_shard"`` [-].
    shard_group : int or None
        GPUs per shard group of a ``zero1`` / ``zero2`` / ``zero3`` run; None: all ``n``
        [GPUs].
    model_parallel : ModelParallel or None
        The run's tensor and pipeline parallelism
        (:func:`~scalemodel.parallel.resolve_model_parallel`); None for a plain
        data-parallel run [-].
    grad_accum : int or None
        Micro-batches per optimizer step the run gave; None: the profile's
        (``profile.grad_accum`` is the one in effect either way) [-].
    wrapped : bool
        A single-worker run that used the data-parallel wrapper [-].
    bucket_cap_mb : float or None
        DDP bucket size of this run, 0 for one collective per tensor; None: the
        fusion's default [MB].
    first_bucket_mb : float or None
        Cap of DDP's first bucket with ``bucket_cap_mb``; None: 1 [MB].
    tokens_per_second_per_gpu : float or None
        The measured throughput the iteration time was derived from [tokens/s].
    compute_known : bool
        False when the profile's compute is derived from FLOPs (a transformer or LLM
        profile) and the run gives no ``single_worker_time``: its compute efficiency is
        then unknown and may be fitted [-].
    efficiency : float or None
        Model FLOPs utilisation a FLOP-derived profile assumes (its provenance), else
        None [-].
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
    sharding: str = "none"
    grad_accum: int | None = None
    wrapped: bool = False
    bucket_cap_mb: float | None = None
    first_bucket_mb: float | None = None
    tokens_per_second_per_gpu: float | None = None
    compute_known: bool = True
    efficiency: float | None = None
    compressor: object = None
    implementation: str | None = None
    shard_group: int | None = None
    model_parallel: object = None

    @property
    def measured_sf(self):
        """Measured scaling factor, or None when only an absolute time is known [-]."""
        if self.scaling_factor is not None:
            return self.scaling_factor
        if self.iteration_time is not None and self.single_worker_time is not None:
            return self.single_worker_time / self.iteration_time
        return None


# --------------------------------------------------------------------------- cells


def _blank(value):
    return value is None or (isinstance(value, str) and not value.strip())


def _percent(text):
    """'90%' as the fraction it means, as text ('0.9'), or '... / 100'."""
    try:
        return f"{float(text.strip()[:-1]) / 100:g}"
    except ValueError:
        return f"{text.strip()[:-1]} / 100"


def _setting(value):
    """A run's ``fusion`` or ``algorithm``: None when blank; anything else as given, for
    the fit to check (0 or [] was read as blank, the fit's own setting, without a word)."""
    return None if _blank(value) else value


def _num(run_i, key, value, *, lo=None, hi=None, unit="", positive=True, allow_none=True):
    """A run's number: finite, > 0 (``positive``) and within [lo, hi]."""
    name = f"runs[{run_i}].{key}"
    if _blank(value):
        if allow_none:
            return None
        raise InvalidParameterError(name, value, "is required")
    if isinstance(value, bool) or not isinstance(value, (str, numbers.Real)):
        raise ParameterTypeError(name, value, "a number")
    try:
        v = float(value)
    except (TypeError, ValueError):
        if isinstance(value, str):  # a CSV cell is always text: 'has type str' told nothing
            hint = (f"Write the fraction: {value.strip()[:-1]} % is "
                    f"{_percent(value)}") if value.strip().endswith("%") else ""
            raise InvalidParameterError(name, value, "is not a number", hint) from None
        raise ParameterTypeError(name, value, "a number") from None
    except OverflowError:
        v = math.inf
    if not math.isfinite(v) or (positive and v <= 0):
        if lo is not None and hi is not None:  # the range it must be in, NaN or not
            raise InvalidParameterError(name, value, f"must be a number in [{lo:g}, "
                                                     f"{hi:g}]{unit}")
        raise InvalidParameterError(name, value, "must be finite and > 0" if positive
                                    else "must be finite")
    if (lo is not None and v < lo) or (hi is not None and v > hi):
        raise InvalidParameterError(name, value, f"must be in [{lo:g}, {hi:g}]{unit}")
    return v


def _time(i, key, value):
    return _num(i, key, value, lo=MIN_RUN_TIME, hi=MAX_RUN_TIME,
                unit=" s (a microsecond to a day)")


def _int(i, key, value, *, what):
    """An integer cell: an int (not a float such as 16.5 or 16.0) or a string of one."""
    name = f"runs[{i}].{key}"
    if isinstance(value, str):
        text = value.strip()
        if not re.fullmatch(r"[+]?[0-9]{1,12}", text):
            raise InvalidParameterError(name, value, f"must be an integer >= 1 ({what})")
        value = int(text)
    elif not isinstance(value, numbers.Real):  # a list would come back as an array
        raise ParameterTypeError(name, value, f"an integer >= 1 ({what})")
    try:
        return check_count(value, name)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ScalemodelError):
            raise
        raise ParameterTypeError(name, value, f"an integer >= 1 ({what})") from None


def _bool(i, key, value):
    if _blank(value):
        return False
    if isinstance(value, (bool, np.bool_)):  # numpy's too (np.True_ was refused)
        return bool(value)
    if isinstance(value, numbers.Integral) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise InvalidParameterError(f"runs[{i}].{key}", value,
                                "must be true or false (1/0, yes/no)")


def _sharding(i, value):
    from .sharding import Sharding, resolve_sharding

    if _blank(value):
        return "none"
    if isinstance(value, Sharding) and (value.param_dtype or value.reduce_dtype):
        raise InvalidParameterError(f"runs[{i}].sharding", value, "a run takes the "
                                    "strategy only; dtypes are not supported per run")
    if isinstance(value, Sharding) and value.param_return != "allgather":
        return value  # the parameter return is part of what the run measured
    try:
        return resolve_sharding(value).strategy
    except (InvalidParameterError, ParameterTypeError) as exc:
        raise _renamed(exc, f"runs[{i}].sharding") from None


def _shard_group(i, value, sharding, n):
    """The run's ``shard_group`` (None when blank), checked against its sharding and
    ``n``; errors name ``runs[i].shard_group``."""
    from .sharding import Sharding

    if _blank(value):
        return None
    g = _int(i, "shard_group", value, what="GPUs per shard group")
    if not isinstance(g, int):
        raise ParameterTypeError(f"runs[{i}].shard_group", value, "one integer")
    try:
        if isinstance(sharding, Sharding):
            raise InvalidParameterError(f"runs[{i}].shard_group", value, "give the shard "
                                        "group inside the run's Sharding (shard_group=) "
                                        "when it sets param_return")
        Sharding(sharding, shard_group=g)
    except (InvalidParameterError, ParameterTypeError) as exc:
        raise _renamed(exc, f"runs[{i}].shard_group") from None
    if n % g:
        raise InvalidParameterError(f"runs[{i}].shard_group", value,
                                    f"must divide the run's n={n}")
    return g


def _bucket_cap(i, value):
    if _blank(value):
        return None
    v = _num(i, "bucket_cap_mb", value, positive=False, lo=0.0, hi=MAX_BUCKET_CAP_MB,
             unit=" MB (0: one collective per tensor)")
    return v


def _first_bucket(i, raw):
    value = raw.get("first_bucket_mb")
    if _blank(value):
        return None
    if _blank(raw.get("bucket_cap_mb")):
        raise InvalidParameterError(f"runs[{i}].first_bucket_mb", value,
                                    "is given without bucket_cap_mb, the cap it goes with")
    return _num(i, "first_bucket_mb", value, lo=0.0, hi=MAX_BUCKET_CAP_MB, unit=" MB")


# --------------------------------------------------------------------------- profiles


def _is_flop_derived(profile) -> bool:
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    return (str(prov.get("source", "")).startswith("FLOP-derived")
            and "scaled_to" not in prov)


def _profile_efficiency(profile):
    """The model FLOPs utilisation a FLOP-derived profile assumes, or None [-]."""
    if not _is_flop_derived(profile):
        return None
    m = re.match(r"\s*(?:published|measured|given):\s*([0-9.]+(?:[eE][-+]?[0-9]+)?)",
                 str(profile.provenance.get("efficiency", "")))
    try:
        eff = float(m.group(1)) if m else None
    except ValueError:
        return None
    return eff if eff is not None and 0 < eff <= 1 else None


def _tokens_per_step(profile):
    """Tokens per optimizer step per GPU of a profile that knows them, or None
    [tokens]."""
    cfg = profile.provenance.get("config") if isinstance(profile.provenance, dict) else None
    if not isinstance(cfg, dict):
        return None
    seq, mb = cfg.get("seq"), cfg.get("micro_batch")
    if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 1 for v in (seq, mb)):
        return None
    return float(seq * mb * profile.grad_accum)


class _Where:
    """Where a run list's ``model`` paths may lead, and the profiles loaded so far."""

    def __init__(self, base=None, allowed=None):
        self.base = base  # relative paths start here (None: as given, unconfined)
        self.allowed = allowed  # real folders a path may end in (None: anywhere)
        self.memo = {}  # (profile key, grad_accum) -> profile: runs share one object


def _base_profile(i, model, where, raw=None):
    """The run's profile as named; a path confined to ``where.allowed`` when given; a
    Hugging Face ``config.json`` built with the run's ``seq``, ``micro_batch`` and ``gpu``
    (:func:`_config_options`)."""
    if _blank(model):
        raise InvalidParameterError(f"runs[{i}].model", model, "is required")
    if where.allowed is not None and isinstance(model, (str, os.PathLike)):
        model = _confined(i, model, where)
    options = _config_options(i, raw or {})
    key = ("path", os.fspath(model)) if isinstance(model, Path) else ("obj", id(model)) \
        if isinstance(model, WorkloadProfile) else ("name", model)
    try:
        hash(key)
    except TypeError:  # a list or a dict: load_profile names it, a memo lookup raised
        key = ("obj", id(model))
    key = key + options
    if key in where.memo:
        return where.memo[key]
    where.memo[key] = _load_model(i, model, options)
    return where.memo[key]


_CONFIG_KEYS = ("seq", "micro_batch", "gpu", "flash_attention")
"""Run keys that build a Hugging Face ``config.json`` given as ``model``."""


def _config_options(i, raw):
    """``(seq, micro_batch, gpu, flash_attention)`` of a run, each None when blank:
    integers >= 1, a GPU name (checked when the profile is built) and a true/false
    [tokens, sequences, -, -]."""
    seq, mb, gpu, flash = (raw.get(k) for k in _CONFIG_KEYS)
    flash = None if _blank(flash) else _bool(i, "flash_attention", flash)
    seq = None if _blank(seq) else _int(i, "seq", seq, what="tokens per sequence")
    mb = None if _blank(mb) else _int(i, "micro_batch", mb, what="sequences per GPU")
    if _blank(gpu):
        gpu = None
    elif not isinstance(gpu, str):
        raise ParameterTypeError(f"runs[{i}].gpu", gpu, "a GPU name (scalemodel.list_gpus())")
    else:
        gpu = gpu.strip()
    return seq, mb, gpu, flash


def _load_model(i, model, options):
    """The run's profile: a Hugging Face ``config.json`` derived from FLOPs with the run's
    ``seq``, ``micro_batch`` and ``gpu`` (:func:`~scalemodel.hf_configs.load_hf_profile`),
    else :func:`~scalemodel.load_profile`, which those keys do not apply to (refused by
    the key's name)."""
    from ._jsonfile import read_json_file
    from .hf_configs import is_hf_config, load_hf_profile

    path = model if isinstance(model, (str, os.PathLike)) else None
    try:
        config = path is not None and os.fspath(path).endswith(".json") \
            and os.path.isfile(path) \
            and is_hf_config(read_json_file(path, what="workload profile or config.json"))
    except (InvalidParameterError, ParameterTypeError, ProfileFormatError) as exc:
        raise _renamed(exc, f"runs[{i}].model") from None
    if config:
        seq, mb, gpu, flash = options
        try:
            return load_hf_profile(path, seq=seq, micro_batch=mb, gpu=gpu,
                                   flash_attention=True if flash is None else flash)
        except UnknownNameError as exc:
            raise _renamed(exc, f"runs[{i}].{'gpu' if exc.parameter == 'gpu' else 'model'}") \
                from None
        except (InvalidParameterError, ParameterTypeError, ProfileFormatError) as exc:
            raise _renamed(exc, f"runs[{i}].model") from None
    given = [k for k, v in zip(_CONFIG_KEYS, options) if v is not None]
    if given:
        raise InvalidParameterError(
            f"runs[{i}].{given[0]}", options[_CONFIG_KEYS.index(given[0])],
            f"applies only when the run's model is a Hugging Face config.json (model "
            f"{os.fspath(model) if path is not None else type(model).__name__!r} is not)",
            "Leave the cell blank, or give the config.json's path as model")
    try:
        return load_profile(model)
    except (InvalidParameterError, ParameterTypeError, ProfileFormatError) as exc:
        raise _renamed(exc, f"runs[{i}].model") from None


def _confined(i, model, where):
    """``model`` as a built-in name, or as the real path of a file inside one of
    ``where.allowed`` (relative paths start at ``where.base``)."""
    from .exceptions import UnknownNameError
    from .profiles import ALIASES, list_profiles

    text = os.fspath(model)
    if "\x00" in text:  # os.path.realpath would raise a bare ValueError
        raise InvalidParameterError(f"runs[{i}].model", text, "contains a NUL byte (\\x00): "
                                    "it is neither a built-in name nor a file name")
    rel = Path(text)
    candidate = rel if rel.is_absolute() else where.base / rel
    if not os.path.lexists(candidate) and not isinstance(model, os.PathLike) \
            and _known_name(text):
        return text  # a built-in name: no file is read
    real = Path(os.path.realpath(candidate))
    if not any(real == f or real.is_relative_to(f) for f in where.allowed):
        allowed = " or ".join(str(f) for f in where.allowed)
        what = "the run list's folder" if where.allowed == [where.base] else \
            "the allowed folders"
        raise InvalidParameterError(
            f"runs[{i}].model", text, f"leads outside {what} ({allowed})",
            "Give a built-in name or a profile path inside that folder; to allow another "
            "folder, pass allow_folder=")
    if not os.path.lexists(real):
        raise UnknownNameError(f"runs[{i}].model", text, list_profiles(), aliases=ALIASES,
                               extra=f"or the path of a profile file in {where.base} (no "
                                     "such file there)")
    return real


def _known_name(text):
    from .profiles import ALIASES, list_profiles
    from .workloads import _llm_key

    key = text.strip().lower()
    names = set(list_profiles())
    return ALIASES.get(key, key) in names or _llm_key(key) in names


# --------------------------------------------------------------------------- one run


def _one_run(i, raw, where) -> Run:
    if not isinstance(raw, dict):
        raise ParameterTypeError(f"runs[{i}]", raw, "a mapping with model, n, bw and "
                                 "scaling_factor or iteration_time")
    unknown = set(raw) - _RUN_KEYS
    if unknown:
        raise InvalidParameterError(f"runs[{i}]", sorted(map(str, unknown)),
                                    "has unknown keys",
                                    f"Known keys: {', '.join(sorted(_RUN_KEYS))}")
    for key in ("model", "n", "bw"):
        if _blank(raw.get(key)):
            raise InvalidParameterError(f"runs[{i}].{key}", raw.get(key), "is missing: every "
                                        "run needs model, n and bw (in a CSV, a short row "
                                        "or an empty cell)")
    label = raw.get("label")
    label = f"run {i}" if _blank(label) else str(label)
    base = _base_profile(i, raw.get("model"), where, raw)
    n = _int(i, "n", raw.get("n"), what="a worker count")
    if not isinstance(n, int):
        raise ParameterTypeError(f"runs[{i}].n", raw.get("n"), "one integer")
    bw = _line_rate(i, raw.get("bw"))
    accum = None if _blank(raw.get("grad_accum")) else \
        _int(i, "grad_accum", raw.get("grad_accum"), what="micro-batches per step")
    if accum is not None and not isinstance(accum, int):
        raise ParameterTypeError(f"runs[{i}].grad_accum", raw.get("grad_accum"), "one integer")
    profile = _recomputing(i, _accumulating(i, base, accum, where.memo),
                           raw.get("activation_checkpointing"), where.memo)
    mp = _model_parallel(i, raw, profile, n)
    t = _measured(i, raw, label, profile, mp)
    efficiency = _profile_efficiency(profile)
    if t["single_worker_time"] is not None:
        profile = profile.scaled_to(t["single_worker_time"])
    compute_known = not (_is_flop_derived(base) and t["single_worker_time"] is None)
    _check_against_compute(i, raw, t, profile,
                           None if compute_known else (efficiency or 1.0), mp)
    return Run(label=label, profile=profile, n=n, bw=bw, **t,
               fusion=_setting(raw.get("fusion")), algorithm=_setting(raw.get("algorithm")),
               sharding=_sharding(i, raw.get("sharding")), grad_accum=accum,
               shard_group=_shard_group(i, raw.get("shard_group"),
                                        _sharding(i, raw.get("sharding")), n),
               wrapped=_bool(i, "wrapped", raw.get("wrapped")),
               bucket_cap_mb=_bucket_cap(i, raw.get("bucket_cap_mb")),
               first_bucket_mb=_first_bucket(i, raw),
               compute_known=compute_known, efficiency=efficiency, model_parallel=mp,
               **_compression(i, raw.get("compressor"), raw.get("implementation")))


def _model_parallel(i, raw, profile, n):
    """The run's tensor and pipeline parallelism, or None for a plain data-parallel run;
    errors name ``runs[i].<key>``."""
    from .parallel import resolve_model_parallel

    keys = ("tp", "pp", "microbatches", "virtual_stages")
    if all(_blank(raw.get(k)) for k in (*keys, "sequence_parallel")):
        return None
    given = {}
    for key, what in zip(keys, ("GPUs", "stages", "micro-batches per step",
                                "model chunks per stage")):
        if not _blank(raw.get(key)):
            v = _int(i, key, raw.get(key), what=what)
            if not isinstance(v, int):
                raise ParameterTypeError(f"runs[{i}].{key}", raw.get(key), "one integer")
            given[key] = v
    sequence_parallel = _bool(i, "sequence_parallel", raw.get("sequence_parallel"))
    try:
        mp = resolve_model_parallel(given.get("tp", 1), given.get("pp", 1),
                                    given.get("microbatches"), profile.grad_accum,
                                    given.get("virtual_stages", 1), sequence_parallel)
    except (InvalidParameterError, ParameterTypeError) as exc:
        raise _renamed(exc, f"runs[{i}].{exc.parameter}") from None
    if not mp.active and mp.microbatches == profile.grad_accum:
        return None
    if n % mp.size:
        raise InvalidParameterError(f"runs[{i}].n", n, f"must be a multiple of tp x pp = "
                                    f"{mp.size} (whole replicas)")
    for key in ("scaling_factor", "single_worker_time"):
        if not _blank(raw.get(key)):
            raise InvalidParameterError(
                f"runs[{i}].{key}", raw.get(key), "is not taken from a tensor- or "
                "pipeline-parallel run (its single-worker reference would be one replica "
                "of tp x pp GPUs)", "Give iteration_time [s] or tokens_per_second_per_gpu")
    return mp


def _compression(i, compressor, implementation) -> dict:
    """The run's ``compressor`` (None when uncompressed) with its ``implementation``'s wire
    format, errors naming ``runs[i].compressor`` / ``runs[i].implementation``."""
    from .compressors import for_implementation, get_compressor, resolve_implementation

    impl = None
    if not _blank(implementation):
        try:
            impl = resolve_implementation(implementation, f"runs[{i}].implementation").name
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise _renamed(exc, f"runs[{i}].implementation") from None
    if _blank(compressor):
        return {"compressor": None, "implementation": impl}
    name = f"runs[{i}].compressor"
    comp = get_compressor(compressor.strip() if isinstance(compressor, str) else compressor,
                          name)
    if impl is not None:
        comp = for_implementation(comp if not isinstance(compressor, str) else
                                  compressor.strip(), impl, name)
    return {"compressor": None if comp.name == "none" else comp, "implementation": impl}


def _line_rate(i, value):
    name = f"runs[{i}].bw"
    bw = parse_bandwidth(value, name)
    if not isinstance(bw, float):
        raise ParameterTypeError(name, value, "one line rate")
    if not MIN_RUN_BW <= bw <= MAX_RUN_BW:
        raise InvalidParameterError(name, value, f"must be in [{MIN_RUN_BW:g}, "
                                    f"{MAX_RUN_BW:g}] bits/s (1 Mbit/s to 1 Pbit/s)",
                                    "A bare number is bits/s: write '10Gbps' or 10e9")
    return bw


def _accumulating(i, profile, accum, memo):
    if accum is None:
        return profile
    key = ("accum", id(profile), accum)
    if key not in memo:
        try:
            memo[key] = profile.with_grad_accum(accum)
        except (InvalidParameterError, ProfileFormatError) as exc:
            raise InvalidParameterError(f"runs[{i}].grad_accum", accum, str(exc)) from None
    return memo[key]


def _recomputing(i, profile, value, memo):
    """``profile`` with the run's ``activation_checkpointing`` recompute (itself when
    blank or none); errors name ``runs[i].activation_checkpointing``."""
    from .checkpointing import resolve_checkpointing, with_recompute

    if _blank(value):
        return profile
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            value = text if text.lower() not in _TRUE | _FALSE else text.lower() in _TRUE
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    flash = "attention_scores" not in prov  # the profile's own attention
    try:
        ck = resolve_checkpointing(value, flash)
        key = ("recompute", id(profile), ck)
        if ck.mode != "none" and key not in memo:
            memo[key] = with_recompute(profile, value, flash)  # its errors name value
    except (InvalidParameterError, ParameterTypeError) as exc:
        raise _renamed(exc, f"runs[{i}].activation_checkpointing") from None
    return profile if ck.mode == "none" else memo[key]


def _measured(i, raw, label, profile, mp=None) -> dict:
    """The run's measured numbers, checked against each other; the iteration time from
    ``tokens_per_second_per_gpu`` when that is what the run gives."""
    sf = _num(i, "scaling_factor", raw.get("scaling_factor"))
    it = _time(i, "iteration_time", raw.get("iteration_time"))
    tps = _num(i, "tokens_per_second_per_gpu", raw.get("tokens_per_second_per_gpu"))
    t1 = _time(i, "single_worker_time", raw.get("single_worker_time"))
    tc = _time(i, "compute_time", raw.get("compute_time"))
    unc = _num(i, "uncertainty", raw.get("uncertainty"), lo=MIN_UNCERTAINTY,
               hi=MAX_UNCERTAINTY,
               unit=" (a fraction: 0.02 is 2 %)") or DEFAULT_UNCERTAINTY
    if tps is not None:
        if it is not None:
            raise InvalidParameterError(f"runs[{i}].tokens_per_second_per_gpu",
                                        raw.get("tokens_per_second_per_gpu"),
                                        "is given together with iteration_time",
                                        "Give one of the two")
        it = _from_tokens(i, raw, label, profile, tps, mp)
    if sf is not None and it is not None:
        # the cluster fit would take the scaling factor and the codec fit the time
        key = "iteration_time" if tps is None else "tokens_per_second_per_gpu"
        raise InvalidParameterError(f"runs[{i}].scaling_factor", raw.get("scaling_factor"),
                                    f"is given together with {key}={raw.get(key)!r}: one "
                                    "of them would be ignored",
                                    "Give one of the two (an absolute time with "
                                    "single_worker_time measures the scaling factor too)")
    if sf is None and it is None:
        raise InvalidParameterError(f"runs[{i}]", label, "needs scaling_factor or "
                                    "iteration_time [s] (or tokens_per_second_per_gpu "
                                    "[tokens/s])")
    if sf is not None:
        _check_sf(i, raw, label, sf, t1 if t1 is not None else profile.iteration_time)
    if it is not None and t1 is not None and it < t1:
        key = "iteration_time" if tps is None else "tokens_per_second_per_gpu"
        _faster_than_single(i, label, key, raw.get(key), it / t1,
                            f"the single-worker time {t1:g} s", max(NOISE_TOLERANCE, unc))
    if it is not None and tc is not None and it < tc * (1 - 1e-9):
        raise InvalidParameterError(f"runs[{i}].iteration_time", raw.get("iteration_time", it),
                                    f"is shorter than its own compute time {tc:g} s")
    return {"scaling_factor": sf, "iteration_time": it, "single_worker_time": t1,
            "compute_time": tc, "uncertainty": unc, "tokens_per_second_per_gpu": tps}


def _from_tokens(i, raw, label, profile, tps, mp=None):
    tokens = _tokens_per_step(profile)
    if tokens is not None and mp is not None:  # a replica's step over its tp x pp GPUs
        tokens = tokens / profile.grad_accum * mp.microbatches / mp.size
    name = f"runs[{i}].tokens_per_second_per_gpu"
    if tokens is None:
        raise InvalidParameterError(
            name, raw.get("tokens_per_second_per_gpu"),
            f"needs the profile's tokens per step, and {profile.name!r} does not know "
            f"them (run {label!r})",
            "Give iteration_time [s] instead, or use a transformer or LLM profile "
            "(scalemodel.workloads.transformer_profile), whose provenance records its "
            "sequence length and micro-batch")
    it = tokens / tps
    if not MIN_RUN_TIME <= it <= MAX_RUN_TIME:
        raise InvalidParameterError(name, raw.get("tokens_per_second_per_gpu"),
                                    f"makes a step of {it:g} s ({tokens:g} tokens per step "
                                    f"per GPU), outside [{MIN_RUN_TIME:g}, {MAX_RUN_TIME:g}] s")
    return it


def _check_sf(i, raw, label, sf, t1):
    name = f"runs[{i}].scaling_factor"
    if sf > 1:
        if sf > 1 / (1 - NOISE_TOLERANCE):
            raise InvalidParameterError(name, raw.get("scaling_factor"),
                                        "must be in (0, 1] (a fraction, not a percentage)")
        _faster_than_single(i, label, "scaling_factor", raw.get("scaling_factor"), 1 / sf,
                            "its single-worker time")
    if not t1 / sf <= MAX_RUN_TIME:
        raise InvalidParameterError(name, raw.get("scaling_factor"),
                                    f"makes a step of {t1 / sf:g} s from a single-worker "
                                    f"step of {t1:g} s: more than {MAX_RUN_TIME:g} s (a day)")


def _faster_than_single(i, label, key, value, ratio, what, tolerance=NOISE_TOLERANCE):
    """A distributed step ``ratio`` (< 1) of the single-worker one: noise within
    ``tolerance`` (:data:`NOISE_TOLERANCE`, or the run's larger uncertainty; a warning),
    an error beyond."""
    if ratio < 1 - tolerance:
        raise InvalidParameterError(f"runs[{i}].{key}", value,
                                    f"is {100 * (1 - ratio):.3g} % faster than {what}: a "
                                    "distributed iteration cannot be faster (up to "
                                    f"{100 * tolerance:.3g} % is taken as noise)")
    warnings.warn(CalibrationWarning(
        f"run {label!r} (runs[{i}].{key}={value!r}) is {100 * (1 - ratio):.2g} % faster "
        f"than {what}: taken as measurement noise (up to {100 * tolerance:.3g} % is)"),
        stacklevel=5)


def _check_against_compute(i, raw, t, profile, efficiency, mp=None):
    """A run with only an iteration time may not be faster than the profile's compute;
    with a FLOP-derived profile (``efficiency`` given), than that compute at 100 %
    utilisation; with tensor and pipeline parallelism (``mp``), than one GPU's share of
    the step's micro-batches (its collectives and bubble only add)."""
    it = t["iteration_time"]
    if it is None or t["single_worker_time"] is not None or t["scaling_factor"] is not None:
        return
    key = "iteration_time" if t["tokens_per_second_per_gpu"] is None \
        else "tokens_per_second_per_gpu"
    value = raw.get(key)
    steps = profile.grad_accum if mp is None else mp.microbatches / mp.size
    compute = steps * (profile.forward_time + profile.backward_time)
    # the score passes of a non-flash attention are memory-bound: no efficiency speeds them
    scores = score_seconds(profile) / profile.grad_accum * steps
    if efficiency is None:
        if it < compute * (1 - 1e-9):
            raise InvalidParameterError(
                f"runs[{i}].{key}", value,
                f"makes a step shorter than the profile's single-worker compute "
                f"{compute:g} s", "Give single_worker_time, or a profile measured on this "
                "hardware")
    elif it < (at_peak := scores + (compute - scores) * efficiency) * (1 - 1e-9):
        raise InvalidParameterError(
            f"runs[{i}].{key}", value,
            f"makes a step shorter than the profile's compute at 100 % of the GPU's peak "
            f"({at_peak:g} s): a model FLOPs utilisation above 1",
            "Check the units, the GPU and the profile's sequence length and micro-batch")


_renamed = renamed  # (scalemodel.exceptions; the run's field as the name)


# --------------------------------------------------------------------------- lists


def load_runs(runs, *, allow_folder=None) -> list[Run]:
    """Validate a list of run mappings, or read them from a CSV file (see the module).

    Parameters
    ----------
    runs : list of dict, str or os.PathLike
        The runs or a CSV file whose header names the keys (UTF-8, a byte-order mark
        allowed) [-].
    allow_folder : str, os.PathLike, list of them, or None
        Folders that a ``model`` path may lead into besides a CSV's own folder (paths in
        a CSV are relative to its folder). Given with a list of mappings, their
        ``model`` paths are confined to these folders too; None: a CSV's paths stay in
        its folder and a list's paths are not confined [path].

    Returns
    -------
    list of Run
        The validated runs.

    Raises
    ------
    InvalidParameterError, ParameterTypeError
        A bad run: names ``runs[i].<key>`` and the value.
    ProfileFormatError
        The CSV is unreadable, empty, without a header naming model, n or bw, or without
        rows, a row has more cells than the header, or the last line looks cut off
        (fewer cells than the header and no line break after it, or a quoted cell that
        never closes); names the row.
    """
    extra = _allowed_folders(allow_folder)
    if isinstance(runs, (str, os.PathLike)):
        base = Path(os.path.realpath(Path(runs).parent))
        where = _Where(base, [base] + extra)
        runs = _read_csv(runs)
    else:
        where = _Where(Path.cwd(), extra) if extra else _Where()
    if isinstance(runs, dict) or not hasattr(runs, "__iter__"):
        raise ParameterTypeError("runs", runs, "a list of run mappings or a CSV path")
    runs = list(runs)
    if not runs:
        raise InvalidParameterError("runs", runs, "needs at least one run")
    return [_one_run(i, r, where) for i, r in enumerate(runs)]


def _allowed_folders(allow_folder):
    if allow_folder is None:
        return []
    items = [allow_folder] if isinstance(allow_folder, (str, os.PathLike)) else allow_folder
    try:
        items = list(items)
    except TypeError:
        raise ParameterTypeError("allow_folder", allow_folder,
                                 "a folder path or a list of them") from None
    out = []
    for f in items:
        if not isinstance(f, (str, os.PathLike)) or not os.fspath(f).strip():
            raise ParameterTypeError("allow_folder", f, "a folder path")
        real = Path(os.path.realpath(f))
        if not real.is_dir():
            raise InvalidParameterError("allow_folder", os.fspath(f), "is not a folder")
        out.append(real)
    return out


def _check_not_cut(source, text, rows, width):
    """Refuse a run list whose last line looks cut off: fewer cells than the header and
    no line break after it (a file still being written, or copied in part). A short row
    that ends its line is a row with blank trailing cells, as before."""
    line, cells = rows[-1]
    if text.endswith(("\n", "\r")) or len(rows) < 2 or len(cells) >= width:
        return
    raise ProfileFormatError(source, f"row {line}", f"the last line {','.join(cells)!r} has "
                             f"{len(cells)} of the header's {width} cells and no line break "
                             "after it: the file looks truncated (still being written, or "
                             "copied in part); copy the whole file again, or end the line with a line break if its "
                             "missing cells are meant to be blank", kind="run list")


def _read_csv(path) -> list[dict]:
    """The rows of a run-list CSV as mappings (empty cells None)."""
    if not os.path.lexists(path):
        raise InvalidParameterError("runs", os.fspath(path), "no such file")
    source = os.fspath(path)
    text = read_text_file(path, what="run list", max_bytes=16 * 2**20)
    text = text.removeprefix("\ufeff")  # Excel's "CSV UTF-8"
    try:
        # strict: a quoted cell that never closes (a file cut inside it) is refused
        rows = list(csv.reader(io.StringIO(text, newline=""), strict=True))
    except csv.Error as exc:
        raise ProfileFormatError(source, "<csv>", f"not a readable CSV: {exc}",
                                 kind="run list") from None
    rows = [(line, r) for line, r in enumerate(rows, 1) if any(c.strip() for c in r)]
    if not rows:
        raise ProfileFormatError(source, "<file>", "is empty: a run list is a header line "
                                 "(model,n,bw,scaling_factor ...) and one row per run",
                                 kind="run list")
    header = [c.strip() for c in rows[0][1]]
    if not {"model", "n", "bw"} & set(header):
        raise ProfileFormatError(source, "<header>", f"the first line {header!r} names none "
                                 "of the columns model, n, bw: the header line is missing, "
                                 "or the cells are not separated by commas (write "
                                 "model,n,bw,scaling_factor ... first)", kind="run list")
    if len(rows) == 1:
        raise ProfileFormatError(source, "<file>", "has a header but no runs: add one row "
                                 "per measured run", kind="run list")
    seen = set()
    for col in header:
        if col in seen:
            raise ProfileFormatError(source, "<header>", f"column {col!r} appears twice",
                                     kind="run list")
        seen.add(col)
    _check_not_cut(source, text, rows, len(header))
    out = []
    for k, (line, cells) in enumerate(rows[1:]):
        if len(cells) > len(header) and any(c.strip() for c in cells[len(header):]):
            raise ProfileFormatError(source, f"row {line}", f"runs[{k}] has {len(cells)} "
                                     f"cells but the header names {len(header)} columns",
                                     kind="run list")
        row = {}
        for col, cell in zip(header, cells):
            row[col] = None if not cell.strip() else cell.strip()
        out.append(row)
    return out
