"""The data-parallel wrapper's own costs on one H200: the bucket model and the transfer of
the framework terms from one model to the others (issue 17, item 3).

Data: ``calibration/results/h200/framework`` (its README): eight models / precisions, each
trained on one H200 plain and under DDP at ``bucket_cap_mb`` 0, 1, 5, 25 and 100 in 20
rotated rounds (:mod:`scalemodel.calibrate.wrapper`), with DDP's own bucket counts.

Three checks, printed per measurement:

1. **Bucket counts.** DDP's reported count at every cap against
   :class:`scalemodel.fusion.DDPBuckets` on the measured profile, with the 1 MiB first
   bucket (scalemodel's default, torch 1.x's behaviour, which the published DDP data
   used) and with the first bucket at the cap (torch >= 2.x when ``bucket_cap_mb`` is
   given: ``BucketCapacityConfig.create`` keeps 1 MiB only for the default).
2. **The line** :math:`T^\\text{DDP} - T = t_w + K c_b` (eq. ``wrapper-fit``): its two
   values with bootstrap 95 % intervals and its largest residual; beside it what
   :func:`scalemodel.fit_cluster` makes of the same runs.
3. **Transfer.** Calibrated on ONE model's sweep (its :math:`t_w, c_b`), predict every
   other model's DDP iteration at every cap, :math:`\\tilde T_B + t_w + K_B c_b` (its
   measured plain time and DDP's bucket count); error = predicted / measured - 1.
   Baseline "no wrapper cost": the plain time itself (what the model predicted before
   these terms).

4. **The repeat sweep** (``calibration/results/h200/framework-repeat``, with the host's
   issue times): eq. ``host-bound`` calibrated on one model, the seven others predicted.
5. **Another GPU** (``calibration/results/h100/framework``: the same eight models on one
   H100 SXM, a different machine, recorded a day later): the H200 repeat sweep's costs of
   each model predict every H100 DDP iteration (its plain and host times measured), as
   the library does it, with the library's interval; beside it the H100's own models
   calibrating each other, and bucket counts as in check 1.

Run from the repository root: ``python benchmarks/validate_framework.py`` (a few seconds;
writes ``benchmarks/results/validate_framework.txt`` unless ``--no-write``).
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT))

import scalemodel as sm  # noqa: E402
from scalemodel.fusion import DDPBuckets  # noqa: E402
from scalemodel.model import Scenario  # noqa: E402

DATA = ROOT / "calibration" / "results" / "h200" / "framework"
OUT = ROOT / "benchmarks" / "results" / "validate_framework.txt"


def load():
    """Per measurement: name, the wrapper JSON, the profile."""
    out = []
    for path in sorted(DATA.glob("*.wrapper.json")):
        name = path.name[: -len(".wrapper.json")]
        out.append((name, json.loads(path.read_text()),
                    sm.load_profile(DATA / f"{name}.profile.json")))
    return out


def bucket_counts(profile, caps, first_at_cap):
    ks = []
    for cap in caps:
        c = cap * 2.0**20 if cap else 1.0  # 0: one byte, every tensor its own bucket
        fusion = DDPBuckets(cap_bytes=c, first_bucket_bytes=c if first_at_cap else 2.0**20)
        ks.append(len(Scenario.build(profile, fusion=fusion).buckets))
    return ks


def fitted(name):
    """fit_cluster on the measurement's runs: (iteration_overhead, bucket_overhead) [s]."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fit = sm.fit_cluster(DATA / f"{name}.wrapper-runs.csv")
    return (fit.cluster.iteration_overhead, fit.cluster.bucket_overhead)


def medians(d):
    return (float(np.median(d["plain_seconds"])),
            np.median(np.asarray(d["wrapped_seconds"]), axis=1))


def transfer(rows):
    """Per source: |errors| of every other measurement's rows, and the baseline's."""
    out = {}
    for src, d_src, _ in rows:
        t_w, c_b = d_src["fit"]["iteration_overhead"], d_src["fit"]["bucket_overhead"]
        errs = []
        for dst, d, _ in rows:
            if dst == src:
                continue
            plain, wrapped = medians(d)
            pred = plain + t_w + np.asarray(d["buckets"], float) * c_b
            errs += list(pred / wrapped - 1)
        out[src] = np.abs(errs)
    base = []
    for _, d, _ in rows:
        plain, wrapped = medians(d)
        base += list(plain / wrapped - 1)
    return out, np.abs(base)


