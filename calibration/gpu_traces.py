"""Record PyTorch profiler traces of data-parallel training on one GPU, for the trace reader.

``scalemodel.calibrate.read_trace`` reads the Kineto traces that ``torch.profiler`` writes.
The real traces in ``../shared/data/traces`` come from older PyTorch versions (V100 and
A100 runs of HolisticTraceAnalysis's test data); this script records traces of the
PyTorch version at hand, with its GPU kernels, so the reader can be checked against what
that version writes. One GPU holds one NCCL rank (NCCL refuses two ranks on one device),
so the jobs are:

``ddp-nccl``
    ResNet-50 (torchvision, random weights), batch 32, fp32, ``DistributedDataParallel``
    over NCCL in a world of one rank: the collectives are launched, as in any DDP job,
    and what NCCL does for one rank is what the trace shows.
``fsdp2-nccl``
    GPT-2 small (``transformers``, from its configuration), 4 x 1024 tokens, bf16
    autocast, ``fully_shard`` on each transformer block and the root, NCCL, one rank.
    FSDP2 skips its all-gathers and reduce-scatters in a world of one rank (PyTorch
    2.11), so this trace shows no collective: it checks what the reader says then.
``ddp-gloo2``
    BERT-Base masked LM, 64 x 64 tokens, fp32, two processes on the one GPU with Gloo
    (CUDA tensors): a real two-rank all-reduce through host memory, each rank's trace.

Each trace is written by :func:`scalemodel.calibrate.trace.record_trace` (``--steps``
profiled iterations after ``--warmup``) and then gzip-compressed in place, with a
``<job>.json`` summary beside it (model, parameters, DDP's bucket count, the versions).
Usage, from the repository root on a machine with a CUDA GPU::

    python calibration/gpu_traces.py --out traces --jobs ddp-nccl,fsdp2-nccl,ddp-gloo2
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

JOBS = ("ddp-nccl", "fsdp2-nccl", "ddp-gloo2")


def _gzip(path: Path) -> Path:
    """Compress ``path`` to ``path.gz`` (written to a temporary name, synced, then
    renamed, with the signals an atomic write holds held: a SIGTERM, which the parent
    sends on Ctrl-C, leaves no partial file)."""
    from scalemodel.profiles import _signals_held
    gz = path.with_name(path.name + ".gz")
    tmp = gz.with_name("." + gz.name + ".tmp")
    with _signals_held():
        try:
            with open(path, "rb") as src, gzip.open(tmp, "wb", compresslevel=9) as dst:
                shutil.copyfileobj(src, dst)
            with open(tmp, "rb") as fh:
                os.fsync(fh.fileno())
            os.replace(tmp, gz)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        path.unlink()
    return gz


def _write_json(path: Path, data) -> None:
    from scalemodel.profiles import atomic_write_text
    atomic_write_text(path, json.dumps(data, indent=1, sort_keys=True) + "\n")


def _versions():
    import torch
    return {"torch": torch.__version__, "cuda": torch.version.cuda,
            "nccl": ".".join(map(str, torch.cuda.nccl.version())),
            "gpu": torch.cuda.get_device_name(0), "python": sys.version.split()[0]}


def _init(backend, rank, world, store_file):
    import torch.distributed as dist
    dist.init_process_group(backend, init_method=f"file://{store_file}", rank=rank,
                            world_size=world)
    return dist


def _train_step(torch, net, opt, inputs, targets, amp):
    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=amp):
            out = net(inputs)
            loss = torch.nn.functional.cross_entropy(out.float(), targets)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
    return step


def _model(job):
    """(model, inputs, targets, name, amp) on the CPU."""
    if job == "ddp-nccl":
        from scalemodel.calibrate.models import load_model
        net, x, y, _ = load_model("resnet50", 32)
        return net, x, y, "resnet50, batch 32, fp32", False
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from calibration import transformer_models as tm
    if job == "fsdp2-nccl":
        net, x, y = tm.gpt2(4)
        return net, x, y, "gpt2 (small), 4 x 1024 tokens, bf16 autocast", True
    net, x, y = tm.bert_base(64)
    return net, x, y, "bert-base masked LM, 64 x 64 tokens, fp32", False


def run_job(job, rank, world, store_file, out, args):
    """Train ``job`` on this rank under the profiler; rank 0 writes the summary."""
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP

    from scalemodel.calibrate.trace import record_trace
    backend = "gloo" if job == "ddp-gloo2" else "nccl"
    torch.cuda.set_device(0)
    dist = _init(backend, rank, world, store_file)
    torch.manual_seed(0)
    net, x, y, name, amp = _model(job)
    net, x, y = net.cuda(), x.cuda(), y.cuda()
    params = sum(p.numel() for p in net.parameters())
    extra = {}
    if job == "fsdp2-nccl":
        from torch.distributed.fsdp import fully_shard
        blocks = net.lm.transformer.h
        for block in blocks:
            fully_shard(block)
        fully_shard(net)
        extra["fully_shard"] = f"{len(blocks)} blocks and the root"
    else:
        net = DDP(net, device_ids=[0], bucket_cap_mb=25)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4, fused=job != "ddp-gloo2")
    step = _train_step(torch, net, opt, x, y, amp)
    for _ in range(args.warmup):
        step()
    dist.barrier()
    path = record_trace(Path(out) / f"{job}.json", step, rank=rank, cuda=True,
                        iterations=args.steps, warmup=1)
    gz = _gzip(path)
    if job != "fsdp2-nccl":
        logger = net._get_ddp_logging_data()
        extra["ddp_buckets"] = logger.get("num_buckets_reduced")
        extra["ddp_bucket_sizes"] = logger.get("bucket_sizes")
    dist.barrier()
    if rank == 0:
        _write_json(Path(out) / f"{job}.summary.json", {
            "job": job, "model": name, "parameters": params, "world_size": world,
            "backend": backend, "profiled_steps": args.steps, "warmup_steps": args.warmup,
            "trace_files": [gz.name] if world == 1 else
            [gz.name.replace(".rank0.", f".rank{r}.") for r in range(world)],
            **extra, **_versions()})
    dist.destroy_process_group()


def _spawned(rank, job, world, store_file, out, args):
    import signal
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends them on a Ctrl-C
    run_job(job, rank, world, store_file, out, args)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--out", required=True, help="folder for the traces")
    p.add_argument("--jobs", default=",".join(JOBS), help=f"comma-separated: {JOBS}")
    p.add_argument("--steps", type=int, default=4, help="profiled iterations")
    p.add_argument("--warmup", type=int, default=3, help="iterations before profiling")
    args = p.parse_args(argv)
    jobs = [j for j in args.jobs.split(",") if j]
    bad = [j for j in jobs if j not in JOBS]
    if bad or args.steps < 1 or args.warmup < 0:
        p.error(f"--jobs takes {JOBS} (got {bad}); --steps >= 1, --warmup >= 0")
    import torch
    if not torch.cuda.is_available():
        p.error("no CUDA GPU here: run it on a machine with one (the traces record GPU "
                "kernels)")
    Path(args.out).mkdir(parents=True, exist_ok=True)
    import torch.multiprocessing as mp
    ctx = None
    try:
        for job in jobs:
            world = 2 if job == "ddp-gloo2" else 1
            store = Path(tempfile.mkdtemp()) / "store"
            print(f"== {job} ({world} rank{'s' if world > 1 else ''})", flush=True)
            ctx = mp.start_processes(_spawned, args=(job, world, str(store), args.out,
                                                     args), nprocs=world, join=False)
            while not ctx.join():
                pass
    except KeyboardInterrupt:
        for proc in (ctx.processes if ctx is not None else ()):
            proc.terminate()  # they ignore SIGINT; a trace is renamed into place whole
            proc.join(10)
        print("gpu_traces.py: interrupted; the jobs finished before are written, the "
              "interrupted one is not", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
