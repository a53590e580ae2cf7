"""Framework settings that realise a compression plan, printed as code to paste.

PyTorch: ``DistributedDataParallel(bucket_cap_mb=...)`` and a DDP communication hook from
``torch.distributed.algorithms.ddp_comm_hooks``: ``default_hooks.fp16_compress_hook`` /
``bf16_compress_hook``, ``quantization_hooks.quantization_pertensor_hook`` /
``quantization_perchannel_hook`` (8-bit), or ``powerSGD_hook.powerSGD_hook`` with a
``PowerSGDState(process_group=None, matrix_approximation_rank=k, start_powerSGD_iter=...)``.
Horovod: ``HOROVOD_FUSION_THRESHOLD`` [bytes], ``HOROVOD_CYCLE_TIME`` [ms] and
``hvd.DistributedOptimizer(..., compression=hvd.Compression.fp16)``. Sign, top-k and
random-k have no stock hook in either framework: the snippet says so and points to GRACE
(github.com/sands-lab/grace, Xu et al., ICDCS 2021; ``framework="grace-torch"`` or
``"grace-tf"`` writes its settings).

With tensor or pipeline parallelism (a plan with ``tp`` or ``pp`` above 1) the plan is for
the job's data-parallel dimension, so the snippet puts DDP and its hook on the
data-parallel process group, ``dp_group`` (the ranks that hold the same shard of the
model: Megatron-LM's ``parallel_state.get_data_parallel_group()``, or
``device_mesh["dp"].get_group()`` of a ``torch.distributed.device_mesh``):
``DDP(..., process_group=dp_group)``, ``register_comm_hook(dp_group, ...)`` (a default
hook's state is its process group) and ``PowerSGDState(process_group=dp_group, ...)``;
for Horovod a process set of those ranks (``hvd.ProcessSet``, Horovod 0.23 and later).

**One framework per implementation.** A plan row carries the implementation preset it was
planned with (``PlanRow.implementation``, a key of
:data:`~scalemodel.compressors.IMPLEMENTATIONS`), and its snippet is written for that
implementation unless ``framework=`` names another: every preset has a framework of the
same name in :data:`FRAMEWORKS`. Read from each project's own source:

* ``grace-tf`` and ``grace-torch``: GRACE's helper
  ``grace_from_params({'compressor': ..., 'memory': ..., 'communicator': ...})``
  (``grace_dl.tensorflow.helper`` / ``grace_dl.torch.helper``, sands-lab/grace@8682f4b:
  ``grace_dl/tensorflow/helper.py``, ``grace_dl/torch/helper.py``), its result passed as
  ``grace=`` to Horovod's ``hvd.DistributedOptimizer`` (TensorFlow:
  ``hvd.DistributedOptimizer(optimizer, grace=grc)`` or
  ``hvd.DistributedGradientTape(tape, grace=grc)``; PyTorch:
  ``hvd.DistributedOptimizer(optimizer, grace=grc, named_parameters=...)``:
  sands-lab/grace@a471b28: ``TRAINING.md``; ``examples/torch/pytorch_imagenet_resnet50-grace.py``
  at c8acc6b), which needs GRACE's patched Horovod 0.18.2 (``README.md``). The helper's
  names: compressors ``topk``, ``randomk`` (``compress_ratio``), ``signsgd`` /
  ``efsignsgd``, ``powersgd`` (rank: the ``powersgd`` memory's ``compress_rank``),
  ``fp16``, ``none``; 8-bit is ``u8bit`` in TensorFlow and ``qsgd`` (``quantum_num``
  127: int8 levels) in both; memories ``residual`` (error feedback: the snippet uses it
  for top-k and random-k, as GRACE's examples do), ``powersgd``, ``efsignsgd``, ``none``;
  communicators ``allgather``, ``allreduce``, ``broadcast``: the snippet takes the one
  the row's compressor assumes (random-k with a shared seed all-reduces its values, the
  other sparse, sign and 8-bit messages are all-gathered, PowerSGD's P and Q and the
  casts are all-reduced). GRACE has no bf16 compressor.
* ``deepspeed``: the ``ds_config`` dictionary. The sign family is 1-bit Adam,
  ``"optimizer": {"type": "OneBitAdam", "params": {"freeze_step": ..., "cuda_aware":
  False, "comm_backend_name": "nccl"}}`` (DeepSpeed's configuration page,
  deepspeedai/DeepSpeed@da9b773: ``docs/_pages/config-json.md``; the optimizer name
  ``'onebitadam'`` in ``deepspeed/runtime/config.py``); fp16 and bf16 are DeepSpeed's
  ``"communication_data_type"`` (deepspeedai/DeepSpeed@088be89:
  ``deepspeed/runtime/constants.py``, ``COMMUNICATION_DATA_TYPE``: the gradients are
  averaged in that type) beside ``"fp16"`` / ``"bf16": {"enabled": True}``; 8-bit is
  ZeRO++'s quantized gradients, ``"zero_quantized_gradients": True`` under
  ``"zero_optimization"`` (ZeRO stage 3's reduce-scatter, arXiv:2306.10209), which the
  snippet says is not the plain data parallelism the row planned.

A family the chosen framework lacks (top-k in Horovod, bf16 in GRACE, PowerSGD in
DeepSpeed...) gets a comment saying so and naming the frameworks that have it.
"""