REPEAT = ROOT / "calibration" / "results" / "h200" / "framework-repeat"
H100 = ROOT / "calibration" / "results" / "h100" / "framework"


def library_prediction(dst, m, f, costs, folder=DATA):
    """The DDP iterations of measurement ``m`` (its :meth:`host_fit` ``f``) as a user
    gets them from the library: the compute step's profile of ``dst`` at the measured
    plain iteration and host times, a cluster whose ``host`` is ``costs``, and
    :meth:`Scenario.wrapped_single_worker_time` with DDP's buckets at each cap (the first
    bucket at the cap, as torch 2.x makes it) [s]."""
    import attrs
    profile = sm.load_profile(folder / f"{dst}.profile.json").scaled_to(f["iteration_plain"])
    profile = attrs.evolve(profile, host_time=f["host_plain"])
    cl = sm.ClusterProfile(host=costs, provenance={"source": "validate_framework"})
    out = []
    for cap in m.bucket_caps:
        c = cap * 2.0**20 if cap else 1.0
        sc = Scenario.build(profile, cluster=cl,
                            fusion=DDPBuckets(cap_bytes=c, first_bucket_bytes=c))
        out.append(sc.wrapped_single_worker_time())
    return np.array(out)


def host_transfer(meas):
    """Per source: |errors| of eq. (host-bound) calibrated on the source's sweep
    (:meth:`WrapperMeasurement.host_fit`) for every other measurement's DDP iterations,
    given their plain iteration and host times; the same through the library
    (:func:`library_prediction`); the constant costs'; and the library interval's
    coverage (``{"inside": [bool], "width": [relative]}``, between the predictions at the
    host costs' two ends)."""
    from scalemodel.framework import wrapped_iteration_time
    out, const, lib = {}, {}, {}
    cover = {}  # per way of widening: the library's interval over the costs' ends
    for src, m_src in meas.items():
        h = m_src.host_fit()
        costs = m_src.host_costs()
        line = m_src.fit()
        e, c, lb = [], [], []
        for dst, m in meas.items():
            if dst == src:
                continue
            f = m.host_fit()  # only its measured plain times and counts are used
            wrapped = np.median(m.wrapped, axis=1)
            pred = wrapped_iteration_time(f["iteration_plain"], f["host_plain"],
                                          f["tensors"], m.buckets, per_tensor=h["per_tensor"],
                                          per_bucket=h["per_bucket"],
                                          device_time=h["device_time"])
            e += list(np.abs(pred / wrapped - 1))
            pc = f["iteration_plain"] + line["iteration_overhead"] \
                + np.asarray(m.buckets, float) * line["bucket_overhead"]
            c += list(np.abs(pc / wrapped - 1))
            lb += list(np.abs(library_prediction(dst, m, f, costs) / wrapped - 1))
            for key, f_ends in _interval_factors(meas, src, dst).items():
                ends = [library_prediction(dst, m, f, x) for x in costs.ends(f_ends)]
                lo, hi = np.minimum(*ends), np.maximum(*ends)
                c_ = cover.setdefault(key, {"inside": [], "width": []})
                c_["inside"] += list((lo <= wrapped) & (wrapped <= hi))
                c_["width"] += list((hi - lo) / wrapped)
        out[src], const[src], lib[src] = np.array(e), np.array(c), np.array(lb)
    return out, const, lib, cover


def spread(names, meas):
    """The largest highest-to-lowest ratio of h_p, h_b and the seen g over the
    measurements ``names`` (how :data:`scalemodel.hostcosts.HOST_COST_TRANSFER` is
    defined) [-]."""
    fits = [meas[k].host_fit() for k in names]
    ratios = [max(h[key] for h in fits) / min(h[key] for h in fits)
              for key in ("per_tensor", "per_bucket")]
    g = [h["device_time"] for h in fits if h["device_time_seen"]]
    if len(g) > 1:
        ratios.append(max(g) / min(g))
    return max(ratios)


