"""scalemodel: how well will data-parallel training scale on this network, and how much
gradient compression would it need?

Closed-form models of the overlapped backward pass and of collective operations,
built-in workload profiles, and exact solvers for the minimum compression ratio and the
required bandwidth; a compression planner that compares real compressors (fp16, int8,
signSGD, top-k, random-k, PowerSGD) with their collectives and encode/decode costs.
Units are SI: seconds, bytes, and bandwidth in bits per second.
"""

from .cluster import ClusterProfile, load_cluster, save_cluster
from .compressors import (COMPRESSORS, CastCompressor, CodecCost, IntQuantizer,
                          NoCompression, PowerSGD, RandomK, SignSGD, TopK, get_compressor)
from .collectives import (ALGORITHMS, CollectiveOptions, ReductionCost, allgather_time,
                          collective_time, halving_doubling_allreduce_time,
                          hierarchical_allreduce_time, parameter_server_time,
                          ring_allreduce_time, tree_allreduce_time)
from .exceptions import (CalibrationError, CalibrationWarning, HostMemoryError,
                         InvalidParameterError, ModelWarning, ParameterTypeError,
                         ProfileFormatError, ScalemodelError, UnknownNameError)
from .fusion import DDPBuckets, HorovodFusion, PerTensor, bucket_ready_times
from .model import BINDINGS, IterationTime, Scenario, iteration_time, scaling_factor
from .topology import Topology
from .fitting import ClusterFit, fit_cluster
from .planner import (CompressionPlan, PlanRow, breakeven_bandwidth,
                      compressed_scaling_factor, plan_compression)
from .profiles import WorkloadProfile, list_profiles, load_profile, save_profile
from .solvers import (BandwidthResult, CompressionResult, min_compression,
                      required_bandwidth)
from .sensitivity import Sensitivities, sensitivities
from .buckets import BucketSizeResult, best_bucket_size
from .units import format_bandwidth, parse_bandwidth
from .hardware import GPUSpec, get_gpu, list_gpus
from .memory import MemoryEstimate, memory
from .sharding import Sharding, SizeWrap
from .workloads import (TransformerConfig, llm_config, measured_efficiency,
                        transformer_profile, transformer_units)

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
    "InvalidParameterError", "ParameterTypeError", "UnknownNameError", "HostMemoryError",
    "ProfileFormatError",
    "CalibrationError", "CalibrationWarning", "ModelWarning",
    "plan_compression", "CompressionPlan", "PlanRow", "breakeven_bandwidth",
    "compressed_scaling_factor", "sensitivities", "Sensitivities", "COMPRESSORS",
    "get_compressor", "CodecCost", "NoCompression", "CastCompressor", "IntQuantizer",
    "SignSGD", "TopK", "RandomK", "PowerSGD", "Topology", "BINDINGS", "fit_cluster", "ClusterFit",
]
__all__ += ["GPUSpec", "get_gpu", "list_gpus", "memory", "MemoryEstimate",
            "TransformerConfig", "llm_config", "measured_efficiency", "transformer_profile",
            "transformer_units", "Sharding", "SizeWrap"]
__all__ += ["best_bucket_size", "BucketSizeResult"]