from __future__ import annotations

from .exceptions import ParameterTypeError, UnknownNameError
from .fusion import DDPBuckets, HorovodFusion

__all__ = ["snippet", "FRAMEWORKS", "FRAMEWORK_FAMILIES"]

FRAMEWORKS = ("pytorch", "horovod", "grace-tf", "grace-torch", "deepspeed")
"""Frameworks :func:`snippet` writes settings for: one per implementation preset of
:data:`~scalemodel.compressors.IMPLEMENTATIONS`, of the same name."""

FRAMEWORK_FAMILIES = {
    "pytorch": ("none", "fp16", "bf16", "int8", "powersgd"),
    "horovod": ("none", "fp16"),
    "grace-tf": ("none", "fp16", "int8", "signsgd", "topk", "randomk", "powersgd"),
    "grace-torch": ("none", "fp16", "int8", "signsgd", "topk", "randomk", "powersgd"),
    "deepspeed": ("none", "fp16", "bf16", "signsgd", "int8"),
}
"""``{framework: compressor families}`` its snippet has stock settings for (the families of
the implementation preset of the same name) [-]."""

_FRAMEWORK_ALIASES = {"torch": "pytorch", "ddp": "pytorch", "hvd": "horovod",
                      "grace": "grace-tf", "grace-tensorflow": "grace-tf",
                      "grace-pytorch": "grace-torch", "ds": "deepspeed"}

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
                   f"{row.setting_text()}; framework='grace-torch' writes its settings)")
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
    elif getattr(row.config, "family", name) in FRAMEWORK_FAMILIES["grace-torch"]:
        out.append(f"# Horovod has no stock compressor for {name} ({row.setting_text()}); "
                   f"{GRACE} plugs it into hvd.DistributedOptimizer (framework='grace-torch' "
                   "or 'grace-tf' writes its settings)")
    else:
        out.append(_lacks(row, "horovod", "Horovod"))
    return "\n".join(out)


def _lacks(row, framework, tool):
    """The comment for a family ``framework`` has no stock settings for."""
    family = getattr(row.config, "family", row.compressor)
    others = [f for f in FRAMEWORKS if family in FRAMEWORK_FAMILIES[f]]
    return (f"# {tool} has no stock compressor for {row.compressor} ({row.setting_text()}); "
            f"frameworks that have it: {', '.join(others) or 'none'}")


_GRACE_TOOLS = {"grace-tf": ("GRACE (TensorFlow + Horovod)", "tensorflow"),
                "grace-torch": ("GRACE (PyTorch + Horovod)", "torch")}


def _grace_params(row, key):
    """``grace_from_params``'s dict for the row, or a reason string when GRACE lacks it."""
    cfg, name = row.config, row.compressor
    if name in ("none", "fp16"):
        return {"compressor": name, "memory": "none", "communicator": "allreduce"}
    if name in ("topk", "randomk"):
        shared = name == "randomk" and getattr(cfg, "shared_seed", False)
        return {"compressor": name, "memory": "residual",
                "communicator": "allreduce" if shared else "allgather",
                "compress_ratio": float(f"{cfg.density:.6g}")}
    if name == "signsgd":
        comm = getattr(cfg, "collective", "allgather")
        if comm not in ("allgather", "allreduce"):
            return f"GRACE's Horovod communicators have no {comm} (allgather, allreduce, broadcast)"
        if getattr(cfg, "scale_bytes", 0):  # one fp32 scale per tensor: EF-signSGD
            return {"compressor": "efsignsgd", "memory": "efsignsgd", "communicator": comm,
                    "lr": 0.1}
        return {"compressor": "signsgd", "memory": "none", "communicator": comm}
    if name == "int8":
        bits = int(cfg.bits)
        if bits < 2:
            return ("GRACE's quantizers (u8bit, qsgd) need 2 bits or more (qsgd's quantum_num "
                    "= 2**(bits - 1) - 1 levels a sign); for one bit a sign use signsgd")
        if bits == 8 and key == "grace-tf":
            return {"compressor": "u8bit", "memory": "none", "communicator": "allgather"}
        return {"compressor": "qsgd", "memory": "none", "communicator": "allgather",
                "quantum_num": 2 ** (bits - 1) - 1}
    if name == "powersgd":
        return {"compressor": "powersgd", "memory": "powersgd", "communicator": "allreduce",
                "compress_rank": int(cfg.rank)}
    return None


