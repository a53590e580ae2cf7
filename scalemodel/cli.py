"""Command line: ``scalemodel scaling | min-compression | required-bandwidth | iteration |
plan | breakeven | fit | profiles | whatif | best-bucket``. Run ``scalemodel --help`` or
``scalemodel COMMAND --help``.

Every value is read by the library's own parsers after argparse has split the line (an
option's ``type=`` only wraps the text, :func:`_value`), so a bad value gets the
library's message, one line with the option and the value, exit status 2, like any other
:class:`~scalemodel.ScalemodelError`; argparse's own errors (a missing option, an unknown
one) are one line too. Each subcommand has its builder (``_build_<command>``), listed in
:data:`BUILDERS`; options shared between subcommands have helpers (``_model_options``,
``_target_options``...), each ``--help`` entry says what the option is, its unit in
brackets and its default.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import math
import os
import re
import sys

import attrs
import numpy as np

from . import __version__
from .exceptions import InvalidParameterError, ParameterTypeError, ScalemodelError
from .knobs import FRAMEWORKS
from .model import iteration_time, scaling_factor
from .planner import DEFAULT_PLAN_COMPRESSORS
from .profiles import ALIASES, list_profiles, load_profile
from .solvers import (DEFAULT_N, DEFAULT_TARGET, below, min_compression, part_text,
                      ratio_text, required_bandwidth)
from .units import (MAX_COUNT, MIN_TEXT_BANDWIDTH, _split_bandwidth, check_count, check_fraction,
                    check_nonnegative, check_ratio, format_bandwidth, parse_bandwidth,
                    parse_duration)
from .whatif import (PAPER_BW, PAPER_N, PAPER_RATIOS, REDUCTION_LAUNCHES, format_whatif_table,
                     whatif_table)

EPILOG = ("Bandwidth is per worker link in bits per second: 10e9, or with a unit: 10Gbps, "
          "'100 Gbit/s', 100GbE, or 25GB/s (upper-case B: bytes per second); text below "
          "1 Mbit/s is refused (a forgotten unit). Lists are comma-separated. Built-in "
          "models: see `scalemodel profiles`.")

DEFAULT_BREAKEVEN_COMPRESSORS = ("fp16", "int8", "signsgd", "topk", "powersgd")


# --------------------------------------------------------------------------- values


@attrs.frozen
class _Deferred:
    """An option's text, converted after parsing (so that errors are the library's)."""

    option: str
    text: str
    convert: object

    def __call__(self):
        return self.convert(self.text, self.option)


def _value(convert, option):
    """An argparse ``type=`` that defers ``convert(text, option)`` to :func:`_resolve`."""
    def wrap(text):
        return _Deferred(option, text, convert)
    wrap.__name__ = convert.__name__.lstrip("_")
    return wrap


def _resolve(args):
    """Convert every deferred option value of ``args`` in place."""
    for key, value in vars(args).items():
        if isinstance(value, _Deferred):
            setattr(args, key, value())
    return args


def _one(text, option):
    """Refuse a list given to an option of one value (``--bw 10Gbps,20Gbps`` said
    'cannot read a bandwidth from this string')."""
    if "," in text:
        raise InvalidParameterError(option, text, "takes one value, not a list",
                                    "scalemodel scaling takes comma-separated lists of "
                                    "--n, --bw and --compression")


def _checked(text, option, parse, check):
    """``check(parse(text))``; a range error names the option and the text given."""
    _one(text, option)
    value = parse(text, option)
    try:
        return check(value, option)
    except InvalidParameterError as exc:
        raise InvalidParameterError(option, text, exc.requirement) from None


def _float(text, option):
    try:
        return float(text)
    except ValueError:
        raise InvalidParameterError(option, text, "is not a number") from None


def _int(text, option):
    try:
        return int(text)
    except ValueError:
        pass
    value = _float(text, option)
    if not (math.isfinite(value) and value == round(value)):
        raise InvalidParameterError(option, text, "must be an integer")
    # counts are integers, in the API (n=8.0 "has type float") and here alike
    raise InvalidParameterError(option, text, f"must be an integer in [1, {MAX_COUNT}] "
                                "written as one (no decimal point or exponent)",
                                f"write {int(value)}" if abs(value) <= MAX_COUNT else "")


def _items(text, option):
    """The items of a comma-separated list; at least one, none of them empty (``16,,64``
    is a typo whose missing value would be dropped without a word)."""
    items = [item.strip() for item in text.split(",")]
    if not any(items):
        raise InvalidParameterError(option, text, "needs at least one value",
                                    "give one or a comma-separated list, e.g. 16,32,64")
    if not all(items):
        raise InvalidParameterError(option, text, "has an empty item between commas",
                                    "give a comma-separated list, e.g. 16,32,64")
    return items


def _count(text, option):
    return _checked(text, option, _int, check_count)


def _grad_accum(text, option):
    """Micro-batches per step: an integer in [1, 10**6], as a profile takes them."""
    _one(text, option)
    value = _int(text, option)  # (not an integer: said so)
    if not 1 <= value <= 10**6:
        raise InvalidParameterError(option, text, "must be an integer in [1, 1000000]")
    return value


def _counts(text, option):
    return [_checked(item, option, _int, check_count) for item in _items(text, option)]


def _fraction(text, option):
    return _checked(text, option, _float, check_fraction)


def _ratio(text, option):
    return _checked(text, option, _float, check_ratio)


def _ratios(text, option):
    return [_ratio(item, option) for item in _items(text, option)]


def _nonnegative(text, option):
    return _checked(text, option, _float, check_nonnegative)


def _seconds(text, option):
    return parse_duration(text, option)


def _bandwidth(text, option):
    _one(text, option)
    return parse_bandwidth(text, option)


def _bandwidths(text, option):
    """A list of line rates: each item carries its own unit, a bare number is bits/s.

    A bare number below 1 Mbit/s is no line rate: it takes the unit of the list's last
    item, so that ``1,10,100Gbps`` reads as it is written; ``1e9,10Gbps`` is 1 and 10
    Gbit/s. Without a unit at the end, it is an error with a hint.
    """
    items = _items(text, option)
    last = _split_bandwidth(items[-1])
    suffix = (last[1] + last[2]) if last is not None else ""
    out = []
    for item in items:
        parts = _split_bandwidth(item)
        if suffix and parts is not None and not (parts[1] or parts[2]) \
                and 0 < float(parts[0]) < MIN_TEXT_BANDWIDTH:
            item = parts[0] + suffix
        out.append(parse_bandwidth(item, option))
    return out


def _compressors(text, option):
    """Compressor names, each with an optional setting; checked now, kept as text."""
    from .compressors import get_compressor

    items = _items(text, option)
    for item in items:
        get_compressor(item, option)
    return items


def _loss(text, option):
    """``--loss``: a loss kernel's name, checked now
    (:func:`scalemodel.checkpointing.canonical_loss`)."""
    from .checkpointing import canonical_loss

    try:
        return canonical_loss(text)
    except InvalidParameterError as exc:
        raise InvalidParameterError(option, text, exc.requirement) from None


def _loss_option(p):
    """``--loss`` of the commands that print memory (the time model does not use it)."""
    from .checkpointing import LOSS_KERNELS

    _add(p, "--loss", _loss, default=None, metavar="{" + ",".join(LOSS_KERNELS) + "}",
         help="how the cross-entropy loss is computed, for the memory check only: "
              + ", ".join(LOSS_KERNELS) + " (unfused: PyTorch's cross_entropy, 12sbV "
              "bytes at its backward peak; fused: flash-attention's CrossEntropyLoss as "
              "LLM Foundry's MPT uses it, 4sbV + 16sb; unfused+logits: cross_entropy on "
              "fp32 logits the training loop keeps through backward, as torchtitan did "
              "before 2024-12, 16sbV; scalemodel.checkpointing.loss_bytes) [-] "
              "(default unfused)")


def _accounting(text, option):
    """``--accounting``: how memory() counts the model state and the peak, checked now
    as :func:`scalemodel.memory` checks the value (``memory._check_accounting``)."""
    from .memory import _check_accounting

    try:
        return _check_accounting(text, "zero3", "none")  # the value alone
    except InvalidParameterError as exc:
        raise InvalidParameterError(option, text, exc.requirement) from None


def _fragmentation_arg(text, option):
    """``--fragmentation``: a fraction or the allocator setting's name, checked now as
    :func:`scalemodel.memory` checks it."""
    from .memory import FRAGMENTATION, _check_measure

    value = text.strip().lower().replace("-", "_")
    if value not in FRAGMENTATION:
        try:
            value = float(text)
        except ValueError:
            raise InvalidParameterError(
                option, text, "must be a fraction in [0, 1) or one of "
                + ", ".join(FRAGMENTATION)) from None
    try:
        return _check_measure("reserved", value)[1]
    except InvalidParameterError as exc:
        raise InvalidParameterError(option, text, exc.requirement) from None


def _fragmentation_option(p):
    """``--fragmentation`` of the commands that print memory."""
    from .memory import FRAGMENTATION

    _add(p, "--fragmentation", _fragmentation_arg, default=None,
         metavar="{FRACTION," + ",".join(FRAGMENTATION) + "}",
         help="free space inside the caching allocator's segments, for the memory check "
              "only: a fraction of the reserved memory in [0, 1), or the allocator's "
              "setting: expandable_segments (0; PYTORCH_CUDA_ALLOC_CONF="
              "expandable_segments:True) or default_segments (0.15, GMLake's mean; "
              "scalemodel.memory.FRAGMENTATION) [-] (default 0)")


def _accounting_option(p):
    """``--accounting`` of the commands that print memory (the time model does not use
    it)."""
    from .memory import ACCOUNTINGS

    _add(p, "--accounting", _accounting, default=None,
         metavar="{" + ",".join(ACCOUNTINGS) + "}",
         help="how the memory check counts the model state and the peak: zero (ZeRO's "
              "persistent state with every activation term at once) or fsdp (what PyTorch "
              "FSDP2 holds at its peak: fp32 parameter shards as the master, no gradients "
              "before backward, the loss and the recompute apart, the reduce-scatter "
              "stream's pool; --sharding zero2, zero3 or hybrid_shard without --offload; "
              "scalemodel.memory) [-] (default zero)")


def _implementation_name(text, option):
    """An implementation preset name, checked now (nearest names on a typo)."""
    from .compressors import resolve_implementation

    return resolve_implementation(text, option).name


def _implementation_option(p):
    from .compressors import IMPLEMENTATIONS

    _add(p, "--implementation", _implementation_name, default=None,
         help="whose compressors: " + ", ".join(IMPLEMENTATIONS) + "; sets each "
              "compressor's wire format, tensor layout and per-tensor collectives, and "
              "only the families it provides are compared [-] (default: pytorch's formats, "
              "with signsgd, topk and randomk, which its hooks lack, in textbook form)")


# --------------------------------------------------------------------------- parser


class _Parser(argparse.ArgumentParser):
    """argparse with one-line errors (no usage block), exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _add(p, option, convert, help, **kw):
    """An option whose value ``convert(text, option)`` reads after parsing."""
    return p.add_argument(option, type=_value(convert, option), help=help, **kw)


