r"""Gradient compressors: what each one puts on the wire, with which collective, and what
it costs to encode and decode.

The core model (:func:`~scalemodel.scaling_factor`) treats compression as one ratio
:math:`r` that divides the bits on the wire. Real compressors differ in more than the
ratio. For one gradient tensor of :math:`N` elements (:math:`N \cdot e` bytes, :math:`e`
bytes per element: 4 in fp32) on :math:`n` workers, each compressor here gives

* the bytes each worker sends per collective (per *phase*: PowerSGD has three),
* the collective that carries them: an all-reduce (the plan's ``algorithm``, e.g.
  ``"ring"``) when the compressed values can be summed as they are, otherwise
  ``"allgather"`` (every worker receives every other worker's message: the traffic grows
  with :math:`n`, see :func:`~scalemodel.collectives.collective_cost`),
* the number of sequential collectives, and
* the encode and decode time [s] from per-element costs :math:`c_e, c_d` [s/element]
  (:class:`CodecCost`).

.. list-table::
   :header-rows: 1

   * - name
     - bytes per worker
     - collective
     - encode / decode elements
   * - ``none``
     - :math:`N e`
     - all-reduce
     - 0 / 0
   * - ``fp16``, ``bf16``
     - :math:`2N`
     - all-reduce
     - :math:`N` / :math:`N`
   * - ``int8`` (``bits`` = b)
     - :math:`\lceil N b / 8 \rceil + 8 \lceil N / C \rceil`
     - all-gather
     - :math:`N` / :math:`n N`
   * - ``signsgd``
     - :math:`\lceil N / 8 \rceil + 4`
     - all-gather
     - :math:`N` / :math:`n N`
   * - ``topk``, ``randomk`` (density d)
     - :math:`k (e + 4)`, :math:`k = \lceil d N \rceil`
     - all-gather
     - :math:`N` / :math:`n k`
   * - ``powersgd`` (rank k)
     - :math:`k (m + p) e` for an :math:`m \times p` matrix; vectors :math:`N e`
     - 2 all-reduces (P, Q) + 1 for the vectors
     - :math:`N (1 + \kappa k)` / :math:`N (1 + \kappa' k)`

The PowerSGD ratio of one :math:`m \times p` matrix (Vogels et al. [1]_, Algorithm 1) is

.. math::
   :label: powersgd-ratio

   \rho_\text{PowerSGD} = \frac{m\,p}{k\,(m + p)} ,

e.g. 128 for a 1024 x 1024 matrix at rank 4. As PyTorch's ``powerSGD_hook`` does, a tensor
is viewed as the matrix ``(shape[0], -1)``, vectors (and matrices whose ratio would be below
``min_compression_rate``, default 2) are sent uncompressed in one all-reduce, and all P
factors of a bucket, then all Q factors, are all-reduced in one message each.

int8 follows PyTorch's ``quantization_hooks`` (scales per tensor or per chunk of
``chunk`` elements; the quantized values cannot be summed without overflow, so they are
all-gathered and each worker dequantizes and sums :math:`n` contributions). signSGD with
error feedback (Karimireddy et al. [4]_) sends one bit per element and one fp32 scale; top-k
and random-k send values and int32 indices [3]_; all three are all-gathered as in GRACE
[3]_. Random-k with a seed shared by all workers sends values only and can be all-reduced
(``shared_seed=True``).

Encode and decode run on the critical path: like the core model's ``codec_cost``, they are
added to each bucket's time on the communication channel (:mod:`scalemodel.overlap`).

Default costs
-------------
No paper we could find tabulates per-element encode/decode costs in a form that transfers
across models (Agarwal et al. [2]_ report whole-model overheads: large enough to cancel the
communication savings of compression on fast networks, which is what the planner checks).
The defaults (:data:`DEFAULT_CODEC_COSTS`) are therefore **our measurement** on one NVIDIA
H100 80GB HBM3 with PyTorch 2.11 in eager mode, shipped with its provenance in
``scalemodel/data/codec/h100.json``: :mod:`scalemodel.calibrate.codec_bench` ran the
kernels of the reference implementations (PyTorch's ``default_hooks``,
``quantization_hooks`` and ``powerSGD_hook``, and GRACE [3]_) on 16 Ki to 64 Mi elements
and fitted, per family, a floor (the host's dispatch of the family's kernels: 27 µs per
tensor for a cast, up to 264 µs for signSGD) and a time per element (e.g. 2.1 ps per
element for an fp16 cast: 6 bytes at 2.9 TB/s). A repeat sweep agreed within 8 %. On
another GPU, or with fused kernels, measure your own with
:mod:`scalemodel.calibrate.codec_bench` and pass the cluster profile (``cluster=``); on an
older GPU such as the V100 of the built-in profiles the per-element costs are several times
higher (its HBM2 moves 0.9 TB/s against the H100's 3.35 TB/s), so the defaults flatter
compression there.

References
----------
.. [1] T. Vogels, S. P. Karimireddy, M. Jaggi, "PowerSGD: Practical Low-Rank Gradient
   Compression for Distributed Optimization", NeurIPS 2019. arXiv:1905.13727
.. [2] S. Agarwal, H. Wang, S. Venkataraman, D. Papailiopoulos, "On the Utility of Gradient
   Compression in Distributed Training Systems", MLSys 2022. arXiv:2103.00543
.. [3] H. Xu, C.-Y. Ho, A. M. Abdelmoniem, A. Dutta, E. H. Bergou, K. Karatsenidis,
   M. Canini, P. Kalnis, "GRACE: A Compressed Communication Framework for Distributed
   Machine Learning", ICDCS 2021. doi:10.1109/ICDCS51616.2021.00060
.. [4] S. P. Karimireddy, Q. Rebjock, S. U. Stich, M. Jaggi, "Error Feedback Fixes SignSGD
   and other Gradient Compression Schemes", ICML 2019. arXiv:1901.09847
"""

