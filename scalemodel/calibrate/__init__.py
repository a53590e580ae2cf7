"""Calibration: measure a cluster, fit the model's constants, write profiles.

The fitting, parsing and uncertainty parts need only numpy and scipy; the measuring parts
(:mod:`scalemodel.calibrate.compute`, :mod:`scalemodel.calibrate.transport`,
:mod:`scalemodel.calibrate.scaling`) need torch (``pip install 'scalemodel[calibrate]'``)
and are imported on use.
"""

from .fit import COLLECTIVE_MODELS, CollectiveFit, cluster_from_fits, fit_collective
from .nccl_tests import NcclTestsResult, read_nccl_tests
from .trace import TraceReport, read_trace
from .overhead import HostOverheadFit, OverlapFit, fit_host_overhead, fit_overlap
from .uncertainty import (PredictionInterval, min_compression_interval,
                          scaling_factor_interval)

__all__ = ["COLLECTIVE_MODELS", "CollectiveFit", "cluster_from_fits", "fit_collective",
           "NcclTestsResult", "read_nccl_tests", "TraceReport", "read_trace",
           "HostOverheadFit", "OverlapFit",
           "fit_host_overhead", "fit_overlap", "PredictionInterval",
           "min_compression_interval", "scaling_factor_interval"]