def _json_option(p):
    p.add_argument("--json", action="store_true",
                   help="print JSON for scripts instead of text [-] (default: text)")


def _hf_config_options(p):
    """How a Hugging Face ``config.json`` given as ``--model`` is built."""
    _add(p, "--seq", _count, default=None,
         help="sequence length when --model is a Hugging Face config.json [tokens] "
              "(default: the config's context length, max_position_embeddings, "
              "n_positions or max_seq_len, else 4096)")
    _add(p, "--micro-batch", _count, default=None,
         help="sequences per GPU per step when --model is a Hugging Face config.json "
              "[samples] (default 1)")
    p.add_argument("--no-flash-attention", dest="flash_attention", action="store_false",
                   default=True,
                   help="when --model is a Hugging Face config.json: its attention writes "
                        "the a*s^2*b scores to memory (no flash attention, SDPA or fused "
                        "attention): their element-wise passes at the GPU's HBM bandwidth "
                        "in the time, the score matrix in the memory check [-] (default: "
                        "flash attention)")


def _model_options(p):
    """The workload and the network model, shared by every model command."""
    p.add_argument("--model", required=True,
                   help="workload: a built-in profile name (resnet50, bert...; see "
                        "`scalemodel profiles`) or a profile JSON file [name or path] "
                        "(required)")
    _hf_config_options(p)
    _add(p, "--grad-accum", _grad_accum, default=None,
         help="micro-batches per optimizer step (gradient accumulation): DDP and zero1 "
              "reduce on the last one only, zero2, zero3 and hybrid_shard on every one [-] "
              "(default: the profile's, 1 for the built-in ones)")
    _add(p, "--utilization", _fraction, default=1.0,
         help="fraction of the line rate the transport achieves, in (0, 1] [-] (default 1)")
    _algorithm_options(p)
    _add(p, "--alpha", _seconds, default=None,
         help="per-message network latency, seconds or with a unit (5us, 0.1ms) [s] "
              "(default: the cluster's, else 0 as in the paper's what-if analysis)")
    _add(p, "--codec-cost", _nonnegative, default=0.0,
         help="encode + decode time per gradient byte when compressing [s/byte] "
              "(default 0)")
    _topology_options(p)
    p.add_argument("--cluster", default=None,
                   help="calibrated or fitted cluster profile supplying latency, achieved "
                        "bandwidth, topology, compute slowdown and fixed costs [JSON file] "
                        "(default: none, the ideal network above)")
    p.add_argument("--sharding", default=None,
                   help="data parallelism: none (DDP), zero1, zero2 (shard_grad_op), zero3 "
                        "(full_shard, fsdp) or hybrid_shard (full shard inside a node, "
                        "replicas across nodes); needs --n >= 2 [-] (default: the one the "
                        "--cluster was fitted under, else none)")
    _add(p, "--activation-checkpointing", _checkpointing, default=None,
                   help="none, selective (the attention core; with flash attention "
                        "torchtitan's op-level policy), full (the whole block replayed: "
                        "Megatron-LM, DeepSpeed, reentrant PyTorch), full-early-stop "
                        "(PyTorch's non-reentrant checkpoint: the block's last product "
                        "not replayed), or a fraction of the layers "
                        "checkpointed fully (0.5): the recompute in each block's backward "
                        "and the activation memory (scalemodel.checkpointing) [-] (default "
                        "none)")
    p.add_argument("--offload", default=None,
                   help="none, optimizer (ZeRO-Offload) or optimizer+parameters (FSDP "
                        "CPUOffload; with --sharding zero3): host transfers and the CPU "
                        "optimizer step each iteration, state in host memory "
                        "(scalemodel.offload) [-] (default none)")
    p.add_argument("--shard-group", default=None, type=int,
                   help="with --sharding zero1, zero2 or zero3: shard over groups of this "
                        "many GPUs, replicated across the groups, whose gradient shards are "
                        "all-reduced across groups (InternLM zero1=8, MiCS, HSDP with any "
                        "group); must divide --n, or --n / --tp with --tp [GPUs] (default: "
                        "one group of all the data-parallel GPUs)")
    p.add_argument("--tp", default=None, type=int,
                   help="tensor-parallel GPUs per replica (Megatron-style, inside a node): "
                        "--n counts all GPUs and the answers are for the data-parallel "
                        "dimension of n/(tp pp) replicas (scalemodel.parallel) [GPUs] "
                        "(default 1)")
    p.add_argument("--pp", default=None, type=int,
                   help="pipeline stages per replica, 1F1B; needs --microbatches [stages] "
                        "(default 1)")
    p.add_argument("--microbatches", default=None, type=int,
                   help="micro-batches per step and replica (the pipeline bubble is "
                        "(pp-1)/microbatches) [micro-batches] (default: the profile's)")
    p.add_argument("--virtual-stages", default=None, type=int,
                   help="model chunks per pipeline stage: > 1 is Megatron's interleaved "
                        "1F1B (layers / (pp x --num-layers-per-virtual-pipeline-stage)), "
                        "bubble (pp-1)/(virtual_stages x microbatches) [chunks] (default 1)")
    p.add_argument("--sequence-parallel", action="store_true", default=None,
                   help="Megatron-style sequence parallelism over the --tp ranks: the same "
                        "tensor-parallel time, the layer-norm/dropout activations split "
                        "along the sequence in the memory check (Korthikanti et al. "
                        "Table 2); ignored, with a warning, at tp 1 [-] (default off)")
    p.add_argument("--gpu", default=None,
                   help="GPU whose memory is checked and, in plan and breakeven, whose "
                        "codec costs are used (the H100 table scaled by HBM bandwidth), e.g. "
                        "h100-sxm, a100-80gb (see scalemodel.list_gpus()) [name] (default: "
                        "the profile's: memory checked for the built-in LLMs and other "
                        "config-derived profiles only)")
    _json_option(p)


