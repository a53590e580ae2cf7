r"""The data-parallel wrapper's own costs, measured on one worker.

The framework terms of a cluster (:ref:`framework-terms`) are work of the compute path:
DDP's per-iteration work :math:`t_w` (``iteration_overhead``) and its work per bucket
:math:`c_b` (``bucket_overhead``: the autograd hook, the copy into the bucket, the launch
of its collective). Neither needs a network to be seen: one worker trained with and
without DDP, at a few bucket sizes, shows both. With :math:`K` buckets,

.. math::
   :label: wrapper-fit

   T_1^\text{DDP}(K) - T_1 = t_w + K\,c_b

(eq. :eq:`wrapped-single`), a straight line in :math:`K`. :func:`measure_wrapper` trains
the model plain and under ``DistributedDataParallel`` on a process group of one rank, at
each ``bucket_cap_mb`` of a sweep (0, one bucket per tensor, up to a cap that holds the
whole model), in rounds: every round runs one iteration of each setting, the order
rotated from round to round, so that drift of the machine falls on all settings alike.
:math:`K` is what DDP itself reports (``num_buckets_reduced`` of its logging data, after
it rebuilt its buckets in the first iteration), not a model of it. The paired differences
:math:`T_1^\text{DDP} - T_1` of each round give, per setting, a median; a least-squares
line through them gives :math:`t_w` and :math:`c_b`, and a bootstrap over the rounds
their 95 % intervals (:meth:`WrapperMeasurement.fit`).

The same measurement is also a set of runs for :func:`scalemodel.fit_cluster`
(:meth:`WrapperMeasurement.runs`: ``n = 1``, ``wrapped``, ``bucket_cap_mb``, the plain
time as ``single_worker_time``), which fits the two terms with its own bucket model; the
direct line above is the check of that model's bucket counts.

On one GPU the all-reduce of a one-rank group is a copy on NCCL's stream: what the sweep
sees is the framework's work, not the network's, which the transport step (or nccl-tests)
measures. ``python -m scalemodel.calibrate --steps compute,wrapper`` runs it as a single
process.
"""

from __future__ import annotations

import copy
import sys
import time

import attrs
import numpy as np

from ..exceptions import CalibrationError, InvalidParameterError
from ..runs import MAX_UNCERTAINTY

__all__ = ["WrapperMeasurement", "measure_wrapper", "load_host_costs", "DEFAULT_BUCKET_CAPS"]

DEFAULT_BUCKET_CAPS = (0.0, 1.0, 5.0, 25.0, 100.0)
"""The ``bucket_cap_mb`` sweep [MiB]: one bucket per tensor, DDP's 25 MiB default, and
caps on either side of it."""

_ONE_BYTE_MB = 2.0 ** -20
"""The cap DDP is given for 0 [MiB]: one byte, so every tensor is a bucket of its own
(torch 2.11's DDP refuses ``bucket_cap_mb=0``; 2.13 takes it to mean the same)."""

_BOOTSTRAP = 2000
"""Bootstrap resamples of the rounds for the intervals of :meth:`WrapperMeasurement.fit`."""


def _device_time(wrapped, host, plain):
    """The wrapper's GPU work :math:`g` from the per-cap median iteration and host issue
    times of the DDP runs and the plain median [s]: ``(g, (low, high), seen)``
    (:meth:`WrapperMeasurement.host_fit`)."""
    added = np.asarray(wrapped, float) - plain
    gpu_bound = np.asarray(host, float) < 0.75 * np.asarray(wrapped, float)
    if gpu_bound.any():
        seen = added[gpu_bound]
        return (max(float(np.median(seen)), 0.0),
                (max(float(seen.min()), 0.0), max(float(seen.max()), 0.0)), True)
    return 0.0, (0.0, max(float(added.min()), 0.0)), False


