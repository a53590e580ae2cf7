"""Speed and memory of the profiler-trace reader, :func:`scalemodel.calibrate.read_trace`.

    python benchmarks/bench_trace.py [--size-mb 100] [--repeat 3] [--adversarial-mb 20 40]

1. Reads each trace in ``tests/data/traces`` (best of ``--repeat``) and prints the
   reading speed in MB of trace JSON per second (the ``.gz`` files are decompressed on the
   fly; their compressed size is shown too), next to ``json.load`` of the same bytes
   (decompressed, best of ``--repeat``): the ratio must stay below 4.
2. Adversarial values: ``ddp_2ranks_allreduce_b`` with one metadata array of
   ``--adversarial-mb`` MB of numbers before its events (plain and gzip, the gzip of it is
   a few hundred kB): the time per MB must not grow with the size (linear time), and
   stays within 4x of ``json.load``; and with one string of that size, which is refused
   (longer than the reader's 1 MB token limit) after reading up to it.
3. Builds a synthetic trace of about ``--size-mb`` MB (plain JSON: the events of
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
from scalemodel.exceptions import ProfileFormatError  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _report import positive  # noqa: E402  (the option types the scripts share)


def json_bytes(path):
    """Size of the trace's JSON text [bytes] (decompressed)."""
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            return sum(len(b) for b in iter(lambda: fh.read(1 << 20), b""))
    return Path(path).stat().st_size


def json_load_time(path, repeat):
    """Best time of ``json.load`` of the trace's bytes (decompressed, in memory) [s]."""
    if str(path).endswith(".gz"):
        with gzip.open(path, "rb") as fh:
            data = fh.read()
    else:
        data = Path(path).read_bytes()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        json.loads(data)
        best = min(best, time.perf_counter() - t0)
    return best


def adversarial(path, size_mb, kind):
    """``ddp_2ranks_allreduce_b`` with a metadata value of ``size_mb`` MB before the
    events: an array of numbers (``kind="array"``) or one string (``"string"``)."""
    with gzip.open(DATA / "ddp_2ranks_allreduce_b.json.gz", "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    n = int(size_mb * 1e6)
    value = ("[" + "0.125, " * (n // 7) + "0]") if kind == "array" else \
        ('"' + "x" * n + '"')
    text = json.dumps(doc)[:-1] + ', "padding": ' + value + ', "traceEvents": ' \
        + json.dumps(events) + "}"
    data = text.encode()
    Path(path).write_bytes(gzip.compress(data, 6) if str(path).endswith(".gz") else data)


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
    p = argparse.ArgumentParser(description=" ".join(__doc__.strip().split("\n\n")[0].split()))
    p.add_argument("--size-mb", type=positive(float), default=100.0,
                   help="size of the generated large trace [MB] (default: 100)")
    p.add_argument("--repeat", type=positive(int), default=3,
                   help="reads per trace; the best time is printed (default: 3)")
    p.add_argument("--adversarial-mb", type=positive(float), nargs="*", default=[20.0, 40.0],
                   help="sizes of the adversarial traces [MB] (default: 20 40)")
    args = p.parse_args(argv)
    print(f"{'trace':36} {'file MB':>8} {'JSON MB':>8} {'seconds':>9} {'MB/s':>7} "
          f"{'json.load s':>11} {'ratio':>6}")
    for path in sorted(DATA.glob("*.json.gz")):
        t, rep = best_time(path, args.repeat)
        tj = json_load_time(path, args.repeat)
        mb = json_bytes(path) / 1e6
        print(f"{path.name:36} {path.stat().st_size / 1e6:8.2f} {mb:8.2f} {t:9.2f} "
              f"{mb / t:7.1f} {tj:11.2f} {t / tj:6.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        print("\nadversarial: ddp_2ranks_allreduce_b with a large metadata value before "
              "its events")
        print(f"{'value':30} {'file MB':>8} {'JSON MB':>8} {'seconds':>9} {'ms/MB':>7} "
              f"{'json.load s':>11} {'ratio':>6}")
        for kind in ("array", "string"):
            for size in args.adversarial_mb:
                for suffix in (".json", ".json.gz"):
                    path = Path(tmp) / f"adv{suffix}"
                    adversarial(path, size, kind)
                    t0 = time.perf_counter()
                    try:
                        t, rep = best_time(path, 1)
                        note = ""
                    except ProfileFormatError as exc:   # a string over the token limit
                        t = time.perf_counter() - t0
                        note = "  refused: " + str(exc).split(": ", 2)[-1][:40] + "..."
                    tj = json_load_time(path, 1)
                    mb = json_bytes(path) / 1e6
                    print(f"{f'{size:g} MB {kind} ({suffix[1:]})':30} "
                          f"{path.stat().st_size / 1e6:8.2f} {mb:8.2f} {t:9.2f} "
                          f"{t / mb * 1e3:7.1f} {tj:11.2f} {t / tj:6.2f}{note}")
                    path.unlink()
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
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "bench_trace"))
