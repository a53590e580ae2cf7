"""Transport data for :func:`~scalemodel.fit_cluster`: what a microbenchmark sees.

A transport measurement (nccl-tests, the transport step of ``python -m
scalemodel.calibrate``, a profiler trace) sees the network: the latency, the achieved
bandwidth against the line rate (utilization, table, ceiling) and the intra-node link,
with their intervals. It does not see the framework or the compute. With
``fit_cluster(runs, transport=...)`` these are fixed from the transport (status
``"transport"``) and the runs fit only what the transport cannot see (compute slowdown,
per-bucket, per-collective and per-iteration costs, synchronization, straggler spread,
overlap). :func:`load_transport` reads any of the sources into a
:class:`~scalemodel.ClusterProfile` and checks it against the runs' topology and line
rate.
"""

from __future__ import annotations

import collections
import math
import os
import re
import warnings
from pathlib import Path

import attrs

from .cluster import ClusterProfile, load_cluster
from .exceptions import CalibrationWarning, InvalidParameterError, ParameterTypeError
from .topology import _opt_count

__all__ = ["Transport", "load_transport"]

_RATE_SLACK = 0.05
"""Relative slack when comparing line rates of the transport and the runs [-]."""

_HOST = re.compile(r"#\s*Rank\s+\d+\b.*?\bon\s+(\S+)\s+device\b")


@attrs.frozen
class Transport:
    """A transport measurement, ready to fix the network terms of a fit.

    Attributes
    ----------
    cluster : ClusterProfile
        Latency, achieved bandwidth (utilization, table, ceiling), topology and their
        intervals; the fields the transport does not see are at their ideal values.
    text : str
        A short text naming the source (for ``fit_settings["transport"]``).
    gpus_per_node : int or None
        GPUs per node the transport was measured with, when it says [workers].
    line_rate : float or None
        Highest line rate the transport was measured at, when it says [bits/s].
    """

    cluster: ClusterProfile
    text: str
    gpus_per_node: int | None = None
    line_rate: float | None = None


def load_transport(transport, *, line_rate=None, gpus_per_node=None, nics_per_node=None
                   ) -> Transport:
    """Read transport data (see the module).

    Parameters
    ----------
    transport : str, os.PathLike, sequence of them, ClusterProfile, CollectiveFit or TraceReport
        An nccl-tests log or several (intra- and inter-node all-reduce logs), a cluster
        JSON written by ``python -m scalemodel.calibrate`` or ``from-nccl-tests``, a
        trace report JSON (``from-trace --out``), or the objects themselves [-].
    line_rate : float or None
        NIC line rate of nccl-tests logs (the runs' highest line rate) [bits/s].
    gpus_per_node : int or None
        GPUs per node (for nccl-tests logs: which run inside one node) [workers].
    nics_per_node : int or None
        NICs per node [NICs].

    Returns
    -------
    Transport
        The cluster of the transport terms and a text naming the source.
    """
    from .calibrate.fit import CollectiveFit, cluster_from_fits
    # None, or one integer >= 1 ("x" or [] raised a bare error further on)
    gpus_per_node = _opt_count(gpus_per_node, "gpus_per_node")
    nics_per_node = _opt_count(nics_per_node, "nics_per_node")
    if isinstance(transport, Transport):
        return transport
    if isinstance(transport, ClusterProfile):
        return _from_cluster(transport, f"cluster {transport.name!r}")
    if isinstance(transport, CollectiveFit) or (
            isinstance(transport, (list, tuple)) and transport
            and all(isinstance(f, CollectiveFit) for f in transport)):
        fits = [transport] if isinstance(transport, CollectiveFit) else list(transport)
        cl = cluster_from_fits(fits, name="transport", line_rate=line_rate,
                               provenance={"source": "collective fits"})
        return _from_cluster(cl, "collective fits")
    if hasattr(transport, "cluster") and hasattr(transport, "profile"):  # a TraceReport
        if transport.cluster is None:
            raise InvalidParameterError("transport", "trace report", "has no fitted cluster "
                                        "(see its undetermined['cluster'])")
        return _from_cluster(transport.cluster, "trace report")
    paths = _paths(transport)
    first = _read_start(paths[0])
    if first.lstrip().startswith("{"):
        if len(paths) > 1:
            raise InvalidParameterError("transport", [os.fspath(p) for p in paths],
                                        "one JSON file (a cluster or a trace report), or "
                                        "nccl-tests logs")
        return _from_json(paths[0])
    return _from_nccl_tests(paths, line_rate=line_rate, gpus_per_node=gpus_per_node,
                            nics_per_node=nics_per_node)