def _line(k, samples, confidence, seed):
    """The line through the per-cap medians of ``samples`` (caps x rounds) against the
    bucket counts ``k``, and bootstrap intervals over the rounds: ``(a, b, (a_lo, a_hi),
    (b_lo, b_hi))`` [s]."""
    a, b = _ols(k, np.median(samples, axis=1))
    rounds = samples.shape[1]
    idx = np.random.default_rng(seed).integers(0, rounds, size=(_BOOTSTRAP, rounds))
    ab, bb = _ols(k, np.median(samples[:, idx], axis=2).T)  # (resamples,) each
    q = [(1 - confidence) / 2 * 100, (1 + confidence) / 2 * 100]
    return (float(a), float(b), tuple(float(v) for v in np.percentile(ab, q)),
            tuple(float(v) for v in np.percentile(bb, q)))


def _ols(k, d):
    """Least-squares ``d = a + b k`` along the last axis: ``(a, b)`` [s]."""
    k = np.asarray(k, float)
    km = k.mean()
    dm = d.mean(axis=-1)
    b = ((k - km) * (d - dm[..., None])).sum(axis=-1) / ((k - km) ** 2).sum()
    return dm - b * km, b


@attrs.frozen
class WrapperMeasurement:
    """What :func:`measure_wrapper` measured.

    Parameters
    ----------
    model : str
        The model spec [-].
    batch_size : int
        Samples per iteration [samples].
    bucket_caps : numpy.ndarray
        The ``bucket_cap_mb`` of each wrapped setting [MiB].
    buckets : numpy.ndarray
        Buckets DDP reduced per iteration at each cap, as it reports them [-].
    plain : numpy.ndarray
        Per timed round, the iteration time without the wrapper [s].
    wrapped : numpy.ndarray
        Per cap (rows) and timed round (columns), the iteration time under DDP [s].
    device : str
        Where it ran [-].
    backend : str
        The one-rank process group's backend [-].
    amp : str or None
        Mixed-precision dtype of forward and loss [-].
    provenance : dict
        Versions, date and timer [-].
    host : numpy.ndarray or None
        Per setting (plain first, then each cap) and timed round, the host's time to
        issue the iteration: from its start to the return of the optimizer step, before
        the closing synchronisation (on a GPU the work the host queued may still run;
        on the CPU it is the iteration) [s].
    tensors : int or None
        Parameter tensors with gradients; None: the bucket count at cap 0 [-].
    """

    model: str
    batch_size: int
    bucket_caps: np.ndarray
    buckets: np.ndarray
    plain: np.ndarray
    wrapped: np.ndarray
    device: str
    backend: str
    amp: str | None = None
    provenance: dict = attrs.field(factory=dict)
    host: np.ndarray | None = None
    tensors: int | None = None

    @property
    def differences(self) -> np.ndarray:
        """Per cap and round, the wrapped minus the plain iteration of the same round [s]."""
        return self.wrapped - self.plain[None, :]

    def fit(self, confidence=0.95, seed=0) -> dict:
        """The line of eq. :eq:`wrapper-fit` through the per-cap median differences.

        Parameters
        ----------
        confidence : float
            Level of the bootstrap intervals, in (0, 1) [-].
        seed : int
            Seed of the bootstrap [-].

        Returns
        -------
        dict
            ``iteration_overhead`` and ``bucket_overhead`` [s], each with its interval
            (``*_interval``, a ``(low, high)`` pair [s]), the per-cap median differences
            ``medians`` [s] and the line's ``residuals`` there [s]; ``bucket_overhead``
            is None (and so are both intervals) when every cap gave the same bucket count.
        """
        if not 0 < confidence < 1:
            raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
        d = self.differences
        med = np.median(d, axis=1)
        k = np.asarray(self.buckets, float)
        out = {"medians": med.tolist(), "buckets": k.astype(int).tolist(),
               "bucket_caps_mb": np.asarray(self.bucket_caps, float).tolist(),
               "plain_median": float(np.median(self.plain)), "confidence": confidence}
        if np.unique(k).size < 2:
            out.update(iteration_overhead=float(np.median(med)), bucket_overhead=None,
                       iteration_overhead_interval=None, bucket_overhead_interval=None,
                       residuals=None)
            return out
        a, b, a_ci, b_ci = _line(k, d, confidence, seed)
        out.update(iteration_overhead=a, bucket_overhead=b,
                   iteration_overhead_interval=a_ci, bucket_overhead_interval=b_ci,
                   residuals=(med - (a + b * k)).tolist())
        return out

    def host_fit(self, confidence=0.95, seed=0) -> dict:
        """The host's costs of eq. :eq:`host-bound` (:mod:`scalemodel.framework`).

        The wrapper's added host time per cap (paired medians of the host's issue times)
        is a line in the bucket count, :math:`W = P h_p + K h_b`: its intercept over the
        :math:`P` tensors is the work per tensor, its slope the work per bucket. The
        wrapper's work on the GPU, :math:`g`, is the median added iteration time of the
        caps whose host issue time stays below 75 % of the iteration (GPU-bound), its
        interval the lowest and highest of them. When no cap is GPU-bound, :math:`g` is not
        seen: 0, with the interval from 0 to the least added iteration time of any cap
        (a host-bound step still takes at least :math:`T + g`, eq. :eq:`host-bound`), and
        ``device_time_seen`` False.

        Parameters
        ----------
        confidence : float
            Level of the bootstrap intervals, in (0, 1) [-].
        seed : int
            Seed of the bootstrap [-].

        Returns
        -------
        dict
            ``per_tensor``, ``per_bucket``, ``device_time`` [s], each with an
            ``*_interval`` pair [s], ``device_time_seen`` [-], ``tensors`` [-],
            ``host_plain`` and ``iteration_plain`` (medians) [s].

        Raises
        ------
        CalibrationError
            The measurement has no host times, or one bucket count only.
        """
        if self.host is None:
            raise CalibrationError("this wrapper measurement has no host issue times "
                                   "(recorded since the step measures them): measure again")
        if not 0 < confidence < 1:
            raise InvalidParameterError("confidence", confidence, "a number in (0, 1)")
        k = np.asarray(self.buckets, float)
        if np.unique(k).size < 2:
            raise CalibrationError("one bucket count at every cap: the per-bucket and "
                                   "per-tensor host work cannot be told apart")
        caps = np.asarray(self.bucket_caps, float)
        p = float(self.tensors if self.tensors is not None else k[np.argmin(caps)])
        host = np.asarray(self.host, float)
        added = host[1:] - host[0][None, :]
        a, b, a_ci, b_ci = _line(k, added, confidence, seed)
        g, g_ci, seen = _device_time(np.median(self.wrapped, axis=1), np.median(host[1:], axis=1),
                                     float(np.median(self.plain)))
        return {"per_tensor": a / p, "per_bucket": b,
                "per_tensor_interval": (a_ci[0] / p, a_ci[1] / p), "per_bucket_interval": b_ci,
                "device_time": g, "device_time_interval": g_ci, "device_time_seen": seen,
                "tensors": int(p),
                "host_plain": float(np.median(host[0])),
                "iteration_plain": float(np.median(self.plain)), "confidence": confidence}

    def host_costs(self, confidence=0.95, seed=0):
        """:meth:`host_fit` as the cluster's :class:`~scalemodel.hostcosts.HostCosts`
        (a negative fitted cost, noise around 0, is taken as 0).

        Parameters
        ----------
        confidence : float
            Level of the bootstrap intervals, in (0, 1) [-].
        seed : int
            Seed of the bootstrap [-].

        Returns
        -------
        HostCosts
            Per tensor, per bucket and on the GPU [s], ``source`` naming the model and
            device, with the bootstrap intervals of the first two and the interval of the
            third (each widened to hold the value).
        """
        from ..hostcosts import HostCosts

        f = self.host_fit(confidence, seed)
        iv = {k: tuple(sorted(min(max(float(v), 0.0), 1.0) for v in f[f"{k}_interval"]))
              for k in ("per_tensor", "per_bucket", "device_time")}
        return HostCosts(per_tensor=max(f["per_tensor"], 0.0),
                         per_bucket=max(f["per_bucket"], 0.0),
                         device_time=min(f["device_time"], 1.0),
                         source=f"wrapper step: {self.model} on {self.device}",
                         intervals={k: (min(lo, min(max(f[k], 0.0), 1.0)),
                                        max(hi, min(max(f[k], 0.0), 1.0)))
                                    for k, (lo, hi) in iv.items()})

    def runs(self, model, bw=100e9, uncertainty=None) -> list:
        """The measurement as runs for :func:`scalemodel.fit_cluster`.

        Parameters
        ----------
        model : str
            What each run's ``model`` names: the profile file of the compute step, or a
            built-in profile [-].
        bw : float
            The runs' line rate; one worker sends nothing, so any valid rate [bits/s].
        uncertainty : float or None
            Relative uncertainty of each run's time; None: half the 10-90 % spread of
            its rounds' paired differences over the run's time, at least 0.2 %, and at
            least how much faster than the plain median it came out (one worker under the
            wrapper cannot be faster than without it: such a difference is the rounds'
            noise), at most ``scalemodel.runs.MAX_UNCERTAINTY`` (what ``fit_cluster``
            takes) [-].

        Returns
        -------
        list of dict
            One run per cap: ``n = 1``, ``wrapped``, ``bucket_cap_mb``,
            ``single_worker_time`` (the plain median) and ``iteration_time``, that plus
            the median of the rounds' paired differences, as :meth:`fit` takes them (the
            median of the wrapped rounds alone carries the machine's drift between rounds:
            on a shared CPU it put the 0 MB cap 20.8 ms above the plain time where the
            paired differences say 2.4 ms) [-].
        """
        plain = float(np.median(self.plain))
        rows = []
        for cap, diff in zip(self.bucket_caps, self.differences):
            med = plain + float(np.median(diff))
            lo, hi = np.percentile(diff, [10, 90])
            u = uncertainty if uncertainty is not None else min(
                MAX_UNCERTAINTY, max(0.002, float((hi - lo) / 2 / med), (plain - med) / med))
            # (a spread beyond 100 %, a noisy shared CPU's, stays what the runs take)
            rows.append({"model": model, "n": 1, "bw": bw, "iteration_time": med,
                         "single_worker_time": plain, "wrapped": True,
                         "bucket_cap_mb": float(cap),
                         "first_bucket_mb": float(cap) if cap > 0 else None,
                         "fusion": "ddp",
                         "uncertainty": round(u, 6),
                         "label": f"DDP on one worker, bucket_cap_mb {cap:g}"})
        return rows

    def to_dict(self) -> dict:
        """JSON-ready: the settings, every timed round and the fit [-]."""
        return {"model": self.model, "batch_size": self.batch_size,
                "device": self.device, "backend": self.backend, "amp": self.amp,
                "bucket_caps_mb": np.asarray(self.bucket_caps, float).tolist(),
                "buckets": np.asarray(self.buckets).astype(int).tolist(),
                "plain_seconds": np.asarray(self.plain).tolist(),
                "wrapped_seconds": np.asarray(self.wrapped).tolist(),
                "host_seconds": None if self.host is None else np.asarray(self.host).tolist(),
                "tensors": self.tensors,
                "fit": self.fit(), "provenance": dict(self.provenance),
                "host_fit": None if self.host is None or np.unique(self.buckets).size < 2
                else self.host_fit()}

    @classmethod
    def from_dict(cls, data) -> "WrapperMeasurement":
        """The measurement back from :meth:`to_dict`'s JSON (``<stem>.wrapper.json``).

        Parameters
        ----------
        data : dict
            The parsed file [-].
        """
        try:
            host = data.get("host_seconds")
            _check_shapes(data)
            return cls(model=str(data["model"]), batch_size=int(data["batch_size"]),
                       bucket_caps=np.asarray(data["bucket_caps_mb"], float),
                       buckets=np.asarray(data["buckets"], int),
                       plain=np.asarray(data["plain_seconds"], float),
                       wrapped=np.asarray(data["wrapped_seconds"], float),
                       device=str(data["device"]), backend=str(data["backend"]),
                       amp=data.get("amp"), provenance=dict(data.get("provenance") or {}),
                       host=None if host is None else np.asarray(host, float),
                       tensors=data.get("tensors"))
        except (KeyError, TypeError, ValueError, OverflowError) as exc:
            raise CalibrationError(f"not a wrapper measurement: {exc}") from None

    def __str__(self):
        f = self.fit()
        line = (f"{self.model}, batch {self.batch_size} on {self.device}: plain "
                f"{f['plain_median'] * 1e3:.2f} ms; under DDP "
                + ", ".join(f"{m * 1e3:+.3f} ms ({k} bucket{'' if k == 1 else 's'})"
                            for m, k in zip(f["medians"], f["buckets"])))
        if f["bucket_overhead"] is not None:
            lo, hi = f["bucket_overhead_interval"]
            wlo, whi = f["iteration_overhead_interval"]
            line += (f"; per bucket {f['bucket_overhead'] * 1e6:.1f} us [{lo * 1e6:.1f}, "
                     f"{hi * 1e6:.1f}], per iteration {f['iteration_overhead'] * 1e3:.3f} ms "
                     f"[{wlo * 1e3:.3f}, {whi * 1e3:.3f}]")
            if f["bucket_overhead"] < 0 or f["iteration_overhead"] < 0:
                line += (" (a negative cost is noise around 0, taken as 0 where the cluster "
                         "uses it: measure more rounds)")
        if self.host is not None and f["bucket_overhead"] is not None:
            h = self.host_fit()
            share = h["host_plain"] / h["iteration_plain"]
            bound = ("host-bound: DDP's host work shows" if share > 0.75 else
                     "GPU-bound: the GPU hides DDP's host work")
            line += (f"; the host issues the plain iteration in {100 * share:.0f} % of it "
                     f"({bound}); DDP's host work {h['per_tensor'] * 1e6:.1f} us per "
                     f"tensor and {h['per_bucket'] * 1e6:.1f} us per bucket "
                     "(scalemodel.framework"
                     + ("; negative: noise around 0, taken as 0)"
                        if min(h["per_tensor"], h["per_bucket"]) < 0 else ")"))
        return line


