"""Framework settings that realise a compression plan, printed as code to paste.

PyTorch: ``DistributedDataParallel(bucket_cap_mb=...)`` and a DDP communication hook from
``torch.distributed.algorithms.ddp_comm_hooks``: ``default_hooks.fp16_compress_hook`` /
``bf16_compress_hook``, ``quantization_hooks.quantization_pertensor_hook`` /
``quantization_perchannel_hook`` (8-bit), or ``powerSGD_hook.powerSGD_hook`` with a
``PowerSGDState(process_group=None, matrix_approximation_rank=k, start_powerSGD_iter=...)``.
Horovod: ``HOROVOD_FUSION_THRESHOLD`` [bytes], ``HOROVOD_CYCLE_TIME`` [ms] and
``hvd.DistributedOptimizer(..., compression=hvd.Compression.fp16)``. Sign, top-k and
random-k have no stock hook in either framework: the snippet says so and points to GRACE
(github.com/sands-lab/grace, Xu et al., ICDCS 2021).

With tensor or pipeline parallelism (a plan with ``tp`` or ``pp`` above 1) the plan is for
the job's data-parallel dimension, so the snippet puts DDP and its hook on the
data-parallel process group, ``dp_group`` (the ranks that hold the same shard of the
model: Megatron-LM's ``parallel_state.get_data_parallel_group()``, or
``device_mesh["dp"].get_group()`` of a ``torch.distributed.device_mesh``):
``DDP(..., process_group=dp_group)``, ``register_comm_hook(dp_group, ...)`` (a default
hook's state is its process group) and ``PowerSGDState(process_group=dp_group, ...)``;
for Horovod a process set of those ranks (``hvd.ProcessSet``, Horovod 0.23 and later).
"""

from __future__ import annotations

from .exceptions import ParameterTypeError, UnknownNameError
from .fusion import DDPBuckets, HorovodFusion

__all__ = ["snippet", "FRAMEWORKS"]

FRAMEWORKS = ("pytorch", "horovod")
"""Frameworks :func:`snippet` writes settings for."""

GRACE = "GRACE (https://github.com/sands-lab/grace; Xu et al., ICDCS 2021)"
START_POWERSGD_ITER = 1000
"""PyTorch's default warm-up: plain all-reduce for the first 1000 iterations [-]."""


def _ddp_cap_mb(fusion):
    if isinstance(fusion, DDPBuckets):
        return fusion.cap_bytes / 2**20, ""
    return 25.0, "  # the plan assumed another fusion; 25 is DDP's default"


def _header(row, tool):
    setting = f" {row.setting_text()}" if row.setting_name else ""
    state = ("does NOT reach the target" if not row.feasible else "reaches the target"
             if row.recommended else "reaches the target but does NOT beat no compression")
    return (f"# scalemodel plan: {row.compressor}{setting} ({row.ratio:.3g}x, "
            f"scaling factor {row.scaling_factor:.3f}, {state}) with {tool}")


_FSDP_STRATEGY = {"zero2": "SHARD_GRAD_OP", "zero3": "FULL_SHARD",
                  "hybrid_shard": "HYBRID_SHARD"}


def _fsdp(row):
    """PyTorch FSDP (zero2, zero3, hybrid_shard) or DeepSpeed ZeRO-1: the reduce dtype is
    the only compression FSDP's hooks allow (scalemodel.sharding.SHARDING_COMPRESSORS)."""
    name = row.compressor
    if row.sharding == "zero1":
        out = [_header(row, "DeepSpeed ZeRO stage 1"),
               'ds_config = {"zero_optimization": {"stage": 1, "reduce_scatter": True}, '
               '"bf16": {"enabled": True}}']
        if name in ("fp16", "bf16"):
            out.append(f'ds_config["communication_data_type"] = "{name}"')
        elif name != "none":
            out.append(f"# {name} does not compose with ZeRO's reduce-scatter")
        return "\n".join(out)
    out = [_header(row, "PyTorch FSDP"),
           "import torch",
           "from torch.distributed.fsdp import FullyShardedDataParallel as FSDP, "
           "MixedPrecision, ShardingStrategy"]
    reduce = {"fp16": "torch.float16", "bf16": "torch.bfloat16"}.get(name)
    mp = (f"MixedPrecision(param_dtype=torch.bfloat16, reduce_dtype={reduce})" if reduce else
          "MixedPrecision(param_dtype=torch.bfloat16)")
    out.append(f"model = FSDP(model, sharding_strategy=ShardingStrategy."
               f"{_FSDP_STRATEGY[row.sharding]}, mixed_precision={mp}, "
               "auto_wrap_policy=...)  # wrap each transformer block")
    if name == "int8":
        out.append("# FSDP has no stock 8-bit reduce-scatter; DeepSpeed ZeRO++ does "
                   '(ds_config["zero_optimization"]["zero_quantized_gradients"] = True)')
    elif name not in ("none", "fp16", "bf16"):
        out.append(f"# {name} does not compose with FSDP's reduce-scatter: its hooks only "
                   "change the reduce dtype")
    return "\n".join(out)