from __future__ import annotations

import math
import numbers

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError, UnknownNameError
from .units import check_nonnegative

__all__ = ["CodecCost", "DEFAULT_CODEC_COSTS", "TensorCosts", "Compressor", "NoCompression",
           "CastCompressor", "IntQuantizer", "SignSGD", "TopK", "RandomK", "PowerSGD",
           "COMPRESSORS", "get_compressor", "powersgd_ratio", "matrix_shape", "codec_costs_for"]

ALLREDUCE = "allreduce"
"""Phase collective meaning "the plan's all-reduce algorithm" (``ring`` by default)."""

ELEMENT_BYTES = {"fp32": 4, "float32": 4, "fp16": 2, "float16": 2, "bf16": 2,
                 "bfloat16": 2, "fp64": 8, "float64": 8}
"""Bytes per gradient element by the profile's ``precision`` (4 when unknown)."""


# --------------------------------------------------------------------------- costs


@attrs.frozen
class CodecCost:
    """Per-element encode and decode costs of one compressor family.

    Parameters
    ----------
    encode : float
        Encode time per gradient element [s/element].
    decode : float
        Decode time per element decoded [s/element] (all-gathered families decode
        :math:`n` contributions).
    encode_per_rank, decode_per_rank : float
        Extra time per element and per unit of PowerSGD rank [s/(element rank)].
    launch : float
        Fixed time per kernel call [s].
    source : str
        Where the numbers come from.
    """

    encode: float = attrs.field(converter=float)
    decode: float = attrs.field(converter=float)
    encode_per_rank: float = attrs.field(default=0.0, converter=float)
    decode_per_rank: float = attrs.field(default=0.0, converter=float)
    launch: float = attrs.field(default=0.0, converter=float)
    source: str = ""

    def __attrs_post_init__(self):
        for name in ("encode", "decode", "encode_per_rank", "decode_per_rank", "launch"):
            check_nonnegative(getattr(self, name), name)

    @classmethod
    def from_dict(cls, data, source="calibrated"):
        """A cost from a cluster profile's ``codec_costs`` entry (values [s/element])."""
        keys = ("encode", "decode", "encode_per_rank", "decode_per_rank", "launch")
        return cls(**{k: data[k] for k in keys if k in data}, source=source)