def _check_shapes(data):
    """A wrapper file's arrays as :meth:`WrapperMeasurement.to_dict` writes them: ``K``
    caps, ``K`` bucket counts (positive integers), ``R`` plain rounds, ``K x R`` wrapped
    and ``(K + 1) x R`` host times, every time finite and > 0 (a file is untrusted
    input); else a CalibrationError naming the key."""
    if not isinstance(data, dict):
        raise CalibrationError(f"not a wrapper measurement: a JSON object is needed, not "
                               f"{type(data).__name__}")
    missing = [k for k in ("model", "batch_size", "bucket_caps_mb", "buckets",
                           "plain_seconds", "wrapped_seconds", "device", "backend")
               if k not in data]
    if missing:  # (a bare KeyError said only "not a wrapper measurement: 'buckets'")
        raise CalibrationError(f"not a wrapper measurement: it lacks {', '.join(missing)}")
    batch = data["batch_size"]
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise CalibrationError(f"not a wrapper measurement: batch_size must be a whole "
                               f"number >= 1, not {batch!r}")

    def arr(key, ndim):
        try:
            a = np.asarray(data[key], dtype=float)
        except (TypeError, ValueError, OverflowError):  # an integer beyond a float
            raise CalibrationError(f"not a wrapper measurement: {key} is not numbers") \
                from None
        if a.ndim != ndim or a.size == 0 or not np.all(np.isfinite(a)):
            raise CalibrationError(f"not a wrapper measurement: {key} must be a "
                                   f"{'list' if ndim == 1 else 'table'} of finite numbers")
        return a

    caps, counts = arr("bucket_caps_mb", 1), arr("buckets", 1)
    plain, wrapped = arr("plain_seconds", 1), arr("wrapped_seconds", 2)
    k, r = caps.size, plain.size
    if counts.shape != (k,) or np.any(counts < 1) or np.any(counts != np.round(counts)):
        raise CalibrationError(f"not a wrapper measurement: buckets must be {k} whole "
                               "numbers >= 1, one per cap")
    if wrapped.shape != (k, r):
        raise CalibrationError(f"not a wrapper measurement: wrapped_seconds is "
                               f"{wrapped.shape[0]} x {wrapped.shape[1]}, not {k} caps x "
                               f"{r} rounds")
    times = [plain, wrapped]
    if data.get("host_seconds") is not None:
        host = arr("host_seconds", 2)
        if host.shape != (k + 1, r):
            raise CalibrationError(f"not a wrapper measurement: host_seconds is "
                                   f"{host.shape[0]} x {host.shape[1]}, not {k + 1} settings "
                                   f"x {r} rounds")
        times.append(host)
    if any(np.any(t <= 0) for t in times):
        raise CalibrationError("not a wrapper measurement: a time is not > 0")
    if np.any(caps < 0):  # (0: a bucket per tensor)
        raise CalibrationError("not a wrapper measurement: bucket_caps_mb must be >= 0 MB")
    tensors = data.get("tensors")
    if tensors is not None and (isinstance(tensors, bool) or not isinstance(tensors, int)
                                or not counts.max() <= tensors <= 10**9):
        raise CalibrationError(f"not a wrapper measurement: tensors={tensors!r} must be a "
                               f"whole number of gradient tensors, at least the most buckets "
                               f"of any cap ({int(counts.max())}: a bucket holds at least one)")