def _algorithm_options(p, *, fit=False):
    p.add_argument("--algorithm", default="ring" if fit else None,
                   help="all-reduce algorithm: ring, tree, halving-doubling, hierarchical, "
                        "allgather, ps, or nccl (NCCL's own ring/tree and protocol choice "
                        "per message; nccl-2.4 ... nccl-2.7 for older releases) [-] "
                        + ("(default ring)" if fit else "(default: the one the --cluster "
                           "was fitted under, else ring)"))
    p.add_argument("--fusion", default=None,
                   help="gradient bucketing: ddp (PyTorch DDP buckets), horovod, none (per "
                        "tensor, WFBP), bsp (all after backward) or mg-wfbp"
                        + ("" if fit else "; with --sharding the wrapping: block (one unit "
                           "per transformer block, FSDP), module (per submodule, DeepSpeed "
                           "ZeRO-3) or none (per tensor)")
                        + " [-] (default " + ("ddp; for sharded runs the strategy's "
                                              "wrapping: block where the model has numbered "
                                              "blocks, else none)" if fit
                                              else "the one the --cluster was "
                                              "fitted under, else ddp; with "
                                              "--sharding block where the model has "
                                              "numbered blocks, else none)"))


def _topology_options(p, *, fit=False):
    _add(p, "--gpus-per-node", _count, default=None,
         help="workers per node; --bw is then one NIC's line rate [workers] "
              + ("(default: the --cluster's or --transport's topology, every worker on its "
                 "own link when it has none; every worker on its own link for runs of "
                 "profiles measured on CPUs; else 8)" if fit else
                 "(default: the cluster's, else every worker on its own link; 8 for "
                 "--algorithm hierarchical; with --offload the GPUs sharing a host, "
                 "default the GPU's usual server; with --sharding hybrid_shard the shard "
                 "group's node, default the GPU's usual server, else 8)"))
    _add(p, "--nics-per-node", _count, default=None,
         help="NICs per node, each at --bw [NICs] (default: the cluster's, else 1)")
    _add(p, "--intra-bw", _bandwidth, default=None,
         help="intra-node link rate per GPU; bits/s or with a unit (300GB/s) [bits/s] "
              "(default: the cluster's, else the model's GPU's, per direction, else "
              "2.4e12 = 300 GB/s, V100 NVLink 2.0; --gpu, which sets memory and codec "
              "costs, does not change it)")
    _add(p, "--intra-alpha", _seconds, default=None,
         help="intra-node step latency, seconds or with a unit (2us) [s] (default: the "
              "cluster's, else 0)")


def _n_option(p, *, many=False, required=False):
    if many:
        _add(p, "--n", _counts, **({"required": True} if required else
                                   {"default": [DEFAULT_N]}),
             help="number(s) of workers, a comma-separated list such as 16,32,64 "
                  "[workers] " + ("(required)" if required else f"(default {DEFAULT_N})"))
    else:
        _add(p, "--n", _count, **({"required": True} if required else
                                  {"default": DEFAULT_N}),
             help="number of workers [workers] "
                  + ("(required)" if required else f"(default {DEFAULT_N})"))


def _bw_option(p, *, many=False):
    if many:
        _add(p, "--bw", _bandwidths, required=True,
             help="line rate(s) of each worker's link, a comma-separated list; each item "
                  "bits/s or with its unit (1e9,10Gbps,100GbE); bare numbers below 1 "
                  "Mbit/s take the last item's unit (1,10,100Gbps) [bits/s] (required)")
    else:
        _add(p, "--bw", _bandwidth, required=True,
             help="line rate of each worker's link, bits/s or with a unit (10e9, 10Gbps, "
                  "100GbE, 25GB/s) [bits/s] (required)")


def _target_options(p):
    """``--n`` and ``--target`` of the solver commands."""
    _n_option(p)
    _add(p, "--target", _fraction, default=DEFAULT_TARGET,
         help=f"scaling factor to reach, in (0, 1] [-] (default {DEFAULT_TARGET})")


def _compression_option(p, *, many=False):
    if many:
        _add(p, "--compression", _ratios, default=[1.0],
             help="compression ratio(s) >= 1 dividing the bytes on the wire, a "
                  "comma-separated list [-] (default 1: none)")
    else:
        _add(p, "--compression", _ratio, default=1.0,
             help="compression ratio >= 1 dividing the bytes on the wire [-] "
                  "(default 1: none)")


def _sub(sub, name, help):
    return sub.add_parser(name, help=help, description=help, epilog=EPILOG)


def _build_scaling(sub):
    p = _sub(sub, "scaling", "scaling factor for worker counts, bandwidths, ratios")
    _model_options(p)
    _n_option(p, many=True, required=True)
    _bw_option(p, many=True)
    _compression_option(p, many=True)
    _loss_option(p)
    _accounting_option(p)
    _fragmentation_option(p)
    p.set_defaults(func=cmd_scaling)


def _build_min_compression(sub):
    p = _sub(sub, "min-compression", "smallest compression ratio reaching a target")
    _model_options(p)
    _bw_option(p)
    _target_options(p)
    _loss_option(p)
    _accounting_option(p)
    _fragmentation_option(p)
    p.set_defaults(func=cmd_min_compression)


def _build_required_bandwidth(sub):
    p = _sub(sub, "required-bandwidth", "smallest line rate reaching a target")
    _model_options(p)
    _target_options(p)
    _compression_option(p)
    _loss_option(p)
    _accounting_option(p)
    _fragmentation_option(p)
    p.set_defaults(func=cmd_required_bandwidth)


def _build_iteration(sub):
    p = _sub(sub, "iteration", "where one iteration's time goes")
    _model_options(p)
    _n_option(p, required=True)
    _bw_option(p)
    _compression_option(p)
    _loss_option(p)
    _accounting_option(p)
    _fragmentation_option(p)
    p.set_defaults(func=cmd_iteration)


def _build_plan(sub):
    p = _sub(sub, "plan", "which compressor, at what setting, and is it worth it")
    _model_options(p)
    _bw_option(p)
    _target_options(p)
    _add(p, "--compressors", _compressors, default=None,
         help="compressors to compare, comma-separated; a name has its setting searched, "
              "name:setting is taken as given (fp16, int8:4, topk:0.01, powersgd:8) [-] "
              f"(default: all of {', '.join(DEFAULT_PLAN_COMPRESSORS)})")
    p.add_argument("--framework", default=None,
                   choices=FRAMEWORKS,
                   help="framework of the settings snippet: pytorch, horovod, grace-tf, "
                        "grace-torch or deepspeed [-] (default: the plan's --implementation)")
    _implementation_option(p)
    _loss_option(p)
    _accounting_option(p)
    _fragmentation_option(p)
    p.set_defaults(func=cmd_plan)


def _build_breakeven(sub):
    p = _sub(sub, "breakeven", "line rate below which a compressor beats none")
    _model_options(p)
    _n_option(p, many=True)
    _add(p, "--compressors", _compressors, default=None,
         help="compressors, comma-separated, each with an optional setting "
              "(topk:0.001, powersgd:8, int8:4) [-] (default "
              f"{','.join(DEFAULT_BREAKEVEN_COMPRESSORS)} at their default settings, those "
              "the --implementation provides)")
    _implementation_option(p)
    p.set_defaults(func=cmd_breakeven)


def _build_profiles(sub):
    p = _sub(sub, "profiles", "list the built-in workload profiles")
    _json_option(p)
    p.set_defaults(func=cmd_profiles)


def _bucket_caps(text, option):
    """A comma-separated list of bucket caps [MB], each finite and > 0."""
    from .units import check_positive
    return [_checked(item, option, _float, check_positive) for item in _items(text, option)]