def _grace(row, key):
    tool, pkg = _GRACE_TOOLS[key]
    if getattr(row, "sharding", "none") != "none":
        return (_header(row, tool) + "\n# GRACE has no sharded data parallelism "
                f"(sharding={row.sharding!r}): use framework='pytorch' for FSDP settings")
    out = [_header(row, tool)]
    params = _grace_params(row, key)
    if params is None:
        return "\n".join(out + [_lacks(row, key, "GRACE")])
    if isinstance(params, str):
        return "\n".join(out + [f"# {params}"])
    tp, pp = _model_parallel(row)
    if (tp, pp) != (1, 1):
        out.append(f"# tp={tp} x pp={pp}: the plan is for the data-parallel dimension; GRACE's "
                   "communicators reduce over every Horovod rank (no process sets in 0.18.2)")
    out += [f"import horovod.{pkg} as hvd",
            f"from grace_dl.{pkg}.helper import grace_from_params",
            f"params = {params!r}",
            "grc = grace_from_params(params)  # one collective per tensor (GRACE's "
            "communicators), after hvd.init()"]
    if key == "grace-tf":
        out.append("optimizer = hvd.DistributedOptimizer(optimizer, grace=grc)  "
                   "# or tape = hvd.DistributedGradientTape(tape, grace=grc)")
    else:
        out.append("optimizer = hvd.DistributedOptimizer(optimizer, grace=grc, "
                   "named_parameters=model.named_parameters())")
    return "\n".join(out)


_ZERO_STAGE = {"zero1": 1, "zero2": 2, "zero3": 3, "hybrid_shard": 3}
FREEZE_STEP = 1000
"""Uncompressed Adam warm-up steps written into 1-bit Adam's ``freeze_step`` (DeepSpeed's
tutorial uses 15-25 % of training; the model does not include the warm-up) [steps]."""


def _deepspeed(row):
    name = row.compressor
    strategy = getattr(row, "sharding", "none")
    cfg = {}
    notes = []
    if strategy != "none":
        cfg["zero_optimization"] = {"stage": _ZERO_STAGE.get(strategy, 3)}
        if strategy == "hybrid_shard":
            notes.append("# hybrid_shard: ZeRO++ hpZ, set zero_optimization's "
                         "zero_hpz_partition_size to the GPUs per node")
    if name in ("fp16", "bf16"):
        cfg[name] = {"enabled": True}
        cfg["communication_data_type"] = name
    elif name == "signsgd":
        cfg["optimizer"] = {"type": "OneBitAdam", "params": {
            "freeze_step": FREEZE_STEP, "cuda_aware": False, "comm_backend_name": "nccl"}}
        cfg["fp16"] = {"enabled": True}
        notes.append(f"# 1-bit Adam (add lr, betas to its params): plain Adam for "
                     f"freeze_step={FREEZE_STEP} steps (not modelled), then the momentum "
                     "compressed to signs after backward")
        if strategy != "none":
            notes.append("# 1-bit Adam does not run under ZeRO sharding: plan with "
                         "sharding='none'")
    elif name == "int8":
        zero = cfg.setdefault("zero_optimization", {"stage": 3})
        zero["zero_quantized_gradients"] = True
        if strategy == "none":
            notes.append("# ZeRO++ quantized gradients (qgZ) need ZeRO stage 3; the plan "
                         "assumed plain data parallelism")
        if int(row.config.bits) != 8:
            notes.append(f"# qgZ sets its own quantization width, not {int(row.config.bits)} "
                         "bits")
    elif name == "none":
        notes.append("# no compression: the engine all-reduces the gradients after backward")
    else:
        return "\n".join([_header(row, "DeepSpeed"), _lacks(row, "deepspeed", "DeepSpeed")])
    tp, pp = _model_parallel(row)
    if (tp, pp) != (1, 1):
        notes.append(f"# tp={tp} x pp={pp}: DeepSpeed reduces gradients over its "
                     "data-parallel group (mpu=... in deepspeed.initialize)")
    out = [_header(row, "DeepSpeed"), f"ds_config = {cfg!r}"] + notes
    out.append("model, optimizer, _, _ = deepspeed.initialize(model=model, "
               "model_parameters=model.parameters(), config=ds_config)")
    return "\n".join(out)


def _framework_key(framework, row):
    if framework is None:
        framework = getattr(row, "implementation", None) or "pytorch"
    if not isinstance(framework, str):
        raise ParameterTypeError("framework", framework, "a string")
    key = framework.strip().lower().replace("_", "-")
    key = _FRAMEWORK_ALIASES.get(key, key)
    if key not in FRAMEWORKS:
        raise UnknownNameError("framework", framework, FRAMEWORKS, aliases=_FRAMEWORK_ALIASES)
    return key


def snippet(row, framework=None) -> str:
    """Settings for ``row`` (a :class:`~scalemodel.planner.PlanRow`) in ``framework``.

    Parameters
    ----------
    row : PlanRow
        A row of a compression plan [-].
    framework : str or None
        A name of :data:`FRAMEWORKS` (``"pytorch"``, ``"horovod"``, ``"grace-tf"``,
        ``"grace-torch"``, ``"deepspeed"``; aliases as for implementations: ``"grace"``,
        ``"ds"``...). None (the default): the row's implementation
        (``row.implementation``; ``"pytorch"`` when it has none) [-].

    Raises
    ------
    UnknownNameError
        For an unknown framework; the message lists the valid ones.
    """
    key = _framework_key(framework, row)
    if key == "pytorch":
        return _pytorch(row)
    if key == "horovod":
        return _horovod(row)
    if key == "deepspeed":
        return _deepspeed(row)
    return _grace(row, key)