def _interval_factors(meas, src, dst):
    """The factors an interval of ``src``'s costs predicting ``dst`` is tried with: the
    library's (HOST_COST_TRANSFER), the bootstrap alone (1), and the spread of the six
    measurements that are neither (the pair held out of the factor)."""
    return {"library": None, "bootstrap only": 1.0,
            "factor without the pair": spread([k for k in meas if k not in (src, dst)],
                                              meas)}


def main(argv=None):
    from _report import Report, parser
    args = parser(__doc__, "print only; do not rewrite benchmarks/results/"
                  "validate_framework.txt").parse_args(argv)
    rep = Report()
    rows = load()
    rep.say("The data-parallel wrapper on one H200 (PyTorch 2.11, NCCL, one rank): "
            "calibration/results/h200/framework", "",
            "1. Bucket counts at bucket_cap_mb 0 / 1 / 5 / 25 / 100: DDP's own, and "
            "DDPBuckets with a 1 MiB first bucket and with the first bucket at the cap")
    exact_first, exact_cap = 0, 0
    for name, d, prof in rows:
        caps = d["bucket_caps_mb"]
        one, cap = bucket_counts(prof, caps, False), bucket_counts(prof, caps, True)
        exact_first += sum(a == b for a, b in zip(one, d["buckets"]))
        exact_cap += sum(a == b for a, b in zip(cap, d["buckets"]))
        rep.say(f"  {name:<16} DDP {d['buckets']}  1 MiB first {one}  first at cap {cap}")
    total = sum(len(d["buckets"]) for _, d, _ in rows)
    rep.say(f"  exact: {exact_first} of {total} with a 1 MiB first bucket, {exact_cap} of "
            f"{total} with the first bucket at the cap", "",
            "2. The line T_DDP - T = t_w + K c_b (bootstrap 95 % intervals) and "
            "fit_cluster on the same runs",
            f"  {'measurement':<16} {'plain':>8} {'t_w [ms]':>22} {'c_b [us]':>20} "
            f"{'max resid':>9} {'fit_cluster t_w, c_b':>24}")
    for name, d, _ in rows:
        f = d["fit"]
        wlo, whi = f["iteration_overhead_interval"]
        blo, bhi = f["bucket_overhead_interval"]
        ft_w, fc_b = fitted(name)
        rep.say(f"  {name:<16} {f['plain_median'] * 1e3:6.1f}ms "
                f"{f['iteration_overhead'] * 1e3:6.2f} [{wlo * 1e3:5.2f}, {whi * 1e3:5.2f}] "
                f"{f['bucket_overhead'] * 1e6:6.1f} [{blo * 1e6:5.1f}, {bhi * 1e6:5.1f}] "
                f"{max(map(abs, f['residuals'])) * 1e3:6.2f}ms "
                f"{ft_w * 1e3:9.2f} ms, {fc_b * 1e6:5.1f} us")
    by_src, base = transfer(rows)
    rep.say("", "3. Transfer: calibrated on one measurement, every other one's DDP "
            "iterations predicted (35 rows each)",
            f"  {'calibrated on':<16} {'median |err|':>12} {'largest':>9}")
    meds = []
    for src, e in by_src.items():
        meds.append(np.median(e))
        rep.say(f"  {src:<16} {100 * np.median(e):11.1f} % {100 * e.max():8.1f} %")
    rep.say(f"  {'no wrapper cost':<16} {100 * np.median(base):11.1f} % "
            f"{100 * base.max():8.1f} %  (the plain time as the prediction, all 40 rows)",
            f"  median over sources of the median |err|: {100 * np.median(meds):.1f} %")
    host_section(rep, rows)
    other_gpu_section(rep)
    rep.say("", rep.elapsed_line())
    if not args.no_write:
        rep.write(OUT)