def _build_best_bucket(sub):
    p = _sub(sub, "best-bucket", "the DDP bucket_cap_mb that makes an iteration fastest")
    p.add_argument("--model", required=True,
                   help="workload: a built-in profile name (resnet50, bert...; see "
                        "`scalemodel profiles`) or a profile JSON file [name or path] "
                        "(required)")
    _n_option(p, required=True)
    _bw_option(p)
    p.add_argument("--cluster", default=None,
                   help="calibrated or fitted cluster profile; its bucket_overhead (the "
                        "framework's work per bucket) and host costs are what make small "
                        "buckets cost [JSON file] (default: none, the ideal network)")
    _add(p, "--utilization", _fraction, default=1.0,
         help="fraction of the line rate the transport achieves, in (0, 1] [-] (default 1)")
    _compression_option(p)
    p.add_argument("--algorithm", default=None,
                   help="all-reduce algorithm: ring, tree, halving-doubling, hierarchical, "
                        "allgather, ps, or nccl [-] (default: the one the --cluster was "
                        "fitted under, else ring)")
    _add(p, "--alpha", _seconds, default=None,
         help="per-message network latency, seconds or with a unit (5us) [s] (default: "
              "the cluster's, else 0)")
    _topology_options(p)
    _hf_config_options(p)  # (a config.json is timed on an H100 SXM here: no --gpu)
    _add(p, "--candidates", _bucket_caps, default=None,
         help="bucket caps to try, comma-separated (5,10,25,50) [MB] (default 1, 2, ..., "
              "200, refined to 0.1 around the best)")
    p.add_argument("--tp", default=None, type=int,
                   help="tensor-parallel GPUs per replica: --n counts all GPUs, the buckets "
                        "are those of the data-parallel all-reduce of one GPU's gradients "
                        "over n/(tp pp) replicas (scalemodel.parallel) [GPUs] (default 1)")
    p.add_argument("--pp", default=None, type=int,
                   help="pipeline stages per replica, 1F1B; needs --microbatches [stages] "
                        "(default 1)")
    p.add_argument("--microbatches", default=None, type=int,
                   help="micro-batches per step and replica [micro-batches] (default: the "
                        "profile's)")
    p.add_argument("--virtual-stages", default=None, type=int,
                   help="model chunks per pipeline stage: > 1 is Megatron's interleaved "
                        "1F1B [chunks] (default 1)")
    p.add_argument("--sequence-parallel", action="store_true", default=None,
                   help="Megatron-style sequence parallelism over the --tp ranks (the "
                        "tensor-parallel time is the same) [-] (default off)")
    p.add_argument("--first-bucket-at-cap", action="store_true", default=None,
                   help="each candidate's first bucket is the cap, as PyTorch 2.x makes it "
                        "when bucket_cap_mb is passed (PyTorch 1.x, and 2.x without it: "
                        "1 MiB) [-] (default off)")
    _json_option(p)
    p.set_defaults(func=cmd_best_bucket)


def _build_whatif(sub):
    p = _sub(sub, "whatif", "the paper's what-if table (resnet50/101, vgg16)")
    p.add_argument("--reduction-launch", choices=REDUCTION_LAUNCHES, default="per-step",
                   help="charge the vector add's launch at each of the ring's N-1 steps, as "
                        "the paper's simulator does (per-step, the default), or once per "
                        "collective, as NCCL does (once) [-] (default per-step)")
    _json_option(p)
    p.set_defaults(func=cmd_whatif)


# --------------------------------------------------------------------------- commands


# options passed on only when given, so that the API's defaults (and a cluster's values)
# apply otherwise
_WHEN_GIVEN = ("alpha", "gpus_per_node", "nics_per_node", "intra_bw", "intra_alpha", "cluster")


def _network(args):
    out = dict(utilization=args.utilization, algorithm=args.algorithm, fusion=args.fusion,
               sharding=args.sharding)
    out.update({k: getattr(args, k) for k in _WHEN_GIVEN if getattr(args, k) is not None})
    return out


def _sharding(args):
    """The sharding asked for: ``--sharding``, else the --cluster's fit setting, else
    none."""
    if args.sharding is not None:
        return args.sharding
    if getattr(args, "cluster", None) is not None:
        from .cluster import load_cluster
        return load_cluster(args.cluster).fit_settings.get("sharding", "none")
    return "none"


def _common(args):
    out = dict(_network(args), codec_cost=args.codec_cost)
    for name in ("activation_checkpointing", "offload", "shard_group", "tp", "pp",
                 "microbatches", "virtual_stages", "sequence_parallel"):  # when given
        if getattr(args, name, None) is not None:
            out[name] = getattr(args, name)
    return out


def _checkpointing(text, option):
    """``--activation-checkpointing``: a name, or a fraction of the layers [-]; a value
    that is neither is refused naming the option and the text given."""
    from .checkpointing import resolve_checkpointing

    try:
        value = float(text)
    except ValueError:
        value = text
    try:
        resolve_checkpointing(value, True)  # the profile's attention is checked later
    except InvalidParameterError:  # (the API's True, False and Checkpointing: not here)
        raise InvalidParameterError(
            option, text, "must be one of none, selective, full, full-early-stop, or a "
            "fraction of layers in [0, 1] to checkpoint fully") from None
    return value


