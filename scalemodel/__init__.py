"""scalemodel: how well will data-parallel training scale on this network, and how much
gradient compression would it need?

Closed-form models of the overlapped backward pass and of collective operations,
built-in workload profiles, and exact solvers for the minimum compression ratio and the
required bandwidth. Units are SI: seconds, bytes, and bandwidth in bits per second.
"""

from .cluster import ClusterProfile, load_cluster, save_cluster
from .collectives import (ALGORITHMS, CollectiveOptions, ReductionCost, allgather_time,
                          collective_time, halving_doubling_allreduce_time,
                          hierarchical_allreduce_time, parameter_server_time,
                          ring_allreduce_time, tree_allreduce_time)
from .exceptions import (InvalidParameterError, ParameterTypeError, ProfileFormatError,
                         ScalemodelError, UnknownNameError)
from .fusion import DDPBuckets, HorovodFusion, PerTensor, bucket_ready_times
from .model import IterationTime, Scenario, iteration_time, scaling_factor
from .profiles import WorkloadProfile, list_profiles, load_profile, save_profile
from .solvers import (BandwidthResult, CompressionResult, min_compression,
                      required_bandwidth)
from .units import format_bandwidth, parse_bandwidth

__version__ = "0.1.0"

__all__ = [
    "scaling_factor", "iteration_time", "min_compression", "required_bandwidth",
    "list_profiles", "load_profile", "save_profile", "ClusterProfile", "load_cluster",
    "save_cluster", "WorkloadProfile", "IterationTime",
    "CompressionResult", "BandwidthResult", "Scenario", "ReductionCost", "CollectiveOptions",
    "ALGORITHMS", "collective_time", "ring_allreduce_time", "tree_allreduce_time",
    "halving_doubling_allreduce_time", "hierarchical_allreduce_time", "allgather_time",
    "parameter_server_time", "DDPBuckets", "HorovodFusion", "PerTensor",
    "bucket_ready_times", "parse_bandwidth", "format_bandwidth", "ScalemodelError",
    "InvalidParameterError", "ParameterTypeError", "UnknownNameError", "ProfileFormatError",
]