def host_section(rep, rows):
    """Section 4: the repeat sweep with the host's issue times (eq. host-bound)."""
    from scalemodel.calibrate.wrapper import WrapperMeasurement
    meas = {p.name[: -len(".wrapper.json")]:
            WrapperMeasurement.from_dict(json.loads(p.read_text()))
            for p in sorted(REPEAT.glob("*.wrapper.json"))}
    first = {name: d["fit"] for name, d, _ in rows}
    rep.say("", "4. The repeat sweep (calibration/results/h200/framework-repeat: another "
            "machine of the same kind, 16 minutes later, with the host's issue times)",
            "  the line's values in the two sweeps, and the host's share of the plain "
            "iteration (host-bound near 1)",
            f"  {'measurement':<16} {'t_w 1st, 2nd [ms]':>18} {'c_b 1st, 2nd [us]':>18} "
            f"{'H/T':>5} {'h_p [us]':>18} {'h_b [us]':>18} {'g [ms]':>6}")
    for name, m in meas.items():
        f, h = m.fit(), m.host_fit()
        a = first[name]
        plo, phi = h["per_tensor_interval"]
        blo, bhi = h["per_bucket_interval"]
        rep.say(f"  {name:<16} {a['iteration_overhead'] * 1e3:7.2f} {f['iteration_overhead'] * 1e3:6.2f}"
                f"    {a['bucket_overhead'] * 1e6:6.1f} {f['bucket_overhead'] * 1e6:6.1f}     "
                f"{h['host_plain'] / h['iteration_plain']:4.2f} "
                f"{h['per_tensor'] * 1e6:5.1f} [{plo * 1e6:4.1f}, {phi * 1e6:4.1f}] "
                f"{h['per_bucket'] * 1e6:5.1f} [{blo * 1e6:4.1f}, {bhi * 1e6:4.1f}] "
                f"{h['device_time'] * 1e3:6.2f}")
    by_src, const, lib, cover = host_transfer(meas)
    rep.say("", "  transfer on the repeat sweep: calibrated on one measurement, the 35 DDP "
            "iterations of the seven others; 'library' is the same through "
            "ClusterProfile.host (eq. host-lead) and",
            "  Scenario.wrapped_single_worker_time on each model's compute-step profile "
            "(its buckets from DDPBuckets, not DDP's counts)",
            f"  {'calibrated on':<16} {'host-bound, eq. (host-bound)':>30} "
            f"{'library':>18} {'constant t_w + K c_b':>24}",
            f"  {'':<16} {'median':>14} {'largest':>15} {'median':>9} {'largest':>8} "
            f"{'median':>12} {'largest':>11}")
    for src in by_src:
        e, c, lb = by_src[src], const[src], lib[src]
        rep.say(f"  {src:<16} {100 * np.median(e):13.1f} % {100 * e.max():13.1f} % "
                f"{100 * np.median(lb):7.1f} % {100 * lb.max():6.1f} % "
                f"{100 * np.median(c):10.1f} % {100 * c.max():9.1f} %")
    rep.say(f"  median over sources of the median: host-bound "
            f"{100 * np.median([np.median(e) for e in by_src.values()]):.1f} % (library "
            f"{100 * np.median([np.median(x) for x in lib.values()]):.1f} %), constant "
            f"{100 * np.median([np.median(c) for c in const.values()]):.1f} %")
    f_all = spread(list(meas), meas)
    rep.say(f"  the spread between the eight models (highest / lowest h_p, h_b, seen g): "
            f"{f_all:.3f}, scalemodel.hostcosts.HOST_COST_TRANSFER = "
            f"{sm.hostcosts.HOST_COST_TRANSFER:g}",
            "  the library's interval over the held-out iterations (the costs' ends, "
            "ClusterProfile.corners), widened three ways:")
    words = {"library": "by HOST_COST_TRANSFER (measured on these eight)",
             "bootstrap only": "not at all: the sweep's bootstrap (one sitting's rounds)",
             "factor without the pair": "by the spread of the six models that are "
                                        "neither the calibration nor the predicted one"}
    for key, c in cover.items():
        rep.say(f"    {words[key]:<86} {100 * np.mean(c['inside']):5.1f} % of "
                f"{len(c['inside'])} inside, median width "
                f"{100 * np.median(c['width']):4.1f} % of the measured time")



def _measurements(folder):
    from scalemodel.calibrate.wrapper import WrapperMeasurement
    return {p.name[: -len(".wrapper.json")]:
            WrapperMeasurement.from_dict(json.loads(p.read_text()))
            for p in sorted(folder.glob("*.wrapper.json"))}