def _paths(transport):
    if isinstance(transport, (str, os.PathLike)):
        transport = [transport]
    if not isinstance(transport, (list, tuple)) or not transport or not all(
            isinstance(p, (str, os.PathLike)) for p in transport):
        raise ParameterTypeError("transport", transport, "an nccl-tests log or a list of "
                                 "them, a cluster or trace report JSON, a ClusterProfile "
                                 "or a TraceReport")
    for p in transport:  # Path("") is ".": name the file as given
        if not os.fspath(p):
            raise InvalidParameterError("transport", p, "is empty: name an nccl-tests log "
                                        "or a cluster JSON file")
    paths = [Path(p) for p in transport]
    for p in paths:
        if not p.is_file():
            raise InvalidParameterError("transport", os.fspath(p),
                                        "no such file" if not os.path.lexists(p)
                                        else "not a regular file")
    return paths


def _read_start(path):
    with open(path, "rb") as fh:
        return fh.read(256).decode("utf-8", errors="replace")


def _from_json(path):
    from ._jsonfile import read_json_file
    data = read_json_file(path, what="transport")
    if isinstance(data, dict) and data.get("format") == "scalemodel-cluster":
        cl = load_cluster(path)
        return _from_cluster(cl, f"{path.name} ({cl.provenance.get('source', 'cluster')})")
    report = data.get("profiles") if isinstance(data, dict) else None
    if isinstance(report, dict) and "cluster" in report:  # a trace report (from-trace)
        if not isinstance(report["cluster"], dict):
            raise InvalidParameterError("transport", os.fspath(path), "is a trace report "
                                        "without a fitted cluster (see its undetermined)")
        cl = ClusterProfile.from_dict(report["cluster"], source=os.fspath(path))
        return _from_cluster(cl, f"trace report {path.name}")
    raise InvalidParameterError("transport", os.fspath(path), "is neither a cluster JSON "
                                "(format scalemodel-cluster) nor a trace report with a "
                                "fitted cluster")


def _line_rate_of(cl):
    """Highest line rate the cluster's transport was measured at, if it says."""
    if cl.table_line_rate is not None:
        return float(cl.table_line_rate[-1])
    rates = [f.get("line_rate") for f in cl.extra.get("fits", ()) if isinstance(f, dict)]
    rates = [float(r) for r in rates if isinstance(r, (int, float)) and r > 0]
    if rates:
        return max(rates)
    rate = cl.provenance.get("line_rate") if isinstance(cl.provenance, dict) else None
    return float(rate) if isinstance(rate, (int, float)) and rate > 0 else None


def _from_cluster(cl, text):
    """Only what a transport sees: latency, achieved bandwidth, reduction, topology; a
    calibrated cluster's terms fitted on top of its transport are dropped first
    (:func:`scalemodel.calibrate.overhead.transport_only`: its fitted host overhead, which
    it stores as the reduction's per-byte cost, and the records of those fits)."""
    from .calibrate.overhead import transport_only

    cl = transport_only(cl)
    _warn_poor_fits(cl, text)
    keep = {"alpha", "utilization", "ceiling", "table_utilization", "intra_bw",
            "intra_alpha"}
    cluster = ClusterProfile(
        name=cl.name, alpha=cl.alpha, utilization=cl.utilization, ceiling=cl.ceiling,
        table_line_rate=cl.table_line_rate, table_utilization=cl.table_utilization,
        reduction=cl.reduction, topology=cl.topology,
        intervals={k: v for k, v in cl.intervals.items() if k in keep},
        provenance=dict(cl.provenance), extra=dict(cl.extra))
    g = None if cl.topology is None else cl.topology.gpus_per_node
    return Transport(cluster=cluster, text=text, gpus_per_node=g, line_rate=_line_rate_of(cl))


R2_WARN = 0.95
"""Below this :math:`R^2` (of the log times) a transport fit that a cluster records is
said to explain its times poorly, as :func:`~scalemodel.calibrate.fit.fit_collective`
warns when it fits them [-]."""