def _measured_defaults():
    from importlib import resources
    import json
    path = resources.files("scalemodel").joinpath("data", "codec", "h100.json")
    data = json.loads(path.read_text())
    source = (f"measured: {data['name']} ({data['provenance']['codec_costs']}; "
              "scalemodel/data/codec/h100.json)")
    costs = {"none": CodecCost(0.0, 0.0, source="no codec")}
    costs.update({family: CodecCost.from_dict(entry, source=source)
                  for family, entry in data["codec_costs"].items()})
    return costs


DEFAULT_CODEC_COSTS = _measured_defaults()
"""Default :class:`CodecCost` per family: measured on an NVIDIA H100, see the module docs."""


def codec_costs_for(cluster=None) -> dict:
    """The codec costs to use: the defaults, replaced family by family by a cluster
    profile's measured ``codec_costs``.

    Parameters
    ----------
    cluster : ClusterProfile or None
        A calibrated cluster (see :mod:`scalemodel.calibrate.codec_bench`) [-].
    """
    costs = dict(DEFAULT_CODEC_COSTS)
    if cluster is not None:
        for family, entry in (getattr(cluster, "codec_costs", None) or {}).items():
            costs[family] = CodecCost.from_dict(entry, source=f"measured: cluster {cluster.name}")
    return costs


# --------------------------------------------------------------------------- per tensor


@attrs.frozen(eq=False)
class TensorCosts:
    """What a compressor does to each gradient tensor of a profile.

    Attributes
    ----------
    phase_bytes : numpy.ndarray
        Bytes each worker sends per tensor (rows) and phase (columns) [bytes].
    phase_collectives : tuple of str
        The collective of each phase: ``"allreduce"`` (the plan's all-reduce algorithm)
        or an algorithm name such as ``"allgather"``.
    encode_time, decode_time : numpy.ndarray
        Per tensor [s], without kernel launches.
    calls : numpy.ndarray
        Kernel calls per tensor [-].
    """

    phase_bytes: np.ndarray
    phase_collectives: tuple
    encode_time: np.ndarray
    decode_time: np.ndarray
    calls: np.ndarray

    @property
    def wire_bytes(self):
        """Bytes each worker sends per tensor, all phases [bytes]."""
        return self.phase_bytes.sum(axis=1)

    @property
    def n_collectives(self):
        """Sequential collectives per tensor (phases with bytes) [-]."""
        return (self.phase_bytes > 0).sum(axis=1)

    @property
    def collectives(self):
        """The collective of each tensor's largest phase [-]."""
        return tuple(self.phase_collectives[i] for i in np.argmax(self.phase_bytes, axis=1))