def cross_gpu(sources, targets, folder):
    """Per source measurement: |errors| of the library's prediction (the source's
    :meth:`host_costs`, each target's compute-step profile at its measured plain and host
    times) of every target DDP iteration, skipping the source's own model when both sets
    are the same; and the interval's coverage over all ({"inside", "width"})."""
    out, cover = {}, {"inside": [], "width": []}
    for src, m_src in sources.items():
        costs, errs = m_src.host_costs(), []
        for dst, m in targets.items():
            if sources is targets and dst == src:
                continue
            f, wrapped = m.host_fit(), np.median(m.wrapped, axis=1)
            errs += list(np.abs(library_prediction(dst, m, f, costs, folder) / wrapped - 1))
            ends = [library_prediction(dst, m, f, x, folder) for x in costs.ends(None)]
            lo, hi = np.minimum(*ends), np.maximum(*ends)
            cover["inside"] += list((lo <= wrapped) & (wrapped <= hi))
            cover["width"] += list((hi - lo) / wrapped)
        out[src] = np.array(errs)
    return out, cover


def _counts_match(name, m):
    """Whether DDP's bucket counts of the H100 measurement ``m`` are DDPBuckets' with the
    first bucket at the cap, on its compute-step profile."""
    profile = sm.load_profile(H100 / f"{name}.profile.json")
    return bucket_counts(profile, m.bucket_caps, True) == list(m.buckets)


def other_gpu_section(rep):
    """Section 5: the H200 repeat sweep's costs predicting the H100 sweep."""
    h100 = _measurements(H100)
    if not h100:
        return
    h200 = _measurements(REPEAT)
    env = (H100 / "environment.txt").read_text().splitlines()
    rep.say("", "5. Another GPU: the same eight models on one H100 (calibration/results/"
            f"h100/framework; {env[2].split(',')[0]}, a day after the H200 sweeps, another "
            "machine)", "  bucket counts (as in 1, first bucket at the cap): " + ", ".join(
                f"{name} {'exact' if _counts_match(name, m) else 'DIFFER'}"
                for name, m in h100.items()),
            f"  {'measurement':<16} {'H/T':>5} {'h_p [us]':>9} {'h_b [us]':>9} {'g [ms]':>7}"
            f"   {'H200 h_p':>9} {'H200 h_b':>9}")
    for name, m in h100.items():
        h, r = m.host_fit(), h200[name].host_fit()
        rep.say(f"  {name:<16} {h['host_plain'] / h['iteration_plain']:5.2f} "
                f"{h['per_tensor'] * 1e6:9.1f} {h['per_bucket'] * 1e6:9.1f} "
                f"{h['device_time'] * 1e3:7.2f}   {r['per_tensor'] * 1e6:9.1f} "
                f"{r['per_bucket'] * 1e6:9.1f}")
    across, c_across = cross_gpu(h200, h100, H100)
    within, c_within = cross_gpu(h100, h100, H100)
    base = np.concatenate([np.abs(m.host_fit()["iteration_plain"]
                                  / np.median(m.wrapped, axis=1) - 1) for m in h100.values()])
    rep.say("", "  the library's prediction of the H100's DDP iterations (its plain and host "
            "times measured; eq. host-lead), calibrated on one model's sweep",
            f"  {'calibrated on':<16} {'H200 sweep: all 40':>22} {'H100 sweep: 35 others':>24}",
            f"  {'':<16} {'median':>11} {'largest':>10} {'median':>12} {'largest':>11}")
    for src in across:
        a, w = across[src], within[src]
        rep.say(f"  {src:<16} {100 * np.median(a):9.1f} % {100 * a.max():8.1f} % "
                f"{100 * np.median(w):10.1f} % {100 * w.max():9.1f} %")
    for label, c in (("H200-calibrated", c_across), ("H100-calibrated", c_within)):
        rep.say(f"  {label}: {100 * np.mean(c['inside']):.1f} % of {len(c['inside'])} "
                f"inside the library's interval (HOST_COST_TRANSFER), median width "
                f"{100 * np.median(c['width']):.1f} % of the measured time")
    rep.say(f"  no wrapper cost (the plain time): median {100 * np.median(base):.1f} %, "
            f"largest {100 * base.max():.1f} %")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _report import run_script
    sys.exit(run_script(main, "validate_framework"))
