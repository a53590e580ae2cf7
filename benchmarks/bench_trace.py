"""Speed and memory of the profiler-trace reader, :func:`scalemodel.calibrate.read_trace`.

    python benchmarks/bench_trace.py [--size-mb 100] [--repeat 3]

1. Reads each trace in ``tests/data/traces`` (best of ``--repeat``) and prints the
   reading speed in MB of trace JSON per second (the ``.gz`` files are decompressed on the
   fly; their compressed size is shown too).
2. Builds a synthetic trace of about ``--size-mb`` MB (plain JSON: the events of
   ``ddp_2ranks_allreduce_b`` repeated with shifted timestamps, step numbers and
   correlation ids, so it is one long valid run), reads it, and measures the memory:
   the peak of Python allocations while reading (``tracemalloc``) and the growth of the
   process's peak resident set (Linux ``VmHWM``, reset after the imports through
   ``/proc/self/clear_refs``, in a fresh process), both against the file's size.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
DATA = ROOT / "tests" / "data" / "traces"

from scalemodel.calibrate import read_trace  # noqa: E402


def json_bytes(path):
    """Size of the trace's JSON text [bytes] (decompressed)."""
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return sum(len(b) for b in iter(lambda: fh.read(1 << 20), b""))
    return Path(path).stat().st_size


def best_time(path, repeat):
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        rep = read_trace(path)
        best = min(best, time.perf_counter() - t0)
    return best, rep


def synthetic(path, size_mb):
    """Repeat the events of a real trace until the file holds ``size_mb`` MB [MB]."""
    with gzip.open(DATA / "ddp_2ranks_allreduce_b.json.gz", "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    xs = [e for e in events if e.get("ph") == "X"]
    t0 = min(e["ts"] for e in xs)
    span = max(e["ts"] + e["dur"] for e in xs) - t0 + 1000.0
    corr = 1 + max(e.get("args", {}).get("correlation", 0) for e in events
                   if isinstance(e.get("args"), dict))
    texts = [json.dumps(e) for e in events]
    per_copy = sum(len(t) + 2 for t in texts)
    copies = max(1, math.ceil(size_mb * 1e6 / per_copy))
    with open(path, "w") as out:
        head = json.dumps(doc)[:-1]
        out.write(head + ', "traceEvents": [\n')
        first = True
        for k in range(copies):
            for i, e in enumerate(events):
                if k:
                    e = dict(e)
                    if "ts" in e and e.get("ph") != "M":
                        e["ts"] = e["ts"] + k * span
                    args = e.get("args")
                    if isinstance(args, dict) and "correlation" in args:
                        e["args"] = dict(args, correlation=args["correlation"] + k * corr)
                    name = e.get("name", "")
                    if isinstance(name, str) and name.startswith("ProfilerStep#"):
                        e["name"] = f"ProfilerStep#{int(name[13:]) + 3 * k}"
                    text = json.dumps(e)
                else:
                    text = texts[i]
                out.write(("" if first else ",\n") + text)
                first = False
        out.write("\n]}\n")
    return copies


RSS_CHILD = r"""
import sys
sys.path.insert(0, {root!r})
from scalemodel.calibrate import read_trace
import scalemodel.calibrate.fit, scipy.optimize  # imports before the baseline


def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) * 1024


open("/proc/self/clear_refs", "w").write("5")   # reset the peak (VmHWM) to the current RSS
before = status("VmRSS")
rep = read_trace({path!r})
print(before, status("VmHWM"), rep.step_count)
"""


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--size-mb", type=float, default=100.0)
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    print(f"{'trace':36} {'file MB':>8} {'JSON MB':>8} {'seconds':>9} {'MB/s':>7}")
    for path in sorted(DATA.glob("*.json.gz")):
        t, rep = best_time(path, args.repeat)
        mb = json_bytes(path) / 1e6
        print(f"{path.name:36} {path.stat().st_size / 1e6:8.2f} {mb:8.2f} {t:9.2f} "
              f"{mb / t:7.1f}")
    with tempfile.TemporaryDirectory() as tmp:
        big = Path(tmp) / "synthetic.json"
        copies = synthetic(big, args.size_mb)
        size = big.stat().st_size
        t, rep = best_time(big, 1)
        print(f"\nsynthetic trace: {size / 1e6:.1f} MB ({copies} copies of "
              f"ddp_2ranks_allreduce_b, {rep.step_count} steps): read in {t:.2f} s, "
              f"{size / 1e6 / t:.1f} MB/s, {t / (size / 1e6) * 1e3:.1f} ms per MB")
        import tracemalloc
        tracemalloc.start()
        read_trace(big)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        print(f"  peak Python allocations while reading (tracemalloc): {peak / 1e6:.1f} MB "
              f"= {peak / size:.2f} x the file")
        out = subprocess.run([sys.executable, "-c",
                              RSS_CHILD.format(root=str(ROOT), path=str(big))],
                             capture_output=True, text=True, check=True)
        before, after, _ = (int(v) for v in out.stdout.split())
        print(f"  peak resident set grows by {(after - before) / 1e6:.1f} MB while reading "
              f"(VmHWM after /proc/self/clear_refs, fresh process; {before / 1e6:.0f} MB "
              f"after the imports) = {(after - before) / size:.2f} x the file")


if __name__ == "__main__":
    main()