def matrix_shape(numel, shape=None):
    """The matrix PowerSGD compresses a tensor as: ``(shape[0], numel / shape[0])``.

    Without a shape (a profile without ``tensors.shapes``), the tensor is ASSUMED to be the
    most square matrix its element count allows: rows = the largest divisor of
    ``numel`` not above its square root (a prime count is a vector).

    Parameters
    ----------
    numel : int
        Elements of the tensor [elements].
    shape : tuple of int, optional
        The tensor's shape [elements per dimension].

    Returns
    -------
    tuple of int
        ``(rows, columns)``; ``rows == 1`` or ``columns == 1`` for a vector.
    """
    numel = int(numel)
    if shape is not None:
        if len(shape) < 2:
            return (1, numel)
        return (int(shape[0]), numel // int(shape[0]))
    rows = 1
    for d in range(int(math.isqrt(numel)), 0, -1):
        if numel % d == 0:
            rows = d
            break
    return (rows, numel // rows)


def _check_rank(rank):
    if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, numbers.Integral):
        raise ParameterTypeError("rank", rank, "an integer >= 1")
    if rank < 1:
        raise InvalidParameterError("rank", rank, "must be an integer >= 1")
    return int(rank)


def powersgd_ratio(rows, cols, rank):
    """Compression ratio of one matrix under PowerSGD, eq. :eq:`powersgd-ratio` [-].

    Parameters
    ----------
    rows, cols : int
        Matrix shape [elements].
    rank : int
        PowerSGD rank, at most ``min(rows, cols)`` [-].

    Examples
    --------
    >>> from scalemodel.compressors import powersgd_ratio
    >>> powersgd_ratio(1024, 1024, 4)
    128.0
    """
    rank = _check_rank(rank)
    rows, cols = int(rows), int(cols)
    if rank > min(rows, cols):
        raise InvalidParameterError("rank", rank, f"must be at most min(rows, cols) = "
                                    f"{min(rows, cols)} for a {rows} x {cols} matrix")
    return rows * cols / (rank * (rows + cols))


# --------------------------------------------------------------------------- compressors


class Compressor:
    """Base of the compressor classes (each a frozen attrs class).

    A compressor has a registry ``name``, a ``family`` (the key of its
    :class:`CodecCost`), and at most one knob (``knob``: ``"rank"``, ``"density"`` or
    ``"bits"``) that the planner searches between ``knob_bounds``; a larger knob value
    compresses less.
    """

    name = "?"
    family = "none"
    knob: str | None = None
    knob_integer = True
    calls_per_tensor = 0  # kernel calls for each compressed tensor
    calls_per_bucket = 0  # kernel calls for each bucket with a compressed tensor
    hook = None  # stock PyTorch hook, or None

    @property
    def setting(self):
        """The knob's value (``None`` for a compressor without a knob)."""
        return None if self.knob is None else getattr(self, self.knob)

    def with_setting(self, value):
        """A copy with the knob set to ``value`` (``attrs.evolve``)."""
        if self.knob is None:
            return self
        return attrs.evolve(self, **{self.knob: value})

    def knob_bounds(self, numel, shapes):
        """Most and least aggressive knob values worth searching, ``(lo, hi)``."""
        return (None, None)

    def describe(self) -> str:
        """Name and setting, e.g. ``'powersgd rank 4'``."""
        if self.knob is None:
            return self.name
        v = self.setting
        return f"{self.name} {self.knob} {v:.3g}" if not self.knob_integer else \
            f"{self.name} {self.knob} {v}"

    def tensor_costs(self, model, n, *, codec=None) -> TensorCosts:
        """Bytes, collectives and codec time of every gradient tensor of ``model``.

        Parameters
        ----------
        model : str, os.PathLike or WorkloadProfile
            A profile name, file or object [-].
        n : int
            Number of workers [workers].
        codec : dict, optional
            :class:`CodecCost` by family; :data:`DEFAULT_CODEC_COSTS` when omitted [-].
        """
        from .profiles import load_profile
        from .units import check_count

        p = load_profile(model)
        n = check_count(n, "n")
        e = ELEMENT_BYTES.get(p.precision.lower(), 4)
        numel = np.round(p.tensor_bytes / e)
        return self._costs(numel, p.tensor_shapes, int(n), (codec or DEFAULT_CODEC_COSTS)[
            self.family], e)

    def _costs(self, numel, shapes, n, c, e) -> TensorCosts:  # pragma: no cover - abstract
        raise NotImplementedError

    def _simple(self, numel, nbytes, collective, enc_elems, dec_elems, c):
        z = np.asarray(nbytes, dtype=float)
        return TensorCosts(phase_bytes=z[:, None], phase_collectives=(collective,),
                           encode_time=c.encode * enc_elems, decode_time=c.decode * dec_elems,
                           calls=np.full(numel.shape, float(self.calls_per_tensor)))


def _check_density(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ParameterTypeError("density", value, "a number in (0, 1]")
    if not (0 < value <= 1):
        raise InvalidParameterError("density", value, "must be in (0, 1] (the fraction of "
                                    "elements sent)")
    return float(value)


def _check_bits(value):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise ParameterTypeError("bits", value, "an integer in 1..16")
    if not 1 <= value <= 16:
        raise InvalidParameterError("bits", value, "must be an integer in 1..16")
    return int(value)


@attrs.frozen
class NoCompression(Compressor):
    """No compression: the gradients are all-reduced as they are."""

    name = "none"
    family = "none"

    def _costs(self, numel, shapes, n, c, e):
        zero = np.zeros(numel.shape)
        return self._simple(numel, numel * e, ALLREDUCE, zero, zero, c)


@attrs.frozen
class CastCompressor(Compressor):
    """fp16 or bf16 cast before an all-reduce (PyTorch ``fp16_compress_hook`` /
    ``bf16_compress_hook``; Horovod ``hvd.Compression.fp16``): ratio 2 on fp32 gradients.

    Parameters
    ----------
    dtype : str
        ``"fp16"`` or ``"bf16"`` [-].
    """

    dtype: str = attrs.field(default="fp16", validator=attrs.validators.in_(("fp16", "bf16")))
    calls_per_bucket = 2

    @property
    def name(self):
        return self.dtype

    @property
    def family(self):
        return self.dtype

    def _costs(self, numel, shapes, n, c, e):
        nbytes = numel * min(e, 2)
        return self._simple(numel, nbytes, ALLREDUCE, numel, numel, c)


@attrs.frozen
class IntQuantizer(Compressor):
    """Integer quantization with scales (PyTorch ``quantization_hooks``): values to
    ``bits`` bits, one fp32 scale and zero point per ``chunk`` elements (per tensor when
    ``chunk`` is None), all-gathered, dequantized and summed by every worker.

    Parameters
    ----------
    bits : int
        Bits per element, 1 to 16 [bits].
    chunk : int or None
        Elements per scale (PyTorch's per-channel hook uses 512); None: one per tensor
        [elements].
    """

    bits: int = attrs.field(default=8, converter=_check_bits)
    chunk: int | None = attrs.field(default=None)
    name = "int8"
    family = "int8"
    knob = "bits"
    calls_per_bucket = 4

    def __attrs_post_init__(self):
        if self.chunk is not None:
            if isinstance(self.chunk, bool) or not isinstance(self.chunk, numbers.Integral) \
                    or self.chunk < 1:
                raise InvalidParameterError("chunk", self.chunk, "must be an integer >= 1 or None")

    def knob_bounds(self, numel, shapes):
        return (1, 8)

    def _costs(self, numel, shapes, n, c, e):
        scales = 1 if self.chunk is None else np.ceil(numel / self.chunk)
        nbytes = np.ceil(numel * self.bits / 8) + 8 * scales
        return self._simple(numel, nbytes, "allgather", numel, n * numel, c)


@attrs.frozen
class SignSGD(Compressor):
    """1-bit scaled sign with error feedback (EF-signSGD, Karimireddy et al. 2019): one
    bit per element plus one fp32 scale per tensor, all-gathered (a majority vote or mean
    of the signs needs every worker's bits)."""

    name = "signsgd"
    family = "signsgd"
    calls_per_tensor = 5

    def _costs(self, numel, shapes, n, c, e):
        return self._simple(numel, np.ceil(numel / 8) + 4, "allgather", numel, n * numel, c)


def _k(numel, density):
    return np.maximum(1.0, np.ceil(density * numel))


@attrs.frozen
class TopK(Compressor):
    """Top-k sparsification with error feedback: the ``density`` fraction of elements of
    largest magnitude, as values plus int32 indices, all-gathered.

    Parameters
    ----------
    density : float
        Fraction of the elements sent, in (0, 1] [-].
    """

    density: float = attrs.field(default=0.01, converter=_check_density)
    name = "topk"
    family = "topk"
    knob = "density"
    knob_integer = False
    calls_per_tensor = 6

    def knob_bounds(self, numel, shapes):
        return (1e-6, 1.0)

    def _costs(self, numel, shapes, n, c, e):
        k = _k(numel, self.density)
        return self._simple(numel, k * (e + 4), "allgather", numel, n * k, c)


@attrs.frozen
class RandomK(Compressor):
    """Random-k sparsification with error feedback: a random ``density`` fraction of the
    elements. Values plus int32 indices, all-gathered; with ``shared_seed`` every worker
    picks the same indices, so only values are sent and they are all-reduced.

    Parameters
    ----------
    density : float
        Fraction of the elements sent, in (0, 1] [-].
    shared_seed : bool
        Whether all workers draw the same indices [-].
    """

    density: float = attrs.field(default=0.01, converter=_check_density)
    shared_seed: bool = False
    name = "randomk"
    family = "randomk"
    knob = "density"
    knob_integer = False
    calls_per_tensor = 5

    def knob_bounds(self, numel, shapes):
        return (1e-6, 1.0)

    def _costs(self, numel, shapes, n, c, e):
        if self.shared_seed:
            k = _k(numel, self.density)
            return self._simple(numel, k * e, ALLREDUCE, numel, k, c)
        return TopK._costs(self, numel, shapes, n, c, e)  # values + indices, all-gathered


@attrs.frozen
class PowerSGD(Compressor):
    """PowerSGD rank-``rank`` low-rank compression with error feedback (Vogels et al. 2019;
    PyTorch ``powerSGD_hook``).

    Each tensor is the matrix ``(shape[0], -1)``
    (:func:`~scalemodel.compressors.matrix_shape`); matrices whose
    ratio (eq. :eq:`powersgd-ratio`) is at least ``min_compression_rate`` send P (rows x
    rank) and Q (cols x rank) in two sequential all-reduces; the rest (vectors, small
    matrices) are all-reduced uncompressed in a third.

    Parameters
    ----------
    rank : int
        Rank of the approximation (``matrix_approximation_rank``) [-].
    min_compression_rate : float
        Smallest ratio for which a matrix is compressed (PyTorch default 2) [-].
    """

    rank: int = attrs.field(default=4, converter=_check_rank)
    min_compression_rate: float = attrs.field(default=2.0, converter=float)
    name = "powersgd"
    family = "powersgd"
    knob = "rank"
    calls_per_tensor = 6
    calls_per_bucket = 2

    def __attrs_post_init__(self):
        if not (math.isfinite(self.min_compression_rate) and self.min_compression_rate >= 1):
            raise InvalidParameterError("min_compression_rate", self.min_compression_rate,
                                        "must be finite and >= 1")

    def _matrices(self, numel, shapes):
        rows = np.empty(numel.shape)
        cols = np.empty(numel.shape)
        for i, ne in enumerate(numel):
            r, q = matrix_shape(ne, None if shapes is None else shapes[i])
            rows[i], cols[i] = r, q
        return rows, cols

    def knob_bounds(self, numel, shapes):
        rows, cols = self._matrices(numel, shapes)
        hi = np.floor(rows * cols / (self.min_compression_rate * (rows + cols)))
        hi = np.minimum(hi, np.minimum(rows, cols))
        return (1, max(1, int(hi.max())))

    def _costs(self, numel, shapes, n, c, e):
        rows, cols = self._matrices(numel, shapes)
        k = float(self.rank)
        small = np.minimum(rows, cols) < k
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(small, 0.0, rows * cols / (k * (rows + cols)))
        comp = (np.minimum(rows, cols) > 1) & ~small & (rate >= self.min_compression_rate)
        raw = np.where(comp, 0.0, numel * e)
        p = np.where(comp, rows * k * e, 0.0)
        q = np.where(comp, cols * k * e, 0.0)
        enc = np.where(comp, numel * (c.encode + c.encode_per_rank * k), 0.0)
        dec = np.where(comp, numel * (c.decode + c.decode_per_rank * k), 0.0)
        return TensorCosts(phase_bytes=np.stack([raw, p, q], axis=1),
                           phase_collectives=(ALLREDUCE, ALLREDUCE, ALLREDUCE),
                           encode_time=enc, decode_time=dec,
                           calls=np.where(comp, float(self.calls_per_tensor), 0.0))


COMPRESSORS = {
    "none": NoCompression,
    "fp16": lambda: CastCompressor("fp16"),
    "bf16": lambda: CastCompressor("bf16"),
    "int8": IntQuantizer,
    "signsgd": SignSGD,
    "topk": TopK,
    "randomk": RandomK,
    "powersgd": PowerSGD,
}
"""The compressor catalogue: name -> factory of the default instance."""

_ALIASES = {"fp32": "none", "float16": "fp16", "half": "fp16", "bfloat16": "bf16",
            "qsgd": "int8", "quantize": "int8", "sign": "signsgd", "1bit": "signsgd",
            "ef-signsgd": "signsgd", "top-k": "topk", "random-k": "randomk",
            "rand-k": "randomk", "power-sgd": "powersgd"}


def get_compressor(compressor, parameter: str = "compressor") -> Compressor:
    """A compressor object from a catalogue name (case-insensitive), a name with a setting
    after a colon, or an object.

    The command line and the API read the same strings: ``"topk:0.01"`` (density),
    ``"randomk:0.05"``, ``"powersgd:8"`` (rank), ``"int8:4"`` (bits). Names without a
    setting give the catalogue default.

    Parameters
    ----------
    compressor : str or Compressor
        A name of :data:`COMPRESSORS`, optionally ``name:setting``, or a compressor
        object [-].
    parameter : str
        Name used in error messages (``"--compressors"`` on the command line) [-].

    Raises
    ------
    UnknownNameError
        For an unknown name; the message lists the known names.
    InvalidParameterError
        For a setting that is not a number, is out of range, or is given to a compressor
        without one (``fp16:2``).

    Examples
    --------
    >>> from scalemodel import get_compressor
    >>> get_compressor("topk:0.01").describe(), get_compressor("PowerSGD:8").describe()
    ('topk density 0.01', 'powersgd rank 8')
    """
    if isinstance(compressor, Compressor):
        return compressor
    if not isinstance(compressor, str):
        raise ParameterTypeError(parameter, compressor, "a compressor name or object")
    name, colon, value = compressor.partition(":")
    key = name.strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in COMPRESSORS:
        raise UnknownNameError(parameter, name.strip() if colon else compressor, COMPRESSORS,
                               aliases=_ALIASES)
    comp = COMPRESSORS[key]()
    if not colon:
        return comp
    if comp.knob is None:
        raise InvalidParameterError(parameter, compressor,
                                    f"{comp.name} has no setting to give after ':'",
                                    f"write {comp.name}")
    example = "8" if comp.knob_integer else "0.01"
    try:
        setting = float(value.strip())
    except ValueError:
        raise InvalidParameterError(parameter, compressor,
                                    f"the {comp.knob} after ':' must be a number",
                                    f"e.g. {comp.name}:{example}") from None
    if comp.knob_integer:
        if not (math.isfinite(setting) and setting == round(setting)):
            raise InvalidParameterError(parameter, compressor,
                                        f"the {comp.knob} after ':' must be an integer",
                                        f"e.g. {comp.name}:{example}")
        setting = int(setting)
    try:
        return comp.with_setting(setting)
    except (InvalidParameterError, ParameterTypeError) as exc:
        why = getattr(exc, "requirement", None) or str(exc)
        raise InvalidParameterError(parameter, compressor, f"the {comp.knob} {why}") from None