def _check_caps(bucket_caps, name="bucket_caps"):
    """The caps as floats; an :class:`~scalemodel.InvalidParameterError` naming ``name``
    unless they are at least two different sizes in the range DDP takes."""
    from ..fusion import MAX_BUCKET_CAP_MB
    try:
        caps = [float(c) for c in bucket_caps]
    except (TypeError, ValueError):
        raise InvalidParameterError(name, bucket_caps,
                                    "a list of bucket sizes in MiB") from None
    bad = [c for c in caps if not (0 <= c <= MAX_BUCKET_CAP_MB)]
    if bad or len(caps) < 2 or len(set(caps)) != len(caps):
        raise InvalidParameterError(
            name, bucket_caps,
            f"at least two different sizes, each in [0, {MAX_BUCKET_CAP_MB:g}] MiB")
    return caps


def _one_rank_group(dist):
    """A process group of this rank alone (the default one when the world is one rank)."""
    if dist.get_world_size() == 1:
        return None
    raise CalibrationError(
        "the wrapper step measures one worker with and without DDP: run it as a single "
        f"process, not in a world of {dist.get_world_size()} ranks (python -m "
        "scalemodel.calibrate --steps compute,wrapper)")


def measure_wrapper(model="mlp", *, batch_size=32, bucket_caps=DEFAULT_BUCKET_CAPS,
                    warmup=3, iterations=20, device=None, amp=None, lr=0.01,
                    progress=True) -> WrapperMeasurement:
    """Train ``model`` on one worker, plain and under DDP at each bucket cap, in rounds.

    Needs an initialised process group of one rank (``python -m scalemodel.calibrate``
    makes one for a single process).

    Parameters
    ----------
    model : str
        Model spec (see :mod:`scalemodel.calibrate.models`) [-].
    batch_size : int
        Samples per iteration [samples].
    bucket_caps : sequence of float
        DDP ``bucket_cap_mb`` values, at least two; 0 is one bucket per tensor [MiB].
    warmup : int
        Untimed rounds first (DDP rebuilds its buckets in its first iteration) [-].
    iterations : int
        Timed rounds, at least 3 [-].
    device : str or torch.device, optional
        The device; the rank's GPU under nccl, else the CPU [-].
    amp : {None, "bf16", "fp16"}
        Mixed precision for forward and loss [-].
    lr : float
        SGD learning rate [-].
    progress : bool
        Print a line per round [-].

    Returns
    -------
    WrapperMeasurement
    """
    from .compute import autocast_context, device_name
    from .models import load_model, loss_function
    from .transport import distributed_context
    caps = _check_caps(bucket_caps)
    torch, dist, backend, device, sync = distributed_context(
        "measure_wrapper", None, device, warmup=(warmup, 1), iterations=(iterations, 3))
    group = _one_rank_group(dist)
    autocast = autocast_context(amp, device)
    net, x, y, _ = load_model(model, batch_size)
    net, x, y = net.to(device), x.to(device), y.to(device)
    loss_fn = loss_function(y)
    settings = [("plain", net)]
    for cap in caps:  # each setting its own copy: DDP's hooks never meet another's
        twin = copy.deepcopy(net)
        settings.append((cap, torch.nn.parallel.DistributedDataParallel(
            twin, device_ids=[device.index] if device.type == "cuda" else None,
            bucket_cap_mb=cap or _ONE_BYTE_MB, process_group=group)))
    opts = [torch.optim.SGD(m.parameters(), lr=lr) for _, m in settings]

    def step(i):
        m, opt = settings[i][1], opts[i]
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with autocast():
            loss = loss_fn(m(x), y)
        loss.backward()
        opt.step()
        issued = time.perf_counter() - t0
        sync()
        return time.perf_counter() - t0, issued

    times, host = _rounds(step, len(settings), warmup, iterations, progress)
    buckets = [_bucket_count(m) for _, m in settings[1:]]
    prov = {"torch": torch.__version__, "timer": "time.perf_counter around synchronized "
            "iterations", "warmup": warmup, "iterations": iterations,
            "order": "rounds, the settings' order rotated each round",
            "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    return WrapperMeasurement(model=model, batch_size=batch_size,
                              bucket_caps=np.array(caps), buckets=np.array(buckets),
                              plain=times[0], wrapped=times[1:], host=host,
                              tensors=sum(1 for p in net.parameters() if p.requires_grad),
                              device=device_name(device), backend=backend, amp=amp,
                              provenance=prov)