def _warn_poor_fits(cl, text):
    """Warn (:class:`~scalemodel.CalibrationWarning`) of each collective fit recorded in
    ``cl.extra["fits"]`` whose :math:`R^2` is below :data:`R2_WARN`: a trace report or a
    cluster file carries its fit's warning no further than the command that made it, and
    a fit fixed from a poor transport fit misses runs without saying why."""
    import warnings

    from .exceptions import CalibrationWarning

    for f in cl.extra.get("fits", ()) or ():
        r2 = f.get("r2") if isinstance(f, dict) else None
        if not isinstance(r2, (int, float)) or isinstance(r2, bool) or not r2 < R2_WARN:
            continue
        what = f.get("collective") if isinstance(f.get("collective"), str) else "collective"
        warnings.warn(f"transport {text}: its {what} fit explains the measured times "
                      f"poorly (R^2 {r2:.3f} < {R2_WARN}); the latency and bandwidth it "
                      "fixes may be wrong. Measure the transport with more repetitions "
                      "or sizes (nccl-tests, python -m scalemodel.calibrate) before "
                      "trusting predictions", CalibrationWarning, stacklevel=4)


def _hosts(path):
    """GPUs per host of an nccl-tests log, from its rank lines (None if it has none)."""
    with open(path, encoding="utf-8", errors="replace") as fh:
        hosts = [m.group(1) for line in fh for m in [_HOST.search(line)] if m]
    if not hosts:
        return None
    counts = collections.Counter(hosts)
    return max(counts.values())


def _from_nccl_tests(paths, *, line_rate, gpus_per_node, nics_per_node):
    """The cluster of nccl-tests logs, as ``from-nccl-tests --gpus-per-node`` makes it: a
    log inside one node is the intra-node link, the all-reduce logs across nodes give the
    latency and achieved bandwidth with that topology."""
    from .calibrate.fit import (cluster_from_fits, intra_node_topology,
                                unmeasured_intra_topology)
    from .calibrate.nccl_tests import read_nccl_tests
    results = [read_nccl_tests(p) for p in paths]
    reduce = [(r, p) for r, p in zip(results, paths) if r.collective == "all_reduce"]
    if not reduce:
        raise InvalidParameterError("transport", [os.fspath(p) for p in paths],
                                    "needs an all_reduce_perf log (the gradients travel in "
                                    "all-reduces)")
    per_host = [h for h in (_hosts(p) for _, p in reduce) if h is not None]
    logged = max(per_host) if per_host else None
    g = gpus_per_node if gpus_per_node is not None else logged
    if g is None:
        g = 8
    if gpus_per_node is not None and logged is None:  # no host names to compare with
        check_ranks_per_host(reduce, g)  # (check_against_runs does): it must divide them
    nics = 1 if nics_per_node is None else nics_per_node
    across = [r for r, _ in reduce if r.world_size > g]
    inside = [r for r, _ in reduce if 1 < r.world_size <= g]
    names = ", ".join(p.name for p in paths)
    _check_worlds(reduce, across)
    intra_fit, note = None, None
    if inside:
        intra_fit = max(inside, key=lambda r: r.world_size).fit()
        topology = intra_node_topology(intra_fit, gpus_per_node=g, nics_per_node=nics,
                                       devices=[d for r, _ in reduce for d in r.devices])
    else:
        topology, note = unmeasured_intra_topology([d for r in across for d in r.devices],
                                                   gpus_per_node=g, nics_per_node=nics)
    if not across:
        cl = ClusterProfile(name="nccl-tests", topology=topology,
                            intervals={"intra_bw": tuple(intra_fit.intervals["bandwidth"]),
                                       "intra_alpha": tuple(intra_fit.intervals["alpha"])},
                            provenance={"source": f"nccl-tests output: {names}",
                                        "note": "inside one node only: no NIC measured"})
        return Transport(cluster=cl, text=f"nccl-tests {names} (intra-node only)",
                         gpus_per_node=logged if logged is not None else g,
                         line_rate=None)
    fits = [r.fit(line_rate=line_rate, topology=topology) for r in across]
    provenance = {"source": f"nccl-tests output: {names}"}
    if note is not None:
        provenance["intra_node"] = note
    cl = cluster_from_fits(fits, name="nccl-tests", line_rate=line_rate, intra=intra_fit,
                           provenance=provenance)
    return Transport(cluster=_from_cluster(cl, "").cluster, text=f"nccl-tests {names}",
                     gpus_per_node=logged, line_rate=line_rate)