def _jsonable(obj):
    if attrs.has(type(obj)):
        return {k: _jsonable(v) for k, v in attrs.asdict(obj, recurse=False).items()}
    if isinstance(obj, dict):
        return {k: _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        return _jsonable(obj.tolist())
    if isinstance(obj, (float, np.floating)):
        v = float(obj)  # no number reaches it (an infeasible ratio or bandwidth, with
        return v if math.isfinite(v) else None  # feasible false): null, as in a cluster file
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def _print_json(obj):
    print(json.dumps(_jsonable(obj), indent=2))


def _memory(args, n):
    """Memory per GPU [bytes], whether it fits, the GPU and why it was not checked (an
    empty string when it was), for ``n`` workers (Nones when unknown; see
    ``solvers.memory_check``)."""
    from .model import Scenario
    from .solvers import memory_check

    kw = {k: v for k, v in _common(args).items() if k != "utilization"}
    sc = Scenario.build(args.model, **kw)
    per, fits, gpu, note = memory_check(sc, sc.data_parallel(n, 1.0)[0], args.gpu,
                                        **_memory_kw(args))
    unchecked = note.removeprefix("; ") if per is None and note else ""  # (or the host's
    return per, fits, gpu, unchecked  # "does not fit", fits False: no per-GPU figure)


def _memory_json(data, per, fits, gpu, note):
    """Add what :func:`_memory` says to a JSON answer: the memory per GPU and whether it
    fits; a note on its own key, ``memory_not_checked`` when unknown, ``memory_note``
    with ``fits`` false when the host cannot hold what is offloaded."""
    if per is not None:
        data.update(memory_per_gpu=per, fits=fits, gpu=gpu)
    elif note and fits is False:
        data.update(fits=False, memory_note=note)
    elif note:
        data["memory_not_checked"] = note
    return data


def _memory_kw(args):
    """``loss=`` and ``accounting=`` where ``--loss`` and ``--accounting`` were given (the
    API's defaults otherwise)."""
    kw = {k: getattr(args, k, None) for k in ("loss", "accounting", "fragmentation")}
    return {k: v for k, v in kw.items() if v is not None}


def _memory_text(per, fits, gpu):
    from .solvers import memory_text

    return memory_text(per, fits, gpu)


def _fitted(args):
    """The --cluster when it has fitted intervals or alternatives, else None."""
    if args.cluster is None:
        return None
    from .cluster import load_cluster
    from .discrepancy import discrepancy_factor
    cl = load_cluster(args.cluster)
    return cl if (cl.alternatives or not all(c is cl for c in cl.corners())
                  or discrepancy_factor(cl) > 1.0) else None


def cmd_scaling(args):
    from .intervals import scaling_factor_interval

    rows, notes, wide = [], [], None
    memory = {n: _memory(args, n) for n in args.n}
    fitted = _fitted(args)
    for n in args.n:
        per, fits, gpu, unchecked = memory[n]
        if unchecked and unchecked not in notes:
            notes.append(unchecked)
        for bw in args.bw:
            for r in args.compression:
                sf = scaling_factor(args.model, n=n, bw=bw, compression=r, **_common(args))
                row = {"n": n, "bw": bw, "compression": r, "scaling_factor": sf}
                if fitted is not None:  # eq. (answer-interval)
                    iv = scaling_factor_interval(args.model, n, bw, compression=r, value=sf,
                                                 **dict(_common(args), cluster=fitted))
                    row["scaling_factor_interval"] = [iv.low, iv.high]
                    if iv.memory_pressure:
                        row["memory_pressure"] = iv.memory_pressure
                    if iv.discrepancy:
                        row["model_discrepancy"] = iv.discrepancy
                    if iv.from_alternatives or iv.memory_pressure or iv.discrepancy:
                        width = (math.inf if iv.low is None or iv.high is None
                                 else (iv.high - iv.low) / max(sf, 1e-300))
                        if wide is None or width > wide[0]:  # the widest row's is said
                            wide = (width, f"n={n}, {format_bandwidth(bw)}, ratio {r:g}: "
                                    + iv.describe(lambda v: f"{v:.4f}"))
                if per is not None:
                    row.update(memory_per_gpu=per, fits=fits, gpu=gpu)
                rows.append(row)
    if wide is not None:
        notes.insert(0, wide[1])
    if args.json:
        data = {"model": getattr(args, "model_name", args.model),
                "sharding": _sharding(args), "results": rows}
        noted = [m for m in memory.values() if m[3]]
        if noted:
            _memory_json(data, None, noted[0][1], None, noted[0][3])
            data.pop("fits", None)  # (per row, below)
        for row in rows:
            if memory[row["n"]][0] is None and memory[row["n"]][1] is False:
                row["fits"] = False
        return _print_json(data)
    known = any(m[0] is not None for m in memory.values())
    print(f"{'n':>6} {'bandwidth':>14} {'ratio':>7} {'scaling factor':>15}"
          + (f" {'interval':>17}" if fitted is not None else "")
          + (f" {'memory/GPU':>11}  fits" if known else ""))
    for row in rows:
        line = (f"{row['n']:>6d} {format_bandwidth(row['bw']):>14} {row['compression']:>7g} "
                f"{row['scaling_factor']:>15.4f}")
        if "scaling_factor_interval" in row:
            lo, hi = ("unbounded" if v is None else f"{v:.4f}"
                      for v in row["scaling_factor_interval"])
            line += f" {lo + ' to ' + hi:>17}"
        if "memory_per_gpu" in row:
            line += (f" {row['memory_per_gpu'] / 2**30:>7.1f} GiB  "
                     + ("yes" if row["fits"] else f"NO ({row['gpu']})"))
        print(line)
    for note in notes:
        print(note)


def _parts(parts):
    return ", ".join(part_text(k, v) for k, v in parts.items())


def _short_of(value, target):
    """A scaling factor to 4 places, with the digits it takes to differ from a target it
    is below of (0.89999 short of 0.9 never reads 0.9000)."""
    text = f"{value:.4f}"
    return below(value, target) if value < target and float(text) >= target else text


def cmd_min_compression(args):
    res = min_compression(args.model, args.bw, n=args.n, target=args.target, gpu=args.gpu,
                          **_common(args), **_memory_kw(args))
    if args.json:
        return _print_json(res)
    ratio = "none possible" if not res.feasible else f"{ratio_text(res.ratio)}x"
    print(f"minimum compression ratio: {ratio}")
    print(f"scaling factor reached:    {res.scaling_factor:.4f} (target {res.target:g}; "
          f"uncompressed {_short_of(res.uncompressed_scaling_factor, res.target)}; "
          f"limit {res.max_scaling_factor:.4f})")
    print(f"what binds:                {res.binding}"
          + (f" ({_parts(res.critical_parts)} on the critical path)" if res.critical_parts else
             " (communication is hidden behind backward)"))
    if res.memory_per_gpu is not None:
        print(f"memory:                    {_memory_text(res.memory_per_gpu, res.fits, res.gpu)}")
    print(res.message)


def cmd_required_bandwidth(args):
    res = required_bandwidth(args.model, n=args.n, target=args.target, gpu=args.gpu,
                             compression=args.compression, **_common(args),
                             **_memory_kw(args))
    if args.json:
        return _print_json(res)
    bw = ("none is enough" if not res.feasible else format_bandwidth(res.bw) if res.bw
          else "any (no data-parallel traffic crosses the network)")
    per = "NIC:   " if " per NIC " in res.message else "worker:"
    print(f"required bandwidth per {per} {bw}")
    print(f"scaling factor reached:        {res.scaling_factor:.4f} (target {res.target:g})")
    print(f"what binds:                    {res.binding}")
    if res.memory_per_gpu is not None:
        print(f"memory:                        "
              f"{_memory_text(res.memory_per_gpu, res.fits, res.gpu)}")
    print(res.message)


def cmd_iteration(args):
    res = iteration_time(args.model, n=args.n, bw=args.bw, compression=args.compression,
                         **_common(args))
    per, fits, gpu, unchecked = _memory(args, args.n)
    if args.json:
        return _print_json(_memory_json(_jsonable(res), per, fits, gpu, unchecked))
    over = ("  over the fit" if not res.memory_pressure else "  with memory pressure"
            if res.settings.get("cluster") is None else "  fit, memory pressure")
    for field in ("forward", "backward", "exposed_communication", "update", "total",
                  "communication"):
        print(f"{field:<24}{getattr(res, field) * 1e3:10.3f} ms")
        if field == "total" and res.total_interval != (res.total, res.total):
            t_lo, t_hi = res.total_interval
            high = "unbounded" if t_hi is None else f"{t_hi * 1e3:.3f} ms"
            print(f"{over:<24}{t_lo * 1e3:10.3f} ms to {high}")
    print(f"{'scaling factor':<24}{res.scaling_factor:10.4f}")
    lo, hi = res.scaling_factor_interval
    if (lo, hi) != (res.scaling_factor, res.scaling_factor):
        print(f"{over:<24}{lo:10.4f} to {hi:.4f}")
    if res.efficiency_carried:
        print(f"  ({res.efficiency_carried})")
    if res.model_discrepancy:
        print(f"  (intervals {res.model_discrepancy})")
    print(f"{'messages':<24}{res.n_buckets:10d}")
    print(f"{'what binds':<24}{res.binding:>10}")
    host = res.settings.get("wrapper_host")
    if host is not None:  # the cluster's host costs (scalemodel.hostcosts)
        part = res.critical_parts.get("wrapper_host", 0.0)
        print(f"{'DDP host work':<24}{part * 1e3:10.3f} ms on the critical path (host "
              f"{host['host_time'] * 1e3:.4g} ms per step: {host['host_time_source']})")
    if per is not None:
        print(f"{'memory':<24}{_memory_text(per, fits, gpu)}")
    elif unchecked:
        print(f"{'memory':<24}{unchecked.removeprefix('memory ')}")


# the job's settings plan and breakeven pass on when given (every model command takes them)
_JOB_SETTINGS = ("activation_checkpointing", "offload", "shard_group", "tp", "pp",
                 "microbatches", "virtual_stages", "sequence_parallel")


def _plan_kwargs(args, allowed=_JOB_SETTINGS):
    """The network options of plan and breakeven, and those of ``allowed`` given."""
    if args.codec_cost:
        raise InvalidParameterError(
            "--codec-cost", args.codec_cost, "plan and breakeven use each compressor's own "
            "encode/decode costs", "Measure them with python -m "
            "scalemodel.calibrate.codec_bench and pass --cluster")
    return dict(_network(args), **{name: getattr(args, name) for name in allowed
                                   if getattr(args, name, None) is not None})


def cmd_plan(args):
    from .planner import plan_compression

    plan = plan_compression(args.model, args.bw, n=args.n, target=args.target,
                            compressors=args.compressors, gpu=args.gpu,
                            implementation=args.implementation, **_memory_kw(args),
                            **_plan_kwargs(args))
    if args.json:
        rows = []
        for r in plan.rows:
            row = {k: v for k, v in attrs.asdict(r, recurse=False).items()
                   if k not in ("config", "fusion")}
            row["snippet"] = r.snippet(args.framework)
            rows.append(row)
        data = {k: v for k, v in attrs.asdict(plan, recurse=False).items()
                if k not in ("rows", "best")}
        data["rows"] = rows
        data["best"] = None if plan.best is None else plan.best.compressor
        return _print_json(data)
    print(plan)
    if plan.best is not None:  # as the API: no recommendation (best None), no snippet
        print()
        print(plan.snippet(args.framework))


def cmd_breakeven(args):
    from .cluster import load_cluster
    from .compressors import for_implementation, get_compressor, resolve_implementation
    from .planner import _codec_note, breakeven_bandwidth

    from .sharding import SHARDING_COMPRESSORS, resolve_sharding

    names = args.compressors
    if names is None:
        names = [c for c in DEFAULT_BREAKEVEN_COMPRESSORS if args.implementation is None
                 or c in resolve_implementation(args.implementation).families]
    comps = [get_compressor(c, "--compressors") for c in names]
    if args.implementation is not None:  # as the implementation sends them
        comps = [for_implementation(c, args.implementation, "--compressors") for c in comps]
    kw = dict(_plan_kwargs(args), implementation=args.implementation)
    sharded = resolve_sharding(_sharding(args)).sharded
    rows = []
    for comp in comps:
        why = SHARDING_COMPRESSORS.get(comp.name, "composes")
        if sharded and comp.name != "none" and not why.startswith("composes"):
            rows.append({"compressor": comp.describe(), "n": args.n, "breakeven_bw": None,
                         "note": f"under --sharding {_sharding(args)}: {why}"})
            continue
        res = breakeven_bandwidth(args.model, comp, n=np.asarray(args.n), gpu=args.gpu,
                                  detail=True, **kw)
        res = res if isinstance(res, list) else [res]
        rows.append({"compressor": comp.describe(), "n": args.n,
                     "breakeven_bw": [float(r.bw) for r in res],
                     "within_calibration": [r.within for r in res],
                     "basis": [r.basis for r in res],
                     "messages": [r.message for r in res],
                     "wins_above": [r.wins_above for r in res],
                     "interval": [r.interval for r in res]})
    cluster = load_cluster(args.cluster) if args.cluster is not None else None
    note = _codec_note(load_profile(args.model), cluster, comps, args.gpu, args.implementation)
    if args.json:
        return _print_json({"model": getattr(args, "model_name", args.model), "results": rows,
                            "codec_note": note,
                            "implementation": args.implementation or "pytorch"})
    print("line rate below which each compressor beats no compression (implementation "
          f"{args.implementation or 'pytorch'})")
    w = max([24] + [len(row["compressor"]) + 2 for row in rows])
    print(f"{'compressor':<{w}}" + "".join(f"{'n=' + str(n):>18}" for n in args.n))
    for row in rows:
        if row["breakeven_bw"] is None:
            print(f"{row['compressor']:<{w}}{row['note']}")
            continue
        cells = []
        for b, inside, above in zip(row["breakeven_bw"], row["within_calibration"],
                                    row["wins_above"]):
            text = ("always" if math.isinf(b) else format_bandwidth(b) if b else
                    "never" if above is None else f"> {format_bandwidth(above)} +")
            cells.append(text + ("" if inside else " *"))
        print(f"{row['compressor']:<{w}}" + "".join(f"{c:>18}" for c in cells))
    outside = [(row["compressor"], n, m) for row in rows if row["breakeven_bw"] is not None
               for n, m, inside in zip(row["n"], row["messages"], row["within_calibration"])
               if not inside]
    for comp, n, m in outside[:3]:
        print(f"* {comp}, n={n}: {m}")
    if len(outside) > 3:
        print(f"* and {len(outside) - 3} more outside what this calibration can tell "
              "(--json lists each)")
    if any(a is not None for row in rows if row["breakeven_bw"] is not None
           for a in row["wins_above"]):
        print("+ wins only on links faster than that (it saves latency, not bytes)")
    if note:
        print(note)


def cmd_profiles(args):
    rows = []
    for name in list_profiles():
        p = load_profile(name)
        rows.append({"name": name, "aliases": sorted(a for a, t in ALIASES.items() if t == name),
                     "tensors": int(p.tensor_bytes.size), "gradient_bytes": p.total_bytes,
                     "iteration_time": p.iteration_time, "batch_size": p.batch_size,
                     "device": p.device, "description": p.description,
                     "source": p.provenance.get("source", "")})
    if args.json:
        return _print_json(rows)
    w = max([len("name")] + [len(r["name"]) for r in rows]) + 1
    print(f"{'name':<{w}}{'tensors':>8}{'grad MB':>10}{'iter ms':>9}{'batch':>6}  device; aliases")
    for r in rows:
        alias = f"; aliases: {', '.join(r['aliases'])}" if r["aliases"] else ""
        print(f"{r['name']:<{w}}{r['tensors']:>8}{r['gradient_bytes'] / 1e6:>10.1f}"
              f"{r['iteration_time'] * 1e3:>9.1f}{r['batch_size']:>6}  {r['device']}{alias}")


_NETWORK_CHOICES = ("nccl-ib", "nccl-roce", "nccl-socket", "gloo", "mpi")


def _build_fit(sub):
    p = _sub(sub, "fit", "fit a cluster from measured runs (CSV) and write it")
    p.add_argument("runs", nargs="?", help="CSV of measured runs, header: model,n,bw and "
                   "one of scaling_factor, iteration_time or tokens_per_second_per_gpu "
                   "(model: a built-in name, a profile file, or a Hugging Face config.json with "
                   "optional seq, micro_batch, gpu and flash_attention (true/false) "
                   "columns, as --seq, --micro-batch, --gpu and --no-flash-attention build "
                   "it for a prediction); optional "
                   "single_worker_time, compute_time, fusion, algorithm, sharding (none, "
                   "zero1, zero2, zero3, hybrid_shard), shard_group (GPUs that share one copy of "
                   "the sharded state), grad_accum, wrapped (a single-worker "
                   "run inside the data-parallel wrapper), bucket_cap_mb (0: per tensor), "
                   "first_bucket_mb (DDP's first bucket with bucket_cap_mb; default 1), "
                   "compressor (e.g. topk:0.01), implementation (pytorch, horovod, grace-tf, "
                   "grace-torch, deepspeed), tp, pp, microbatches, virtual_stages, "
                   "sequence_parallel (a tensor- and pipeline-parallel run: "
                   "iteration_time or tokens_per_second_per_gpu), "
                   "activation_checkpointing (none, selective, full, full-early-stop or a "
                   "fraction of layers: the run's recompute is added to its profile), "
                   "uncertainty, label [file] (required)")
    _algorithm_options(p, fit=True)
    _topology_options(p, fit=True)
    p.add_argument("--transport", nargs="+", default=None, metavar="FILE",
                   help="transport data that fixes latency and achieved bandwidth (the runs "
                        "then fit only the framework and compute terms): nccl-tests "
                        "all-reduce logs (intra- and inter-node), the cluster JSON of "
                        "`python -m scalemodel.calibrate` or from-nccl-tests, or a "
                        "from-trace report; give it after the runs CSV, or end the files "
                        "with -- [files] (default: none; not with --cluster)")
    p.add_argument("--wrapper", default=None, metavar="FILE",
                   help="the data-parallel wrapper's costs measured on one GPU (the "
                        "<stem>.wrapper.json of `python -m scalemodel.calibrate --steps "
                        "compute,wrapper`): the cluster's host costs; bucket_overhead and "
                        "iteration_overhead are then held at 0 unless --fit names them "
                        "[file] (default: none)")
    p.add_argument("--network", default=None, choices=_NETWORK_CHOICES,
                   help="the transport the runs used, which centres the priors of the "
                        "achieved bandwidth without --transport: nccl-ib, nccl-roce, "
                        "nccl-socket, gloo, mpi [-] (default: generic priors)")
    p.add_argument("--allow-folder", action="append", default=None, metavar="DIR",
                   help="a folder the CSV's model paths may lead into besides the CSV's "
                        "own; repeat for several [folder] (default: the CSV's folder only)")
    p.add_argument("--cluster", default=None,
                   help="cluster to start from; its values are held unless --fit names "
                        "them (for a transport calibration prefer --transport) [JSON file] "
                        "(default: none)")
    p.add_argument("--fit", default=None,
                   help="fit exactly these parameters, comma-separated (ceiling, "
                        "utilization, sync_overhead, collective_overhead, compute_slowdown, "
                        "alpha, overlap, host_overhead, bucket_overhead, iteration_overhead, "
                        "straggler_spread, efficiency) [-] (default: chosen from the runs)")
    p.add_argument("--hold", default=None,
                   help="never fit these parameters, comma-separated [-] (default: none)")
    p.add_argument("--out", default=None,
                   help="write the fitted cluster here, atomically [JSON file] (default: "
                        "print only)")
    _json_option(p)
    p.set_defaults(func=cmd_fit)


_FIT_OPTIONS = {"fit": "--fit", "hold": "--hold", "cluster": "--cluster",
                "allow_folder": "--allow-folder", "transport": "--transport",
                "gpus_per_node": "--gpus-per-node", "nics_per_node": "--nics-per-node",
                "network": "--network", "wrapper": "--wrapper"}


def _as_option(exc):
    """A fit_cluster error naming its keyword (``fit=['bogus']``) renamed to the command
    line option the user wrote (``--fit=['bogus']``)."""
    from .runs import _renamed
    option = _FIT_OPTIONS.get(getattr(exc, "parameter", None))
    return exc if option is None else _renamed(exc, option)


def _profiles_named(runs):
    """The profile files a runs CSV's ``model`` column names (as given, and beside the
    CSV), for :func:`_refuse_overwriting_an_input`; none when it cannot be read here
    (the fit then says why)."""
    import csv

    if not isinstance(runs, str) or not os.path.isfile(runs):
        return []
    try:
        with open(runs, newline="", encoding="utf-8") as fh:
            names = {row.get("model") for row in csv.DictReader(fh)} - {None, ""}
    except (OSError, UnicodeDecodeError, csv.Error):
        return []
    folder = os.path.dirname(runs)
    return [p for v in sorted(names) for p in (v, os.path.join(folder, v))
            if os.path.isfile(p)]


def _refuse_overwriting_an_input(out, inputs):
    """``--out`` naming one of the command's own measurements (the runs CSV, a
    --transport file) would replace it with the result: refused by name. (The --cluster
    to start from may be updated in place.)"""
    if not os.path.isfile(out):
        return
    for given in inputs:
        if given is not None and os.path.isfile(given) and os.path.samefile(out, given):
            raise InvalidParameterError("--out", out, f"is an input of this command "
                                        f"({given}): writing there would destroy it",
                                        "Name another file")


FIT_TABLE_ROWS = 30
"""Runs ``scalemodel fit`` prints in its table at most: the largest misses [-]."""


def _fit_progress(after=2.0):
    """A ``progress(done, total)`` for :func:`~scalemodel.fit_cluster` that prints, to
    stderr, how many explanations a fit has tried, once it has run ``after`` seconds and
    then at most every ``after`` seconds."""
    import time

    start, shown = time.monotonic(), [0.0]

    def progress(done, total):
        now = time.monotonic() - start
        last = done >= total and shown[0] > 0.0  # a count was shown: say it finished
        if last or (now > after and now - shown[0] >= after):
            shown[0] = now
            print(f"  fitting: {done} of {total} explanations tried ({now:.0f} s)"
                  + (", done" if done >= total else ""), file=sys.stderr, flush=True)
    return progress


def _runs_from_transport(args):
    """The runs CSV that ``--transport FILE ...`` took when it came before the runs (a
    transport is never a CSV: the CSV is the runs); an error naming ``runs`` when there
    is none."""
    if args.runs is not None:
        return
    files = list(args.transport or ())
    csvs = [f for f in files if str(f).lower().endswith(".csv")]
    if len(csvs) != 1:
        raise InvalidParameterError(
            "runs", "<none given>", "the CSV of measured runs is required",
            "Give it before --transport (whose list of files takes what follows it), "
            "or end the transport files with --")
    args.runs = csvs[0]
    files.remove(csvs[0])
    args.transport = files or None


def cmd_fit(args):
    import warnings

    from .exceptions import CalibrationWarning
    from .fitting import fit_cluster

    def names(text, option=None):
        out = None if text is None else [t.strip() for t in text.split(",") if t.strip()]
        if option is not None and out == []:  # '--fit ""' fitted nothing, unsaid
            raise InvalidParameterError(option, text, "names no parameter", "Name them, "
                                        f"comma-separated, or leave {option} out to let "
                                        "the fit choose from the runs")
        return out

    _runs_from_transport(args)
    kw = {k: getattr(args, k) for k in ("gpus_per_node", "nics_per_node", "intra_bw",
                                        "intra_alpha") if getattr(args, k) is not None}
    if args.cluster is not None or args.transport is not None:
        kw.setdefault("gpus_per_node", None)  # the starting cluster's (transport's) topology
    if args.transport is not None:
        kw["transport"] = args.transport[0] if len(args.transport) == 1 else args.transport
    if args.network is not None:
        kw["network"] = args.network
    if args.wrapper is not None:
        kw["wrapper"] = args.wrapper
    if args.allow_folder is not None:
        kw["allow_folder"] = args.allow_folder
    if args.out is not None:  # before the fit: a wrong --out is said at once
        from .profiles import output_problem
        why = output_problem(args.out)
        if why:
            raise InvalidParameterError("--out", args.out, why)
        _refuse_overwriting_an_input(args.out, [args.runs, *(args.transport or ()),
                                                args.wrapper, *_profiles_named(args.runs)])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CalibrationWarning)
        try:
            fit = fit_cluster(args.runs, algorithm=args.algorithm, fusion=args.fusion,
                              cluster=args.cluster, fit=names(args.fit, "--fit"),
                              hold=names(args.hold), progress=_fit_progress(), **kw)
        except (InvalidParameterError, ParameterTypeError) as exc:
            raise _as_option(exc) from None
    notes = [str(w.message) for w in caught if issubclass(w.category, CalibrationWarning)]
    for w in caught:  # the others (a ModelWarning of a --cluster file) were dropped
        if not issubclass(w.category, CalibrationWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if not fit.cluster.fit_settings:  # the file records what it was fitted under
        fit = attrs.evolve(fit, cluster=attrs.evolve(fit.cluster, fit_settings={
            "algorithm": str(args.algorithm),
            **({} if args.fusion is None else {"fusion": str(args.fusion)})}))
    if args.out:
        try:
            fit.save(args.out)
        except OSError as exc:
            raise InvalidParameterError("--out", args.out, f"cannot be written "
                                        f"({exc.strerror or exc}); nothing was written") \
                from None
    if args.json:
        return _print_json(dict(fit.to_dict(), warnings=notes, out=args.out))
    print(fit.message)
    # as wide as the longest label (runs of one model differ at their ends), up to 64
    width = min(64, max([24] + [len(r.label) + 1 for r in fit.residuals]))
    print(f"{'run':<{width}}{'measured':>10}{'fitted':>10}{'error':>9}")
    shown = fit.residuals
    if len(shown) > FIT_TABLE_ROWS:  # the largest misses, in the runs' order
        keep = sorted(sorted(range(len(shown)), key=lambda i: -abs(shown[i].error))
                      [:FIT_TABLE_ROWS])
        rest = max(abs(shown[i].error) for i in range(len(shown)) if i not in set(keep))
        shown = [shown[i] for i in keep]
    for r in shown:
        print(f"{r.label[:width - 1]:<{width}}{r.measured * 1e3:8.1f}ms{r.fitted * 1e3:8.1f}ms"
              f"{100 * r.error:+8.1f}%")
    if len(shown) < len(fit.residuals):
        print(f"({len(fit.residuals) - len(shown)} more runs, each within "
              f"{100 * rest:.1f} %; --json lists every run)")
    for note in notes:
        print(f"scalemodel: warning: {note}", file=sys.stderr)
    if args.out:
        print(f"wrote {args.out}; use it as --cluster {args.out}")


def cmd_best_bucket(args):
    from .buckets import best_bucket_size

    kw = {k: getattr(args, k) for k in ("algorithm", "alpha", "gpus_per_node",
                                         "nics_per_node", "intra_bw", "intra_alpha",
                                         "cluster", "tp", "pp", "microbatches",
                                         "virtual_stages", "sequence_parallel",
                                         "first_bucket_at_cap")
          if getattr(args, k) is not None}
    res = best_bucket_size(args.model, args.n, args.bw, utilization=args.utilization,
                           compression=args.compression, candidates=args.candidates, **kw)
    if args.json:
        return _print_json({k: v for k, v in _jsonable(res).items()
                            if k not in ("candidates", "times")})
    lo, hi = res.equivalent
    print(f"best bucket_cap_mb:      {res.bucket_cap_mb:g} MiB ({res.n_buckets} buckets"
          + (f"; as fast from {lo:g} to {hi:g} MiB)" if hi > lo else ")"))
    print(f"iteration time:          {res.iteration_time * 1e3:.4g} ms (scaling factor "
          f"{res.scaling_factor:.4f})")
    print(f"with the default 25 MiB: {res.default_iteration_time * 1e3:.4g} ms (scaling "
          f"factor {res.default_scaling_factor:.4f})")
    print(res.message)


def cmd_whatif(args):
    table = whatif_table(reduction_launch=args.reduction_launch)
    if args.json:
        return _print_json({"n": PAPER_N, "bw": PAPER_BW, "ratios": PAPER_RATIOS,
                            "axes": ["ratio", "n", "bw"],
                            "reduction_launch": args.reduction_launch,
                            "scaling_factor": table})
    print(format_whatif_table(table, reduction_launch=args.reduction_launch))


BUILDERS = (_build_scaling, _build_min_compression, _build_required_bandwidth,
            _build_iteration, _build_plan, _build_breakeven, _build_fit, _build_profiles,
            _build_whatif, _build_best_bucket)
"""One builder per subcommand, in the order ``--help`` lists them."""


def build_parser():
    parser = _Parser(
        prog="scalemodel", epilog=EPILOG,
        description="How well will data-parallel training scale on this network, and how "
                    "much gradient compression would it need?")
    parser.add_argument("--version", action="version", version=f"scalemodel {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for build in BUILDERS:
        build(sub)
    return parser


def _subparsers(parser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for p in action.choices.values():
                yield from _subparsers(p)


def _join_dash_values(parser, argv):
    """``--bw -5Gbps`` -> ``--bw=-5Gbps``: argparse would take the value for an option
    and answer with its own message; the library's checks should see it."""
    takes_value, known = set(), set()
    for p in _subparsers(parser):
        for action in p._actions:
            known.update(action.option_strings)
            if action.option_strings and action.nargs != 0:
                takes_value.update(action.option_strings)
    out, i = [], 0
    while i < len(argv):
        token = argv[i]
        if (token in takes_value and i + 1 < len(argv) and argv[i + 1].startswith("-")
                and not argv[i + 1].startswith("--") and argv[i + 1] not in known):
            out.append(f"{token}={argv[i + 1]}")
            i += 2
        else:
            out.append(token)
            i += 1
    return out


def _refuse_foreign_options(parser, argv):
    """Refuse an option of another command given to this one (``best-bucket --gpu``):
    argparse would read it as an abbreviation of one of this command's (``--gpu`` as
    ``--gpus-per-node``), and answer about an option the user never wrote, or use its
    value for it."""
    subs = next((a.choices for a in parser._actions
                 if isinstance(a, argparse._SubParsersAction)), {})
    if not argv or argv[0] not in subs:
        return
    sub = subs[argv[0]]
    own = {o for action in sub._actions for o in action.option_strings}
    known = {o for p in _subparsers(parser) for action in p._actions
             for o in action.option_strings}
    for token in argv[1:]:
        if token == "--":
            break
        name = token.split("=", 1)[0]
        if name.startswith("--") and name in known and name not in own:
            sub.error(f"{name} is not an option of {argv[0]}")


def _config_model(args):
    """``--model config.json`` of a Hugging Face model: a profile derived from FLOPs on
    ``--gpu`` (default h100-sxm) with ``--seq`` and ``--micro-batch``. A file is read
    whatever its name ends with (``config``, ``llama.JSON``); ``--seq``,
    ``--micro-batch`` and ``--no-flash-attention`` with anything else are refused."""
    import os

    from ._jsonfile import read_json_file
    from .exceptions import InvalidParameterError
    from .hf_configs import is_hf_config, load_hf_profile
    from .profiles import ALIASES, _looks_like_path, list_profiles

    model = getattr(args, "model", None)
    if not isinstance(model, str):
        return
    if model.endswith(".json") and not os.path.lexists(model):
        raise InvalidParameterError(  # (a folder, a FIFO: the reader's own error names it)
            "--model", model, f"no such file ({os.path.abspath(model)} does not exist)",
            "Give the path to a Hugging Face config.json or a saved profile, or a "
            "built-in name (scalemodel profiles lists them)")
    data = None  # a file, not a built-in name (load_profile's order): read it
    name = model.strip().lower()
    if os.path.lexists(model) and (_looks_like_path(model) or (
            name not in list_profiles() and name not in ALIASES)):
        data = read_json_file(model, what="workload profile or config.json")
    if data is None or not is_hf_config(data):
        _refuse_config_options(args, model)
        return
    args.model_name = model
    if getattr(args, "seq", None) is None:  # said: a long-context config's 131072
        from .hf_configs import _context_length  # tokens gave a 64 s step, unsaid
        seq, key = _context_length(data, with_key=True)
        where = (f"the config's {key}" if key else
                 "the default for a config without a context length")
        print(f"scalemodel: warning: --seq not given: {seq} tokens per sequence, "
              f"{where}; pass --seq with the length you train at", file=sys.stderr)
    args.model = load_hf_profile(model, seq=getattr(args, "seq", None),
                                 micro_batch=getattr(args, "micro_batch", None),
                                 gpu=getattr(args, "gpu", None),
                                 flash_attention=getattr(args, "flash_attention", True))


def _refuse_config_options(args, model):
    """Refuse ``--seq``, ``--micro-batch`` and ``--no-flash-attention`` for a model that
    is no Hugging Face config (a saved profile's --seq was ignored, unsaid)."""
    from .exceptions import InvalidParameterError

    for option, key in (("--seq", "seq"), ("--micro-batch", "micro_batch")):
        if getattr(args, key, None) is not None:  # (the value, not the model's name)
            raise InvalidParameterError(option, getattr(args, key), "applies only when "
                                        "--model is a Hugging Face config.json, not "
                                        f"{model!r} (a built-in or saved profile fixes "
                                        "its sequence and batch)")
    if getattr(args, "flash_attention", True) is False:
        raise InvalidParameterError("--model", model, "is no Hugging Face config.json, "
                                    "to which alone --no-flash-attention applies (a "
                                    "built-in or saved profile fixes its attention)")


@contextlib.contextmanager
def _model_warnings_to_stderr(in_cli_terms=lambda text: text):
    """Print each :class:`~scalemodel.exceptions.ModelWarning` (a setting given that the
    model ignores, a detail it leaves out) once, as ``scalemodel: warning: ...`` on
    stderr, its keywords as the command's options (``in_cli_terms``); other warnings go
    on as they would."""
    import warnings

    from .exceptions import ModelWarning

    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ModelWarning)
            yield
    finally:
        # after the recording ends: a warning passed on inside it was recorded again,
        # and passed on again, forever
        seen = set()
        for w in caught:
            if issubclass(w.category, ModelWarning):
                text = str(w.message)
                if text not in seen:
                    seen.add(text)
                    print(f"scalemodel: warning: {in_cli_terms(text)}", file=sys.stderr)
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)


_KEYWORD = re.compile(r"(?:^|(?<=[\s(]))([a-z][a-z0-9_]*)=(True|False)?")
"""A keyword as the library writes one: at the start or after a space or a bracket (not
inside a path, ``sweep/tp=8/``, or a value, ``'zero3:shard_group=4'``)."""
_QUOTED = re.compile(r"""=('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")""")
"""A value the library quotes after its keyword: left as the user gave it."""


def _in_cli_terms(text, parser, command):
    """``text`` (a library message) with each keyword of a parameter that ``command``
    takes as an option written as that option: ``tp=3 is invalid`` -> ``--tp=3 is
    invalid``, ``Pass microbatches=`` -> ``Pass --microbatches=``, a switch at the value
    it sets as the switch (``sequence_parallel=True`` -> ``--sequence-parallel``,
    ``flash_attention=False`` -> ``--no-flash-attention``); quoted values, paths and
    keywords of no option are left as they are (argparse takes both forms; 255 of 638
    refusals spoke the API's keywords to a CLI user)."""
    subs = next((a.choices for a in parser._actions
                 if isinstance(a, argparse._SubParsersAction)), {})
    sub = subs.get(command)
    if sub is None:
        return text
    flags, switches = {}, {}
    for action in sub._actions:
        longs = [o for o in action.option_strings if o.startswith("--")]
        if longs:
            flags.setdefault(action.dest, longs[0])
            if action.nargs == 0 and isinstance(action.const, bool):  # store_true/_false
                switches[action.dest] = (longs[0], action.const)
    protected = [m.span(1) for m in _QUOTED.finditer(text)]

    def rename(m):
        name, value = m.group(1), m.group(2)
        if any(a <= m.start() < b for a, b in protected) or name not in flags:
            return m.group(0)
        if re.search(r"field '[^']*': $", text[max(0, m.start() - 80):m.start()]):
            return m.group(0)  # a file's field (cluster ...: field 'alpha': alpha=1e300)
        if name in switches:  # only at the value the switch sets
            flag, const = switches[name]
            return flag if value == str(const) else m.group(0)
        return f"{flags[name]}={value or ''}"

    return _KEYWORD.sub(rename, text)


def main(argv=None):
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    _refuse_foreign_options(parser, argv)
    args = parser.parse_args(_join_dash_values(parser, argv))
    cli_terms = functools.partial(_in_cli_terms, parser=parser, command=args.command)
    try:
        with _model_warnings_to_stderr(cli_terms):
            _resolve(args)
            _config_model(args)
            if getattr(args, "grad_accum", None) is not None:  # the workload, accumulating
                args.model_name = args.model
                args.model = load_profile(args.model).with_grad_accum(args.grad_accum)
            args.func(args)
    except ScalemodelError as exc:
        print(f"scalemodel: error: {cli_terms(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        # Ctrl-C: one line, not a traceback; an --out being written is held until it is
        # complete (profiles.atomic_write_files), so it is the old file or the new one
        print("scalemodel: interrupted (an --out file is either the old one or complete)",
              file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader (``| head``) stopped reading: not an error of ours; silence the
        # interpreter's flush of the closed pipe at exit
        import os
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # e.g. standard output on a full disk (> /dev/full)
        _drop_unwritable_stdout()
        where = exc.filename if exc.filename is not None else "standard output"
        print(f"scalemodel: error: {where}: {exc.strerror or exc}",
              file=sys.stderr)
        return 1
    return 0


def _drop_unwritable_stdout():
    """Point standard output at the null device when it cannot take what is buffered,
    so that the interpreter's flush at exit does not print a second error."""
    import os

    try:
        sys.stdout.flush()
    except OSError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