def _rounds(step, settings, warmup, iterations, progress):
    """``warmup`` + ``iterations`` rounds of one iteration per setting, the order rotated
    each round; the timed rounds' iteration times and the host's issue times, each
    ``(settings, iterations)`` [s]."""
    out = np.empty((settings, iterations))
    issued = np.empty((settings, iterations))
    for r in range(warmup + iterations):
        for j in range(settings):
            i = (r + j) % settings
            t = step(i)
            if r >= warmup:
                out[i, r - warmup], issued[i, r - warmup] = t
        if progress:
            print(f"[scalemodel.calibrate] wrapper round {r + 1}/{warmup + iterations}"
                  f"{' (warm-up)' if r < warmup else ''}", file=sys.stderr, flush=True)
    return out, issued


def _bucket_count(ddp) -> int:
    """Buckets DDP reduced in its last iteration (its logging data)."""
    data = ddp._get_ddp_logging_data()
    n = data.get("num_buckets_reduced")
    if not n:
        sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes") or ""
        n = len([s for s in str(sizes).split(",") if s.strip()])
    return int(n)


def load_host_costs(source, what="wrapper"):
    """The wrapper's host costs from ``source``: a
    :class:`~scalemodel.hostcosts.HostCosts` (returned as it is), a
    :class:`WrapperMeasurement`, or the path of the wrapper step's
    ``<stem>.wrapper.json`` (read as untrusted input).

    Parameters
    ----------
    source : HostCosts, WrapperMeasurement, str or os.PathLike
        The measurement [-].
    what : str
        The parameter's name, for messages [-].

    Returns
    -------
    HostCosts
        Per tensor, per bucket and on the GPU [s].

    Raises
    ------
    CalibrationError
        A file that is not a wrapper measurement, or one without host times or with one
        bucket count only (the per-tensor and per-bucket work cannot be told apart).
    ParameterTypeError
        ``source`` of another type; names ``what``.
    """
    import os

    from .._jsonfile import read_json_file
    from ..exceptions import ParameterTypeError
    from ..hostcosts import HostCosts

    if isinstance(source, HostCosts):
        return source
    if isinstance(source, WrapperMeasurement):
        return source.host_costs()
    if not isinstance(source, (str, os.PathLike)):
        raise ParameterTypeError(what, source, "a HostCosts, a WrapperMeasurement or the "
                                 "path of a <stem>.wrapper.json file")
    data = read_json_file(source, what="wrapper measurement")
    if not isinstance(data, dict):
        raise CalibrationError(f"{source}: not a wrapper measurement (a JSON object of "
                               "python -m scalemodel.calibrate --steps wrapper)")
    try:
        return WrapperMeasurement.from_dict(data).host_costs()
    except CalibrationError as exc:
        raise CalibrationError(f"{source}: {exc}") from None
    except (ValueError, IndexError, TypeError, InvalidParameterError) as exc:
        # arrays of other shapes, or numbers that are not times (NaN, negative)
        raise CalibrationError(f"{source}: not a usable wrapper measurement ({exc})") \
            from None