def check_ranks_per_host(reduce, gpus_per_node, option="gpus_per_node", nodes=None):
    """Refuse ``gpus_per_node`` when an all-reduce log across nodes ran another number of
    ranks on each host (its ``# Rank ... on <host>`` lines): that log's per-NIC bandwidth
    is fitted with its own ranks per node, or when the GPUs per node do not divide its
    world size.

    Parameters
    ----------
    reduce : list of (NcclTestsResult, pathlib.Path)
        The all-reduce logs and their files [-].
    gpus_per_node : int
        The GPUs per node the logs are fitted with [workers].
    option : str
        The option to name in the error [-].
    nodes : int or None
        The nodes given instead of the GPUs per node (``--nodes``): the error names that
        value [nodes].

    Raises
    ------
    InvalidParameterError
        Naming ``option``, the value and the log.
    """
    for r, p in reduce:
        if r.world_size <= gpus_per_node:
            continue  # inside one node: the intra-node link
        hosts = _hosts(p)
        value, per = (gpus_per_node, "") if nodes is None else (
            nodes, f" ({gpus_per_node} GPUs per node)")
        if hosts is not None and hosts != gpus_per_node:
            right = hosts if nodes is None else r.world_size // hosts
            raise InvalidParameterError(
                option, value, f"{os.fspath(p)} ran {hosts} ranks on each host "
                f"(its '# Rank ... on <host>' lines){per}, and its bandwidth per NIC is "
                f"that of {hosts} GPUs per node", f"Use {right}")
        if r.world_size % gpus_per_node:
            raise InvalidParameterError(
                option, value, f"does not divide the {r.world_size} ranks of "
                f"{os.fspath(p)}{per}", "Give the GPUs per node the log ran with")


def _check_worlds(reduce, across):
    """Refuse all-reduce logs that cannot be fitted, naming the file: one rank (a log
    without its ``# Rank`` lines under MPI says nGpus 1), or several logs across nodes
    (one fit per line rate, and every log here is at the runs' rate)."""
    for r, p in reduce:
        if r.world_size < 2:
            why = ("its '# Rank ... device' lines (one per GPU) are missing and nGpus x "
                   "nThread is 1: give the whole log" if not r.devices else
                   "one GPU communicates nothing: run nccl-tests over several GPUs")
            raise InvalidParameterError(
                "transport", os.fspath(p), f"is an all-reduce of world size "
                f"{r.world_size}: {why}")
    if len(across) > 1:
        raise InvalidParameterError(
            "transport", [r.source for r in across], f"holds {len(across)} all-reduce logs "
            f"across nodes (world sizes {[r.world_size for r in across]}), all at the runs' "
            "line rate: give one of them (the largest world) and at most one log inside "
            "a node")


def check_against_runs(transport, runs, *, gpus_per_node, nics_per_node=None):
    """Refuse a transport that contradicts the runs or the caller's topology.

    ``gpus_per_node`` and ``nics_per_node`` are the caller's explicit values (None when
    not given). A transport measured with other GPUs or NICs per node, or only at a line
    rate below the runs' highest, or achieving more than the runs' line rate, is an error
    naming both."""
    t = transport
    if gpus_per_node is not None and t.gpus_per_node is not None and \
            int(gpus_per_node) != int(t.gpus_per_node):
        raise InvalidParameterError(
            "transport", t.text, f"was measured with {t.gpus_per_node} GPUs per node, "
            f"but gpus_per_node={gpus_per_node} was given; pass the nodes' real GPU count "
            "(or leave gpus_per_node out to take the transport's)")
    topo = t.cluster.topology  # its bandwidth is per NIC of this many per node
    if nics_per_node is not None and topo is not None and \
            int(nics_per_node) != int(topo.nics_per_node):
        raise InvalidParameterError(
            "transport", t.text, f"was fitted with {topo.nics_per_node} NIC(s) per node, "
            f"but nics_per_node={nics_per_node} was given; pass the nodes' real NIC count "
            "(or refit the transport with it: from-nccl-tests --nics-per-node)")
    bw_max = max(r.bw for r in runs)
    if t.line_rate is not None and bw_max > t.line_rate * (1 + _RATE_SLACK):
        raise InvalidParameterError(
            "transport", t.text, f"was measured at a line rate of {t.line_rate / 1e9:g} "
            f"Gbit/s, but the runs reach {bw_max / 1e9:g} Gbit/s; measure the transport at "
            "the runs' line rate")
    _check_per_nic_rate(t, bw_max)
    _check_flat_rate(t, gpus_per_node)
    achieved = t.cluster.extra.get("fitted_bandwidth")
    if t.line_rate is None and isinstance(achieved, (int, float)) and \
            t.cluster.topology is not None and achieved > bw_max * (1 + _RATE_SLACK) * \
            t.cluster.topology.nics_per_node:
        raise InvalidParameterError(
            "transport", t.text, f"achieves {achieved / 1e9:.4g} Gbit/s per NIC, more than "
            f"the runs' line rate of {bw_max / 1e9:g} Gbit/s: it was measured on another "
            "network (or give the runs' real line rate)")
    for r in runs:
        if r.n > 1 and t.cluster.topology is not None and \
                r.n > t.cluster.topology.gpus_per_node and \
                t.cluster.provenance.get("note", "").startswith("inside one node"):
            raise InvalidParameterError(
                "transport", t.text, f"measured only inside one node, but run "
                f"{r.label!r} spans nodes (n={r.n}); give an nccl-tests log across nodes")