def _model_parallel(row):
    """``(tp, pp)`` of the row's plan, ``(1, 1)`` without model parallelism."""
    return int(getattr(row, "tp", 1) or 1), int(getattr(row, "pp", 1) or 1)


def _dp_group_lines(row):
    """The comment that defines ``dp_group`` under tensor or pipeline parallelism."""
    tp, pp = _model_parallel(row)
    return [f"# tp={tp} x pp={pp}: the plan is for the data-parallel dimension; DDP runs "
            "over the data-parallel group only",
            'dp_group = device_mesh["dp"].get_group()  # or Megatron-LM\'s '
            "parallel_state.get_data_parallel_group()"]


def _pytorch(row):
    if getattr(row, "sharding", "none") != "none":
        return _fsdp(row)
    cap, why = _ddp_cap_mb(row.fusion)
    name = row.compressor
    mp = _model_parallel(row) != (1, 1)
    group = "dp_group" if mp else "None"
    pg = ", process_group=dp_group" if mp else ""
    out = [_header(row, "PyTorch DDP"),
           "from torch.nn.parallel import DistributedDataParallel as DDP"]
    if mp:
        out += _dp_group_lines(row)
    out.append(f"model = DDP(model, device_ids=[local_rank], bucket_cap_mb={cap:g}{pg}){why}")
    if name == "none":
        out.append("# no communication hook: plain all-reduce")
    elif name in ("fp16", "bf16"):
        out += ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks",
                f"model.register_comm_hook({group}, default_hooks.{name}_compress_hook)"]
    elif name == "int8":
        cfg = row.config
        if cfg.bits != 8:
            out.append(f"# no stock hook quantizes to {cfg.bits} bits; PyTorch's "
                       f"quantization hooks use 8 bits. For other widths see {GRACE}")
        hook = ("quantization_pertensor_hook" if cfg.chunk is None else
                "quantization_perchannel_hook")
        out += ["from torch.distributed.algorithms.ddp_comm_hooks import quantization_hooks",
                f"model.register_comm_hook({group}, quantization_hooks.{hook})"]
    elif name == "powersgd":
        cfg = row.config
        out += ["from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook",
                "state = powerSGD_hook.PowerSGDState(",
                f"    process_group={group}, matrix_approximation_rank={cfg.rank},",
                f"    start_powerSGD_iter={START_POWERSGD_ITER}, "
                f"min_compression_rate={cfg.min_compression_rate:g})",
                "model.register_comm_hook(state, powerSGD_hook.powerSGD_hook)"]
    else:
        out.append(f"# no stock PyTorch DDP hook exists for {name}; use {GRACE}, "
                   f"which implements it with error feedback (setting: "
                   f"{row.setting_text()})")
    return "\n".join(out)


def _horovod(row):
    if getattr(row, "sharding", "none") != "none":
        return (_header(row, "Horovod") + "\n# Horovod has no sharded data parallelism "
                f"(sharding={row.sharding!r}): use framework='pytorch' for FSDP settings")
    fusion = row.fusion
    if isinstance(fusion, HorovodFusion):
        threshold, cycle, why = fusion.threshold_bytes, fusion.cycle_time, ""
    else:
        threshold, cycle = 64 * 2**20, 5e-3
        why = "; Horovod's default (plan with fusion='horovod' for Horovod's buckets)"
    name = row.compressor
    out = [_header(row, "Horovod"),
           f"export HOROVOD_FUSION_THRESHOLD={int(threshold)}  # bytes{why}",
           f"export HOROVOD_CYCLE_TIME={cycle * 1e3:g}  # milliseconds"]
    tp, pp = _model_parallel(row)
    dp_set = ""
    if (tp, pp) != (1, 1):
        out.append(f"# tp={tp} x pp={pp}: the plan is for the data-parallel dimension; "
                   "reduce over a process set of the data-parallel ranks only")
        out.append("dp_set = hvd.ProcessSet(dp_ranks)  # the ranks holding this rank's "
                   "model shard; hvd.init(process_sets=[dp_set, ...])")
        dp_set = ", process_set=dp_set"
    if name == "none":
        comp = "hvd.Compression.none"
    elif name == "fp16":
        comp = "hvd.Compression.fp16"
    else:
        comp = None
    if comp:
        out.append("optimizer = hvd.DistributedOptimizer(optimizer, named_parameters="
                   f"model.named_parameters(), compression={comp}{dp_set})")
    else:
        out.append(f"# Horovod has no stock compressor for {name} ({row.setting_text()}); "
                   f"{GRACE} plugs it into hvd.DistributedOptimizer")
    return "\n".join(out)


def snippet(row, framework="pytorch") -> str:
    """Settings for ``row`` (a :class:`~scalemodel.planner.PlanRow`) in ``framework``.

    Parameters
    ----------
    row : PlanRow
        A row of a compression plan [-].
    framework : str
        ``"pytorch"`` or ``"horovod"`` [-].
    """
    if not isinstance(framework, str):
        raise ParameterTypeError("framework", framework, "a string")
    key = framework.strip().lower()
    if key == "pytorch":
        return _pytorch(row)
    if key == "horovod":
        return _horovod(row)
    raise UnknownNameError("framework", framework, FRAMEWORKS)