def _check_flat_rate(t, gpus_per_node):
    """A transport fitted flat (every rank its own link) whose bandwidth, even at its
    interval's low end, is above the line rate it was fitted at: its ranks shared nodes,
    whose NVLink carried most of the ring, and the utilization was clipped to 1. With the
    runs' GPUs per node given, an error (refit it with the nodes' GPUs and NICs); without,
    a warning."""
    fits = t.cluster.extra.get("fits") if isinstance(t.cluster.extra, dict) else None
    if t.cluster.topology is not None or not isinstance(fits, list):
        return
    for f in fits:
        rate = f.get("line_rate") if isinstance(f, dict) else None
        low = (f.get("intervals") or {}).get("bandwidth", [f.get("bandwidth")])[0] \
            if isinstance(f, dict) else None
        if not (isinstance(rate, (int, float)) and isinstance(low, (int, float))
                and low > rate * (1 + _RATE_SLACK) and int(f.get("n") or 0) > 1):
            continue
        text = (f"was fitted as a flat ring (every rank its own link) that achieves "
                f"{f['bandwidth'] / 1e9:.4g} Gbit/s, more than its line rate of "
                f"{rate / 1e9:g} Gbit/s (the utilization was clipped to 1): its ranks shared "
                "nodes, whose NVLink carried most of the ring; fit the log again with the "
                "nodes' GPUs and NICs (from-nccl-tests --gpus-per-node --nics-per-node), or "
                "give the log itself as the transport")
        if gpus_per_node is not None:
            raise InvalidParameterError("transport", t.text, text)
        warnings.warn(CalibrationWarning(f"transport {t.text} {text}"), stacklevel=4)
        return


def _check_per_nic_rate(t, bw_max):
    """Refuse nccl-tests logs across nodes whose bandwidth per NIC, even at its interval's
    low end, is above the runs' line rate ``bw_max`` [bits/s]: the nodes have more NICs
    than the fit was told, or the log is of another network (issue 17: a transport whose
    line rate contradicts the runs is an error naming both)."""
    topo = t.cluster.topology
    fits = t.cluster.extra.get("fits") if isinstance(t.cluster.extra, dict) else None
    if t.line_rate is None or topo is None or not isinstance(fits, list):
        return
    for f in fits:
        if not isinstance(f, dict) or not int(f.get("n") or 0) > (topo.gpus_per_node or 0):
            continue  # inside one node: the bandwidth is the intra-node link's
        low = (f.get("intervals") or {}).get("bandwidth", [f.get("bandwidth")])[0]
        if isinstance(low, (int, float)) and low > bw_max * (1 + _RATE_SLACK):
            per_node = float(f["bandwidth"]) * topo.nics_per_node
            raise InvalidParameterError(
                "transport", t.text, f"achieves {f['bandwidth'] / 1e9:.4g} Gbit/s per NIC "
                f"with {topo.nics_per_node} NIC(s) per node, more than the runs' line rate "
                f"of {bw_max / 1e9:g} Gbit/s: the nodes have more NICs ({per_node / 1e9:.4g} "
                f"Gbit/s per node needs at least {math.ceil(per_node / bw_max)} of "
                f"{bw_max / 1e9:g} Gbit/s; pass nics_per_node=), or the log is of another "
                "network")


def without_line_rate(cluster, bw_max):
    """A cluster whose transport fit had no line rate (the fitted bandwidth taken as the
    line rate, utilization 1) as a utilization of the runs' highest line rate."""
    achieved = cluster.extra.get("fitted_bandwidth")
    if _line_rate_of(cluster) is not None or not isinstance(achieved, (int, float)):
        return cluster
    u = min(1.0, float(achieved) / bw_max)
    iv = dict(cluster.intervals)
    fits = cluster.extra.get("fits") or ()
    bands = [f.get("intervals", {}).get("bandwidth") for f in fits if isinstance(f, dict)]
    bands = [b for b in bands if b and all(isinstance(x, (int, float)) for x in b)]
    if bands:
        iv["utilization"] = (max(1e-9, min(1.0, bands[0][0] / bw_max)),
                             min(1.0, bands[0][1] / bw_max))
    return attrs.evolve(cluster, utilization=u, intervals=iv)

