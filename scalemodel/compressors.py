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

Wire formats as implemented
---------------------------
The table above is the textbook format (PyTorch's hooks where there is one), and the
default. Implementations differ, and the difference can decide whether a compressor wins;
each difference is an attribute of the compressor (:meth:`Compressor.wire_format` lists
the bytes of one tensor):

.. list-table::
   :header-rows: 1

   * - attribute
     - default
     - the other choice, and who makes it
   * - ``SignSGD(sign_bits=...)``
     - 1 (8 signs a byte)
     - 8: GRACE sends ``tf.bool`` / ``torch.uint8``, a byte per element: 4x, not 32x
       (``grace_dl/*/compressor/signsgd.py``)
   * - ``SignSGD(scale_bytes=...)``
     - 4 (one fp32 scale)
     - 0: plain signSGD, no scale
   * - ``SignSGD(collective=...)``
     - ``"allgather"``: :math:`(n-1) S` received
     - ``"alltoall"``: DeepSpeed 1-bit Adam's compressed all-reduce as its source runs
       it: an all-to-all of the packed signs (each node's NIC carries its GPUs' chunks
       to every other node) and all-gathers of the re-compressed chunks and the fp32
       scales (:func:`deepspeed_onebit_phases`, :func:`alltoall_cost`); ``"allreduce"``:
       the same bytes approximated as a ring all-reduce
   * - ``TopK`` / ``RandomK(index_bytes=...)``
     - 4 (int32 indices)
     - 8: ``torch.topk``'s int64 indices, as GRACE's PyTorch top-k sends them
   * - ``RandomK(shared_seed=...)``
     - False (values and indices, all-gathered)
     - True: GRACE seeds the indices with the tensor's name and the step, so only values
       travel, by all-reduce
   * - ``TopK`` / ``RandomK(dense_decode=...)``
     - False: decode touches the received elements, :math:`k` per contribution
       (:math:`n k` all-gathered, :math:`k` all-reduced)
     - True: each contribution is scattered into a dense :math:`N`-element tensor and the
       dense tensors are summed, :math:`n N` all-gathered, :math:`N` all-reduced (GRACE's
       ``desparsify``: ``tf.scatter_nd`` / ``torch.zeros(numel).scatter_``, once per
       rank in ``communicator/allgather.py``). No effect on the bytes; at 1 % density
       it multiplies top-k's decoded elements by 100
   * - ``IntQuantizer(packed=..., scale_bytes=...)``
     - packed ``bits``, 8 bytes of scale and zero point
     - whole bytes per value and one fp32 scale (GRACE's 8-bit and QSGD: ``tf.int8``)
   * - ``PowerSGD(matrix_view=...)``
     - ``"pytorch"``: ``view(shape[0], -1)`` of (out, in, kh, kw), out x (in kh kw)
     - ``"tensorflow"``: ``reshape(tensor, [shape[0], -1])`` of TF's (kh, kw, in, out)
       kernel, kh x (kw in out): a 3x3 convolution at rank 1 is only about 3x smaller
       (:func:`tensorflow_shape`); GRACE also compresses every tensor of two or more
       dimensions (``min_compression_rate=0``)
   * - ``per_tensor`` (every compressor)
     - False: the compressed tensors of a bucket travel in one collective per phase
     - True: one collective per tensor and phase whatever the fusion, each with its own
       latency and launch (GRACE calls Horovod once per tensor)
   * - ``after_backward`` (every compressor)
     - False: compressed in the fusion's buckets, overlapped with the backward pass
     - True: one flat buffer compressed and sent in the optimizer step once the backward
       pass has ended, nothing overlapped (DeepSpeed's 1-bit Adam / 1-bit LAMB)
   * - ``codec_stream`` (every compressor)
     - ``"channel"``: encode and decode in the communication pipeline, hidden behind
       the backward pass while it lasts
     - ``"compute"``: on the compute stream, delaying the backward pass (GRACE's
       compress / decompress are ops of the framework's training step):
       eq. :eq:`compute-stream` of :mod:`scalemodel.planner`

An all-gathered message of :math:`S` bytes costs every worker :math:`(n-1) S` received
bytes, against the ring all-reduce's :math:`2 (n-1) S / n`: it sends less than the
uncompressed all-reduce only while :math:`n < 2\rho` for a ratio :math:`\rho` (GRACE's
byte-per-sign signSGD, :math:`\rho = 4`, never does from 8 workers on).
``tests/test_wire_formats.py`` checks every format against numpy arrays of the dtype and
shape the implementation sends.

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
another GPU the planner scales the per-element costs by the ratio of HBM bandwidths and
keeps the launch floors (:mod:`scalemodel.codec_costs`: a V100, 0.9 TB/s against the
H100's 3.35 TB/s, is 3.72 times slower per element); for more than that estimate, or with
fused kernels, measure your own with :mod:`scalemodel.calibrate.codec_bench` and pass the
cluster profile (``cluster=``). An implementation may ship levels of its own: the
``grace-tf`` preset's are GRACE's TensorFlow code on V100s, measured from the GRACE data
release's 8-worker runs (``scalemodel/data/codec/grace-tf-v100.json``, see
:mod:`scalemodel.codec_costs`).

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
from .hardware import ELEMENT_BYTES as _ELEMENT_BYTES
from .units import MAX_COUNT, check_nonnegative

__all__ = ["CodecCost", "DEFAULT_CODEC_COSTS", "TensorCosts", "Compressor", "NoCompression",
           "CastCompressor", "IntQuantizer", "SignSGD", "TopK", "RandomK", "PowerSGD",
           "COMPRESSORS", "get_compressor", "powersgd_ratio", "matrix_shape", "tensorflow_shape",
           "codec_costs_for", "Implementation", "IMPLEMENTATIONS", "resolve_implementation",
           "for_implementation", "DEEPSPEED_SOURCE", "deepspeed_padded_elements",
           "deepspeed_onebit_phases", "alltoall_cost"]

ALLREDUCE = "allreduce"
"""Phase collective meaning "the plan's all-reduce algorithm" (``ring`` by default)."""

WIRE_ATTRIBUTES = ("sign_bits", "scale_bytes", "collective", "index_bytes", "shared_seed",
                   "packed", "matrix_view", "min_compression_rate", "per_tensor",
                   "dense_decode", "codec_stream", "after_backward")
"""The compressor attributes that describe how an implementation realises it (its wire
format, for the sparse families whether decoding touches the dense tensor, and where
the codec kernels run) rather than a knob."""

CODEC_STREAMS = ("channel", "compute")
"""Where a compressor's encode and decode run (``Compressor.codec_stream``)."""

ELEMENT_BYTES = _ELEMENT_BYTES
"""Bytes per gradient element by the profile's ``precision`` (4 when unknown;
``scalemodel.hardware.ELEMENT_BYTES``, where the pipeline's per-GPU profile reads it
too)."""


# --------------------------------------------------------------------------- costs


def _float_of(name):
    """A converter to float naming ``name`` when it cannot: float() raised a bare
    ValueError, TypeError or OverflowError for None, a list, text or 10**400 (an integer
    beyond a float is read as inf, which the field's check refuses by name)."""
    def convert(value):
        try:
            return float(value)
        except OverflowError:
            return math.inf
        except (TypeError, ValueError):
            raise ParameterTypeError(name, value, "a number of seconds") from None
    return convert


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

    encode: float = attrs.field(converter=_float_of("encode"))
    decode: float = attrs.field(converter=_float_of("decode"))
    encode_per_rank: float = attrs.field(default=0.0, converter=_float_of("encode_per_rank"))
    decode_per_rank: float = attrs.field(default=0.0, converter=_float_of("decode_per_rank"))
    launch: float = attrs.field(default=0.0, converter=_float_of("launch"))
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
"""Default :class:`CodecCost` per family: measured on an NVIDIA H100, see the module docs
(:func:`codec_costs_for` scales them to another GPU)."""


def codec_costs_for(cluster=None, *, gpu=None, implementation=None) -> dict:
    """The codec costs to use: the defaults (scaled to ``gpu``'s memory bandwidth, see
    :mod:`scalemodel.codec_costs`), replaced family by family by a cluster profile's
    measured ``codec_costs``.

    Parameters
    ----------
    cluster : ClusterProfile or None
        A calibrated cluster (see :mod:`scalemodel.calibrate.codec_bench`) [-].
    gpu : str, GPUSpec or None
        GPU of the default costs; None: the H100 they were measured on [-].
    implementation : str or None
        Implementation preset (:data:`IMPLEMENTATIONS`) whose measured costs to prefer [-].
    """
    from .codec_costs import codec_costs

    if isinstance(implementation, Implementation):
        implementation = implementation.name
    return codec_costs(cluster, gpu=gpu, implementation=implementation)


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


def tensorflow_shape(shape):
    """The TensorFlow layout of a PyTorch-layout weight shape [elements per dimension]:
    a linear layer (out, in) is a dense kernel (in, out); a convolution (out, in, k1, ...)
    is (k1, ..., in, out); vectors stay as they are.

    Parameters
    ----------
    shape : tuple of int
        The shape in PyTorch's layout [elements per dimension].

    Examples
    --------
    >>> from scalemodel.compressors import matrix_shape, tensorflow_shape
    >>> tensorflow_shape((512, 256, 3, 3)), tensorflow_shape((1000, 2048))
    ((3, 3, 256, 512), (2048, 1000))
    >>> matrix_shape(512 * 256 * 9, tensorflow_shape((512, 256, 3, 3)))
    (3, 393216)
    """
    shape = tuple(int(d) for d in shape)
    if len(shape) < 2:
        return shape
    return shape[2:] + (shape[1], shape[0])


def _check_rank(rank):
    if type(rank) is int and 1 <= rank <= MAX_COUNT:  # (the common case, quickly)
        return rank
    if isinstance(rank, (bool, np.bool_)) or not isinstance(rank, numbers.Integral):
        raise ParameterTypeError("rank", rank, "an integer >= 1")
    if rank < 1:
        raise InvalidParameterError("rank", rank, "must be an integer >= 1")
    if rank > MAX_COUNT:  # 10**400 overflowed a float in the ratio
        raise InvalidParameterError("rank", rank, f"must be at most {MAX_COUNT}")
    return int(rank)


def _min_rate(value):
    """PowerSGD's ``min_compression_rate`` as a float: a real number (not a bool or
    text: float() raised a bare ValueError / TypeError / OverflowError) [-]."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ParameterTypeError("min_compression_rate", value, "a number >= 0")
    try:
        return float(value)
    except OverflowError:  # an integer beyond a float: refused as not finite
        return math.inf


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


def _check_bool(name):
    def check(instance, attribute, value):
        if not isinstance(value, (bool, np.bool_)):
            raise ParameterTypeError(name, value, "True or False")
    return check


def _check_choice(name, choices):
    def check(instance, attribute, value):
        if isinstance(value, np.ndarray) and value.ndim:  # `in` would ask its truth value
            raise ParameterTypeError(name, value, f"one of {[str(c) for c in choices]}, not "
                                     "an array")
        if value not in choices:
            raise UnknownNameError(name, value, [str(c) for c in choices])
    return check


def _check_not_per_tensor(instance, attribute, value):
    if value and instance.per_tensor:
        raise InvalidParameterError(
            "after_backward", value, "sends one flat buffer after the backward pass, so it "
            "cannot also send per tensor (per_tensor=True)",
            "Use per_tensor=False with after_backward=True")


@attrs.define(frozen=True, auto_attribs=False, slots=False)
class Compressor:
    """Base of the compressor classes (each a frozen attrs class).

    A compressor has a registry ``name``, a ``family`` (the key of its
    :class:`CodecCost`), and at most one knob (``knob``: ``"rank"``, ``"density"`` or
    ``"bits"``) that the planner searches between ``knob_bounds``; a larger knob value
    compresses less.

    **Wire formats.** What an implementation actually sends is set by attributes whose
    defaults are the textbook formats scalemodel has always assumed (PyTorch's hooks where
    there is one): on every compressor ``per_tensor`` (below); on :class:`SignSGD`
    ``sign_bits`` (1: packed, 8: one byte per element) and ``scale_bytes``; on
    :class:`IntQuantizer` ``packed`` and ``scale_bytes``; on :class:`TopK` and
    :class:`RandomK` ``index_bytes`` (4: int32, 8: int64) and on :class:`RandomK`
    ``shared_seed`` (all-reduce of values vs all-gather of values and indices); on
    :class:`PowerSGD` ``matrix_view`` (the framework's matrix of a tensor: PyTorch's or
    TensorFlow's). An all-gathered message of :math:`S` bytes costs each worker
    :math:`(n-1) S` received bytes, an all-reduced one :math:`2 (n-1) S / n` (ring):
    :func:`~scalemodel.collectives.collective_cost`. :meth:`wire_format` lists the
    bytes of one tensor.

    Parameters
    ----------
    per_tensor : bool
        ``False`` (the default): the compressed tensors of a bucket of the fusion policy
        travel together, one collective per phase and bucket (PyTorch's communication
        hooks compress whole buckets). ``True``: every compressed tensor is its own
        collective (per phase), whatever the fusion, each paying its latency and
        reduction launch (GRACE's communicators call Horovod's ``allgather`` /
        ``_allreduce`` once per tensor) [-].
    codec_stream : str
        Where the encode and decode kernels run. ``"channel"`` (the default): in the
        communication pipeline, a bucket's encode, collectives and decode one after the
        other on the channel, hidden behind the backward pass while it lasts.
        ``"compute"``: on the GPU's compute stream, interleaved with the backward
        kernels: each bucket's encode delays the rest of the backward pass (and with it
        every later bucket), and every decode is compute-stream work too, so the codec
        is never hidden behind the backward pass (GRACE's compress and decompress are
        TensorFlow / PyTorch ops of the training step, run in the framework's one
        compute stream; eq. :eq:`compute-stream` in :mod:`scalemodel.planner`) [-].
    after_backward : bool
        ``False`` (the default): the compressed tensors travel in the fusion's buckets,
        overlapped with the backward pass. ``True``: compression and communication run
        in the optimizer step, after the backward pass has ended, on ONE flat buffer of
        every gradient element (the fusion is ignored for them, nothing overlaps the
        backward pass): DeepSpeed's 1-bit Adam / 1-bit LAMB, whose ``step()`` calls
        ``compressed_allreduce`` on the flat fp32 momentum of a parameter group once the
        engine's backward all-reduce is switched off (see the ``deepspeed`` preset of
        :data:`IMPLEMENTATIONS`). Not with ``per_tensor`` [-].
    """

    per_tensor = attrs.field(default=False, kw_only=True,
                             validator=_check_bool("per_tensor"))
    codec_stream = attrs.field(default="channel", kw_only=True,
                               validator=_check_choice("codec_stream", CODEC_STREAMS))
    after_backward = attrs.field(default=False, kw_only=True,
                                 validator=[_check_bool("after_backward"),
                                            _check_not_per_tensor])

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
        """A copy with the knob set to ``value`` (``attrs.evolve``; for the catalogue's
        classes the same copy made directly: ``_knob_copy``)."""
        if self.knob is None:
            return self
        how = _KNOB_COPY.get(type(self))
        if how is None:
            return attrs.evolve(self, **{self.knob: value})
        names, convert = how
        value = convert(value)  # the knob's converter, as __init__ calls it
        new = object.__new__(type(self))
        for name in names:
            object.__setattr__(new, name, getattr(self, name))
        object.__setattr__(new, self.knob, value)
        return new

    def knob_bounds(self, numel, shapes):
        """Most and least aggressive knob values worth searching, ``(lo, hi)``."""
        return (None, None)

    def describe(self) -> str:
        """Name and setting, e.g. ``'powersgd rank 4'``, and the wire format where it is
        not the default, e.g. ``'signsgd (per_tensor=True, sign_bits=8)'``."""
        if self.knob is None:
            text = self.name
        else:
            v = self.setting
            text = f"{self.name} {self.knob} {v:.3g}" if not self.knob_integer else \
                f"{self.name} {self.knob} {v}"
        wire = self.wire_settings()
        if wire:
            text += " (" + ", ".join(f"{k}={v!r}" for k, v in wire.items()) + ")"
        return text

    def wire_settings(self) -> dict:
        """The wire-format attributes that differ from their defaults,
        ``{name: value}`` (see the class docs) [-]."""
        out = {}
        for f in attrs.fields(type(self)):
            if f.name in WIRE_ATTRIBUTES and getattr(self, f.name) != f.default:
                out[f.name] = getattr(self, f.name)
        return out

    def wire_format(self, shape, n=2, *, element_bytes=4) -> tuple:
        """What one gradient tensor of ``shape`` becomes on the wire: one
        ``(collective, bytes)`` pair per phase that sends anything, ``collective`` being
        ``"allreduce"`` (the plan's all-reduce algorithm) or ``"allgather"``, ``bytes``
        what each worker contributes [bytes].

        Parameters
        ----------
        shape : tuple of int
            The tensor's shape in PyTorch's layout (a built-in profile's
            ``tensors.shapes``) [elements per dimension].
        n : int
            Number of workers [workers].
        element_bytes : int
            Bytes per uncompressed element (4: fp32) [bytes].

        Examples
        --------
        >>> from scalemodel.compressors import SignSGD, TopK
        >>> SignSGD().wire_format((1000, 1000)), SignSGD(sign_bits=8).wire_format((1000, 1000))
        ((('allgather', 125004.0),), (('allgather', 1000004.0),))
        >>> TopK(density=0.01, index_bytes=8).wire_format((1000, 1000))
        (('allgather', 120000.0),)
        """
        shape = tuple(int(d) for d in shape)
        numel = np.array([float(math.prod(shape))])
        tc = self._costs(numel, [shape], int(n), CodecCost(0.0, 0.0), int(element_bytes))
        return tuple((coll, float(b)) for coll, b in zip(tc.phase_collectives,
                                                         tc.phase_bytes[0]) if b > 0)

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
                           calls=_filled(numel.shape, float(self.calls_per_tensor)))


_FILLED: dict = {}  # (shape, value) -> a read-only array of it (_filled)


def _filled(shape, value):
    """``np.full(shape, value)`` [-], read-only and made once per shape and value (a
    profile's tensors, a compressor's kernel calls per tensor: the same at every knob
    value the planner tries)."""
    key = (shape, value)
    hit = _FILLED.get(key)
    if hit is None:
        if len(_FILLED) >= 256:
            _FILLED.clear()
        hit = _FILLED[key] = np.full(shape, value)
        hit.setflags(write=False)
    return hit


def _check_density(value):
    if type(value) is float and 0.0 < value <= 1.0:  # (the common case, as below)
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise ParameterTypeError("density", value, "a number in (0, 1]")
    if not (0 < value <= 1):
        raise InvalidParameterError("density", value, "must be in (0, 1] (the fraction of "
                                    "elements sent)")
    return float(value)


def _check_bits(value):
    if type(value) is int and 1 <= value <= 16:  # (the common case, as below)
        return value
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

    dtype: str = attrs.field(default="fp16", validator=_check_choice("dtype", ("fp16", "bf16")))
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
    packed : bool
        ``True`` (the default): the values take ``bits`` bits each on the wire;
        ``False``: each takes whole bytes, ``ceil(bits / 8)`` (GRACE's 8-bit and QSGD
        send ``tf.int8`` / ``tf.int16`` tensors) [-].
    scale_bytes : int
        Bytes of scale data per chunk: 8 (the default; PyTorch's hooks all-gather an fp32
        scale and zero point) or 4 (GRACE: one fp32 scale or norm per tensor) [bytes].
    """

    bits: int = attrs.field(default=8, converter=_check_bits)
    chunk: int | None = attrs.field(default=None)
    packed: bool = attrs.field(default=True, validator=_check_bool("packed"))
    scale_bytes: int = attrs.field(default=8, validator=_check_choice("scale_bytes", (0, 4, 8)))
    name = "int8"
    family = "int8"
    knob = "bits"
    calls_per_bucket = 4

    def __attrs_post_init__(self):
        if self.chunk is not None:
            if isinstance(self.chunk, bool) or not isinstance(self.chunk, numbers.Integral) \
                    or not 1 <= self.chunk <= MAX_COUNT:  # 10**400 overflowed a float
                raise InvalidParameterError("chunk", self.chunk, f"must be an integer in "
                                            f"[1, {MAX_COUNT}] or None")

    def knob_bounds(self, numel, shapes):
        return (1, 8)

    def _costs(self, numel, shapes, n, c, e):
        scales = 1 if self.chunk is None else np.ceil(numel / self.chunk)
        bits = self.bits if self.packed else 8 * math.ceil(self.bits / 8)
        nbytes = np.ceil(numel * bits / 8) + self.scale_bytes * scales
        return self._simple(numel, nbytes, "allgather", numel, n * numel, c)


@attrs.frozen
class SignSGD(Compressor):
    """1-bit scaled sign with error feedback (EF-signSGD, Karimireddy et al. 2019): one
    bit per element plus one fp32 scale per tensor, all-gathered (a majority vote or mean
    of the signs needs every worker's bits).

    Parameters
    ----------
    sign_bits : int
        Bits per sign on the wire: 1 (the default: packed, 8 signs a byte) or 8 (one byte
        per element: GRACE sends the signs as a ``tf.bool`` or ``torch.uint8`` tensor,
        ``grace_dl/*/compressor/signsgd.py``, so signSGD is 4x smaller than fp32, not 32x)
        [bits].
    scale_bytes : int
        Bytes of scale per tensor: 4 (the default: one fp32, EF-signSGD's mean magnitude)
        or 0 (plain signSGD sends no scale) [bytes].
    collective : str
        ``"allgather"`` (the default: every worker receives every other worker's signs,
        :math:`(n-1) S`, and decodes :math:`n N` elements); ``"allreduce"``: a
        compressed all-reduce approximated as the plan's all-reduce of :math:`S` bytes
        (a ring's traffic, :math:`2 (n-1) S / n`, decoding :math:`2 N` elements); or
        ``"alltoall"``: DeepSpeed's compressed all-reduce as its source runs it
        (:func:`~scalemodel.compressors.deepspeed_onebit_phases`): an all-to-all of the
        packed signs, an all-gather of the worker scales, the chunk owner's sum
        re-compressed, an all-gather of its packed signs and one of its scale [-].
    """

    sign_bits: int = attrs.field(default=1, validator=_check_choice("sign_bits", (1, 8)))
    scale_bytes: int = attrs.field(default=4, validator=_check_choice("scale_bytes", (0, 4)))
    collective: str = attrs.field(default="allgather", validator=_check_choice(
        "collective", ("allgather", "allreduce", "alltoall")))
    name = "signsgd"
    family = "signsgd"
    calls_per_tensor = 5

    def _costs(self, numel, shapes, n, c, e):
        if self.collective == "alltoall":
            return self._deepspeed_costs(numel, n, c)
        nbytes = np.ceil(numel * self.sign_bits / 8) + self.scale_bytes
        if self.collective == "allreduce":
            return self._simple(numel, nbytes, ALLREDUCE, numel, 2 * numel, c)
        return self._simple(numel, nbytes, "allgather", numel, n * numel, c)

    def _deepspeed_costs(self, numel, n, c):
        phases, padded = deepspeed_onebit_phases(numel, n, sign_bits=self.sign_bits,
                                                 scale_bytes=self.scale_bytes)
        # encode: the worker's N_pad signs, then the server's N_pad / n; decode: the n
        # received chunks (N_pad elements) and the n gathered server chunks (N_pad)
        return TensorCosts(phase_bytes=np.stack([b for _, b in phases], axis=1),
                           phase_collectives=tuple(coll for coll, _ in phases),
                           encode_time=c.encode * padded * (1.0 + 1.0 / n),
                           decode_time=c.decode * 2.0 * padded,
                           calls=np.full(numel.shape, float(self.calls_per_tensor)))


DEEPSPEED_SOURCE = {
    "adam-2020": "deepspeedai/DeepSpeed@01726ce2b8ec1adbffae7974b5bfe600962c2043 (2020-09-09, "
                 "'Add 1-bit Adam support'): deepspeed/runtime/fp16/onebit_adam.py",
    "adam-head": "deepspeedai/DeepSpeed@edaa7221267243c7be7fb49c5d5f5c4fb97b4641: "
                 "deepspeed/runtime/fp16/onebit/adam.py, deepspeed/runtime/comm/nccl.py",
}
"""The DeepSpeed commits the ``deepspeed`` preset was read from."""


def deepspeed_padded_elements(numel, n):
    r"""Elements DeepSpeed's 1-bit Adam compresses for a flat buffer of ``numel``: padded up
    to a multiple of :math:`n \cdot \operatorname{lcm}(n, 8)` (``divider = size * 8 /
    gcd(size, 8)``, ``corrected_tensor_size``: onebit_adam.py lines 85 and 292-300 at the
    2020 commit, onebit/adam.py lines 110 and 172-177 at HEAD, :data:`DEEPSPEED_SOURCE`),
    so that the packed signs split into :math:`n` equal chunks of whole bytes [elements].

    Parameters
    ----------
    numel : array_like
        Elements of the buffer [elements].
    n : int
        Number of workers [workers].

    Examples
    --------
    >>> from scalemodel.compressors import deepspeed_padded_elements
    >>> int(deepspeed_padded_elements(1000, 4)), int(deepspeed_padded_elements(1000, 6))
    (1024, 1008)
    """
    n = int(n)
    q = n * (n * 8 // math.gcd(n, 8))
    return np.ceil(np.asarray(numel, float) / q) * q


def deepspeed_onebit_phases(numel, n, *, sign_bits=1, scale_bytes=4):
    r"""The collectives of DeepSpeed's compressed all-reduce of a flat buffer of
    ``numel`` elements on ``n`` workers, in order: ``((collective, bytes), ...)`` with
    ``bytes`` each worker's contribution as :func:`~scalemodel.collectives.collective_cost`
    and :func:`alltoall_cost` count it, and the padded element count :math:`N_p`
    (:func:`deepspeed_padded_elements`).

    From the source (:data:`DEEPSPEED_SOURCE`; ``Compressed_Allreduce`` in the 2020
    ``onebit_adam.py`` lines 104-228, ``compressed_allreduce`` in ``comm/nccl.py`` lines
    52-170 at HEAD): the worker packs the signs of its error-compensated momentum
    (``cupy.packbits`` of a bool tensor: 8 signs a byte) and splits them into :math:`n`
    chunks of :math:`N_p / (8 n)` bytes (``compress_by_chunk``);

    1. **all-to-all** of the chunks: chunk :math:`j` goes to worker :math:`j` (2020: one
       non-blocking ``my_igather`` per root over MPI, ``custom_collectives.py`` lines 23-50;
       HEAD: ``dist.all_to_all_single``), :math:`N_p / 8` bytes per worker of which
       :math:`(n-1)/n` leave it;
    2. **all-gather** of the fp32 worker scale (``torch.norm(m) / sqrt(N)``: 4 bytes; 2020:
       igathers of the scale to every root, the same bytes);
    3. the chunk owner unpacks the :math:`n` chunks, averages them, adds its server error
       and re-compresses: **all-gather** of its :math:`N_p / (8 n)` packed bytes;
    4. **all-gather** of its fp32 server scale (4 bytes).

    Per worker this sends :math:`2 (n-1) N_p / (8 n) + 8 (n-1)` bytes: a ring all-reduce's
    traffic of the packed buffer plus scales growing with :math:`n`; what differs from the
    ring is the all-to-all, whose chunks go straight to every peer (across a node's NIC
    :math:`g` times what a ring carries, :func:`alltoall_cost`). ``sign_bits=8`` sends a
    byte per sign and ``scale_bytes=0`` no scales (not DeepSpeed's; for comparison).

    Parameters
    ----------
    numel : array_like
        Elements of each buffer [elements].
    n : int
        Number of workers [workers].
    sign_bits : int
        Bits per sign on the wire (DeepSpeed: 1) [bits].
    scale_bytes : int
        Bytes per scale (DeepSpeed: 4, fp32) [bytes].

    Examples
    --------
    >>> from scalemodel.compressors import deepspeed_onebit_phases
    >>> phases, padded = deepspeed_onebit_phases(1000, 4)
    >>> [(c, float(b[0])) for c, b in phases], float(padded[0])
    ([('alltoall', 128.0), ('allgather', 4.0), ('allgather', 32.0), ('allgather', 4.0)], 1024.0)
    """
    numel = np.atleast_1d(np.asarray(numel, float))
    n = int(n)
    padded = deepspeed_padded_elements(numel, n)
    signs = padded * sign_bits / 8  # bytes of every worker's packed signs, n chunks
    scale = np.full(numel.shape, float(scale_bytes))
    phases = (("alltoall", signs), ("allgather", scale), ("allgather", signs / n),
              ("allgather", scale))
    return phases, padded


def alltoall_cost(nbytes, n, options=None):
    r"""Latency and wire bits of an all-to-all of ``nbytes`` per worker (``n`` equal
    chunks, one for each worker, its own included), as DeepSpeed's compressed all-reduce
    sends it: every chunk goes straight to its worker, all posted at once (MPI
    ``Isend``/``Irecv`` in 2020, NCCL grouped send/recv under ``all_to_all_single`` now).

    Without a topology each worker's link carries :math:`(n-1)/n \cdot S`. With
    ``gpus_per_node`` :math:`g` on :math:`m > 1` nodes a node's NICs carry together the
    chunks of its :math:`g` workers to the :math:`n - g` workers elsewhere,
    :math:`g (n-g)/n \cdot S` (a ring's all-gather of the same chunks: :math:`(n-1)/n
    \cdot S`), and each GPU's intra-node link its :math:`g-1` local chunks. The latency
    is one message: :math:`lpha` across nodes, ``intra_alpha`` inside one. No
    reductions (the sum is decoding work).

    Parameters
    ----------
    nbytes : array_like
        Bytes each worker sends to all workers together (its own chunk included) [bytes].
    n : int
        Number of workers [workers].
    options : CollectiveOptions, optional
        Latency and topology constants [-].

    Examples
    --------
    >>> from scalemodel.compressors import alltoall_cost
    >>> from scalemodel.collectives import CollectiveOptions
    >>> float(alltoall_cost(800.0, 4).bits[0]) / 8                # 3 chunks of 200 bytes
    600.0
    >>> opt = CollectiveOptions(gpus_per_node=4)
    >>> float(alltoall_cost(800.0, 8, opt).bits[0]) / 8           # 4 GPUs x 4 chunks of 100
    1600.0
    """
    from .collectives import CollectiveCost, CollectiveOptions

    opt = options or CollectiveOptions()
    s = np.atleast_1d(np.asarray(nbytes, float))
    n = int(n)
    if n == 1:
        z = np.zeros_like(s)
        return CollectiveCost(z, z.copy(), z.copy(), z.copy(), opt.intra_bw)
    chunk_bits = 8.0 * s / n
    g = n if opt.gpus_per_node is None else min(int(opt.gpus_per_node), n)
    if opt.gpus_per_node is None:  # every worker its own node
        nic, intra, latency = (n - 1) * chunk_bits, np.zeros_like(s), opt.alpha
    else:
        m = -(-n // g)
        nic = g * (n - g) * chunk_bits / opt.nics_per_node if m > 1 else np.zeros_like(s)
        intra = (g - 1) * chunk_bits
        latency = opt.alpha if m > 1 else opt.intra_alpha
    return CollectiveCost(latency=np.full_like(s, latency), overhead=np.zeros_like(s),
                          bits=nic, intra_bits=intra, intra_bw=opt.intra_bw)


def _k(numel, density):
    return np.maximum(1.0, np.ceil(density * numel))


@attrs.frozen
class TopK(Compressor):
    """Top-k sparsification with error feedback: the ``density`` fraction of elements of
    largest magnitude, as values plus indices, all-gathered.

    Parameters
    ----------
    density : float
        Fraction of the elements sent, in (0, 1] [-].
    index_bytes : int
        Bytes per index: 4 (the default: int32, as GRACE's TensorFlow code casts them) or
        8 (int64: ``torch.topk``'s indices as GRACE's PyTorch code sends them) [bytes].
    dense_decode : bool
        ``False`` (the default): decoding touches the :math:`k` received elements of each
        of the :math:`n` contributions, :math:`n k` elements (a sparse accumulate).
        ``True``: each contribution is scattered into a dense tensor of all :math:`N`
        elements and the :math:`n` dense tensors are summed, :math:`n N` elements: GRACE's
        ``desparsify`` (``tf.scatter_nd(indices, values, [N])`` in
        ``grace_dl/tensorflow/compressor/topk.py``, ``torch.zeros(numel).scatter_`` in
        ``grace_dl/torch/compressor/topk.py``), called by the all-gather communicator once
        per rank before ``aggregate`` sums them [-].
    """

    density: float = attrs.field(default=0.01, converter=_check_density)
    index_bytes: int = attrs.field(default=4, validator=_check_choice("index_bytes", (4, 8)))
    dense_decode: bool = attrs.field(default=False, validator=_check_bool("dense_decode"))
    name = "topk"
    family = "topk"
    knob = "density"
    knob_integer = False
    calls_per_tensor = 6

    def knob_bounds(self, numel, shapes):
        return (1e-6, 1.0)

    def _costs(self, numel, shapes, n, c, e):
        k = _k(numel, self.density)
        decoded = n * (numel if self.dense_decode else k)  # per contribution: N or k
        return self._simple(numel, k * (e + self.index_bytes), "allgather", numel, decoded, c)


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
        Whether all workers draw the same indices (GRACE seeds them with the tensor's name
        and the step, so its random-k all-reduces values only); ``False`` (the default):
        independent indices, values and indices all-gathered [-].
    index_bytes : int
        Bytes per index sent without a shared seed: 4 (int32, the default) or 8 (int64)
        [bytes].
    dense_decode : bool
        ``False`` (the default): decoding touches the received elements, :math:`k` after
        the all-reduce of a shared seed, :math:`n k` when all-gathered. ``True``: each
        decoded message is scattered into a dense tensor of all :math:`N` elements,
        :math:`N` after the all-reduce (decompressed once), :math:`n N` when all-gathered:
        GRACE's ``desparsify`` (``tf.scatter_nd`` in
        ``grace_dl/tensorflow/compressor/randomk.py``, ``torch.zeros(numel).scatter_`` in
        ``grace_dl/torch/compressor/randomk.py``; the all-reduce communicator decompresses
        the summed values once) [-].
    """

    density: float = attrs.field(default=0.01, converter=_check_density)
    shared_seed: bool = attrs.field(default=False, validator=_check_bool("shared_seed"))
    index_bytes: int = attrs.field(default=4, validator=_check_choice("index_bytes", (4, 8)))
    dense_decode: bool = attrs.field(default=False, validator=_check_bool("dense_decode"))
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
            return self._simple(numel, k * e, ALLREDUCE, numel,
                                numel if self.dense_decode else k, c)
        return TopK._costs(self, numel, shapes, n, c, e)  # values + indices, all-gathered


_MATRIX_CACHE: dict = {}  # (matrix_view, id(shapes), numel bytes) -> (shapes, rows, cols)


@attrs.frozen
class PowerSGD(Compressor):
    """PowerSGD rank-``rank`` low-rank compression with error feedback (Vogels et al. 2019;
    PyTorch ``powerSGD_hook``).

    Each tensor is the matrix ``(shape[0], -1)`` of the framework's layout
    (:func:`~scalemodel.compressors.matrix_shape`); matrices whose
    ratio (eq. :eq:`powersgd-ratio`) is at least ``min_compression_rate`` send P (rows x
    rank) and Q (cols x rank) in two sequential all-reduces; the rest (vectors, small
    matrices) are all-reduced uncompressed in a third.

    Parameters
    ----------
    rank : int
        Rank of the approximation (``matrix_approximation_rank``) [-].
    min_compression_rate : float
        Smallest ratio for which a matrix is compressed (PyTorch default 2; 0: every
        matrix, as GRACE compresses every tensor of two or more dimensions) [-].
    matrix_view : str
        Whose layout the tensor is viewed in: ``"pytorch"`` (the default:
        ``tensor.view(shape[0], -1)`` on PyTorch's shapes, a convolution
        out x (in kh kw), a linear layer out x in, as ``powerSGD_hook`` and GRACE's
        PyTorch code do) or ``"tensorflow"`` (``tf.reshape(tensor, [shape[0], -1])`` on
        TensorFlow's shapes, a convolution kernel (kh, kw, in, out) becoming
        kh x (kw in out) and a dense kernel (in, out) in x out, as GRACE's TensorFlow code
        does: a 3x3 convolution at rank 1 is then only about 3x smaller). The profile's
        shapes are PyTorch's; the TensorFlow view is derived from them [-].
    """

    rank: int = attrs.field(default=4, converter=_check_rank)
    min_compression_rate: float = attrs.field(default=2.0, converter=_min_rate)
    matrix_view: str = attrs.field(default="pytorch", validator=_check_choice(
        "matrix_view", ("pytorch", "tensorflow")))
    name = "powersgd"
    family = "powersgd"
    knob = "rank"
    calls_per_tensor = 6
    calls_per_bucket = 2

    def __attrs_post_init__(self):
        if not 0 <= self.min_compression_rate <= 1e12:  # NaN fails too
            raise InvalidParameterError("min_compression_rate", self.min_compression_rate,
                                        "must be in [0, 1e12] (no matrix compresses more than "
                                        "1e12 times; a larger threshold leaves every tensor "
                                        "uncompressed, as 1e12 does)")

    def _matrices(self, numel, shapes):
        # per profile: the same tensors are viewed again at every rank the planner tries
        key = (self.matrix_view, id(shapes), numel.tobytes())
        hit = _MATRIX_CACHE.get(key)
        if hit is not None and hit[0] is shapes:
            return hit[1], hit[2]
        rows = np.empty(numel.shape)
        cols = np.empty(numel.shape)
        for i, ne in enumerate(numel):
            shape = None if shapes is None else shapes[i]
            if self.matrix_view == "tensorflow" and shape is not None:
                shape = tensorflow_shape(shape)
            r, q = matrix_shape(ne, shape)
            rows[i], cols[i] = r, q
        if len(_MATRIX_CACHE) > 256:
            _MATRIX_CACHE.clear()
        rows.setflags(write=False)
        cols.setflags(write=False)
        _MATRIX_CACHE[key] = (shapes, rows, cols)
        return rows, cols

    def knob_bounds(self, numel, shapes):
        rows, cols = self._matrices(numel, shapes)
        hi = np.minimum(rows, cols)
        if self.min_compression_rate > 0:  # 0: every matrix compressed, at any rank
            hi = np.minimum(hi, np.floor(rows * cols / (self.min_compression_rate
                                                        * (rows + cols))))
        return (1, max(1, int(hi.max())))

    def _matrix_parts(self, numel, shapes):
        """What of the matrices does not depend on the rank, per profile (cached as
        :meth:`_matrices` is): ``(rows, cols, matrix, min(rows, cols), rows cols,
        rows + cols)``, ``matrix`` whether the tensor is a matrix at all. Found by the
        arrays' identity first when ``numel`` cannot change (a profile's, read-only)."""
        own = ("by-id", self.matrix_view, id(numel), id(shapes))
        hit = _MATRIX_CACHE.get(own)
        if hit is not None and hit[0] is numel and hit[1] is shapes:
            return hit[2]
        parts = self._matrix_parts_of(numel, shapes)
        if type(numel) is np.ndarray and not numel.flags.writeable:
            _MATRIX_CACHE[own] = (numel, shapes, parts)  # (holds both: ids stay theirs)
        return parts

    def _matrix_parts_of(self, numel, shapes):
        rows, cols = self._matrices(numel, shapes)
        key = ("parts", id(rows), id(cols), shapes is None)
        hit = _MATRIX_CACHE.get(key)
        if hit is not None and hit[0] is rows and hit[1] is cols:
            return hit
        # PyTorch's hook: tensors of one dimension go uncompressed
        if shapes is not None:
            matrix = np.array([len(sh) >= 2 for sh in shapes])
        else:  # no shapes: a prime element count is a vector (matrix_shape)
            matrix = np.minimum(rows, cols) > 1
        parts = (rows, cols, matrix, np.minimum(rows, cols), rows * cols, rows + cols)
        for a in parts[2:]:
            a.setflags(write=False)
        _MATRIX_CACHE[key] = parts
        return parts

    def _costs(self, numel, shapes, n, c, e):
        rows, cols, matrix, smaller, area, perimeter = self._matrix_parts(numel, shapes)
        # a matrix's rank is clamped to min(rows, cols), and it is compressed when
        # rows cols >= (rows + cols) rank min_compression_rate (for rate >= 1: never when
        # min(rows, cols) < rank)
        k = np.minimum(float(self.rank), smaller)
        comp = matrix & (area >= perimeter * k * self.min_compression_rate)
        phase_bytes = np.empty(np.shape(numel) + (3,))  # as np.stack([raw, p, q], axis=1)
        phase_bytes[..., 0] = np.where(comp, 0.0, numel * e)  # raw
        phase_bytes[..., 1] = np.where(comp, rows * k * e, 0.0)  # P
        phase_bytes[..., 2] = np.where(comp, cols * k * e, 0.0)  # Q
        enc = np.where(comp, numel * (c.encode + c.encode_per_rank * k), 0.0)
        dec = np.where(comp, numel * (c.decode + c.decode_per_rank * k), 0.0)
        return TensorCosts(phase_bytes=phase_bytes,
                           phase_collectives=(ALLREDUCE, ALLREDUCE, ALLREDUCE),
                           encode_time=enc, decode_time=dec,
                           calls=np.where(comp, float(self.calls_per_tensor), 0.0))


def _knob_copy(cls):
    """``(attribute names, the knob's converter)`` for :meth:`Compressor.with_setting`'s
    direct copy of ``cls``: the knob is its only field with a converter or validator that
    evolve would run on a new value (the other fields' converters and validators passed
    on the values copied, and ``__attrs_post_init__`` checks only them) [-]."""
    fields = attrs.fields(cls)
    knob = next(f for f in fields if f.name == cls.knob)
    assert knob.validator is None and callable(knob.converter)
    return tuple(f.name for f in fields), knob.converter


# (exactly these classes: a subclass of one's own goes through attrs.evolve)
_KNOB_COPY = {cls: _knob_copy(cls) for cls in (IntQuantizer, TopK, RandomK, PowerSGD)}


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


# --------------------------------------------------------------------------- implementations


@attrs.frozen
class Implementation:
    """How one framework or library realises the compressor families: which it provides
    and the wire format of each (attributes of the compressor classes).

    Attributes
    ----------
    name : str
        Preset name, a key of :data:`IMPLEMENTATIONS`.
    families : tuple of str
        Compressor families (:data:`~scalemodel.COMPRESSORS` names) it provides.
    settings : dict
        ``{family: {attribute: value}}``; the key ``"*"`` applies to every compressed
        family.
    source : str
        The source code the settings were read from.
    """

    name: str
    families: tuple
    settings: dict
    source: str


IMPLEMENTATIONS = {
    "pytorch": Implementation(
        "pytorch", ("none", "fp16", "bf16", "int8", "powersgd"), {},
        "PyTorch DDP communication hooks, torch/distributed/algorithms/ddp_comm_hooks/: "
        "default_hooks.py (fp16_compress_hook, bf16_compress_hook: cast, all-reduce of "
        "the bucket), powerSGD_hook.py (tensor.view(shape[0], -1), rank clamped to "
        "min(rows, cols), min_compression_rate 2, P then Q all-reduced per bucket, error "
        "feedback and warm start), quantization_hooks.py (uint8 values plus an fp32 scale "
        "and zero point, all-gathered per bucket). The defaults of every compressor class."),
    "horovod": Implementation(
        "horovod", ("none", "fp16"), {},
        "Horovod horovod/torch/compression.py and horovod/tensorflow/compression.py: "
        "Compression.none and Compression.fp16 only; the cast tensors go through "
        "Horovod's tensor fusion like uncompressed ones."),
    "grace-tf": Implementation(
        "grace-tf", ("none", "fp16", "int8", "signsgd", "topk", "randomk", "powersgd"),
        {"*": {"per_tensor": True, "codec_stream": "compute"},
         "signsgd": {"sign_bits": 8, "scale_bytes": 0},
         "topk": {"index_bytes": 4, "dense_decode": True},
         "randomk": {"shared_seed": True, "dense_decode": True},
         "int8": {"packed": False, "scale_bytes": 4},
         "powersgd": {"matrix_view": "tensorflow", "min_compression_rate": 0.0}},
        "GRACE, sands-lab/grace fd3a7f4, grace_dl/tensorflow: signsgd.py sends "
        "tf.bool signs (a byte each, no scale; efsignsgd.py adds one fp32 mean); topk.py "
        "values plus tf.int32 indices; randomk.py a stateless seed from the tensor's name "
        "and the step, values only; u8bit.py and qsgd.py tf.int8 values and one fp32 "
        "scale or norm; powersgd.py tf.reshape(tensor, [shape[0], -1]) of TF's (kh, kw, "
        "in, out) kernels, every tensor of two or more dimensions, P and Q all-reduced; "
        "communicator/allgather.py and allreduce.py call Horovod once per tensor; "
        "topk.py and randomk.py decompress with tf.scatter_nd(indices, values, [N]), a "
        "dense N-element tensor per contribution: allgather.py decompresses each of the n "
        "ranks' messages and aggregate() sums the n dense tensors (tf.math.add_n), "
        "allreduce.py decompresses the summed random-k values once (files read at "
        "topk.py/randomk.py 0bd31c5, communicator/allgather.py 2d10c6d, allreduce.py "
        "106e3de)."),
    "grace-torch": Implementation(
        "grace-torch", ("none", "fp16", "int8", "signsgd", "topk", "randomk", "powersgd"),
        {"*": {"per_tensor": True, "codec_stream": "compute"},
         "signsgd": {"sign_bits": 8, "scale_bytes": 0},
         "topk": {"index_bytes": 8, "dense_decode": True},
         "randomk": {"shared_seed": True, "dense_decode": True},
         "int8": {"packed": False, "scale_bytes": 4},
         "powersgd": {"min_compression_rate": 0.0}},
        "GRACE, sands-lab/grace fd3a7f4, grace_dl/torch: signsgd.py sends torch.uint8 "
        "signs (a byte each); topk.py values plus torch.topk's int64 indices; randomk.py "
        "torch.manual_seed from the tensor's name and the step, values only; qsgd.py "
        "torch.int8 values and one fp32 norm; powersgd.py tensor.view([shape[0], -1]) "
        "of every tensor of two or more dimensions; Horovod called once per tensor; "
        "topk.py (873ad77) and randomk.py (bbb127c) decompress into "
        "torch.zeros(numel).scatter_(0, indices, values), a dense N-element tensor per "
        "contribution, summed by aggregate()."),
    "deepspeed": Implementation(
        "deepspeed", ("none", "fp16", "bf16", "signsgd", "int8"),
        {"signsgd": {"collective": "alltoall", "after_backward": True}},
        "DeepSpeed 1-bit Adam / 1-bit LAMB (compression stage, after the uncompressed "
        "warm-up of freeze_step steps), read at deepspeedai/DeepSpeed 01726ce2b (2020-09-09: "
        "deepspeed/runtime/fp16/onebit_adam.py, runtime/custom_collectives.py, "
        "runtime/engine.py) and edaa72212 (fp16/onebit/adam.py, comm/nccl.py, engine.py): "
        "after freeze_step the optimizer sets engine.enable_backward_allreduce = False "
        "(onebit_adam.py 369-372; onebit/adam.py 250-254), so backward ends with no "
        "gradient all-reduce (engine.py 2020: 805 'if allreduce_gradients and "
        "self.enable_backward_allreduce'; HEAD: _backward_epilogue 2980) and step() runs "
        "Compressed_Allreduce on exp_avg, the flat fp32 momentum of a parameter group "
        "(FP16_Optimizer's fp32_groups_flat), after backward, nothing overlapped "
        "(after_backward=True); the buffer padded to a multiple of n lcm(n, 8) "
        "elements; signs packed 8 a byte (cupy.packbits) in n chunks; phase 1 an "
        "all-to-all of the chunks (2020: MPI Isend/Irecv igathers; HEAD: "
        "all_to_all_single) and the fp32 worker scales to every worker; the chunk owner "
        "sums, adds its server error and re-compresses; phase 2 an all-gather of its "
        "packed chunk and fp32 scale (collective='alltoall', deepspeed_onebit_phases). "
        "The uncompressed DeepSpeed engine (no ZeRO) all-reduces the fp16 gradients after "
        "backward too, in buffers of 5e8 elements (allreduce_gradients -> "
        "buffered_allreduce_fallback, MEMORY_OPT_ALLREDUCE_SIZE): fusion='bsp' for "
        "models below 5e8 parameters (not set by this preset). ZeRO++ qgZ "
        "(arXiv:2306.10209): quantized gradients in the reduce-scatter of ZeRO sharding; "
        "fp16 / bf16 gradients in mixed precision."),
}
"""Implementation presets, ``implementation=`` names: what each provides and sends, read
from its source (see each :class:`Implementation`'s ``source``)."""

_IMPLEMENTATION_ALIASES = {"torch": "pytorch", "ddp": "pytorch", "hvd": "horovod",
                           "grace": "grace-tf", "grace-tensorflow": "grace-tf",
                           "grace-pytorch": "grace-torch", "ds": "deepspeed"}


def resolve_implementation(implementation, parameter: str = "implementation") -> Implementation:
    """The :class:`Implementation` named ``implementation`` (case-insensitive; ``_`` and
    ``-`` alike) [-].

    Parameters
    ----------
    implementation : str or Implementation
        A key of :data:`IMPLEMENTATIONS` or an alias (``"torch"``, ``"grace"``...) [-].
    parameter : str
        Name used in error messages [-].

    Raises
    ------
    UnknownNameError
        For an unknown name, with the nearest valid one.
    """
    if isinstance(implementation, Implementation):
        return implementation
    if not isinstance(implementation, str):
        raise ParameterTypeError(parameter, implementation, "an implementation name")
    key = implementation.strip().lower().replace("_", "-")
    key = _IMPLEMENTATION_ALIASES.get(key, key)
    if key not in IMPLEMENTATIONS:
        raise UnknownNameError(parameter, implementation, IMPLEMENTATIONS,
                               aliases=_IMPLEMENTATION_ALIASES)
    return IMPLEMENTATIONS[key]


def for_implementation(compressor, implementation="pytorch",
                       parameter: str = "compressor") -> Compressor:
    """The compressor as ``implementation`` realises it: its wire-format attributes set
    from the preset, except those a :class:`Compressor` object already sets to a value
    other than the class default (a name or ``"name:setting"`` string takes the whole
    preset).

    Parameters
    ----------
    compressor : str or Compressor
        As for :func:`~scalemodel.get_compressor` [-].
    implementation : str or Implementation
        A preset of :data:`IMPLEMENTATIONS` [-].
    parameter : str
        Name used in error messages for the compressor [-].

    Raises
    ------
    UnknownNameError
        For an unknown implementation, with the nearest valid name.
    InvalidParameterError
        When the implementation does not provide the compressor's family; the message
        names the implementations that do.

    Examples
    --------
    >>> from scalemodel.compressors import for_implementation
    >>> for_implementation("signsgd", "grace-tf").describe()
    "signsgd (per_tensor=True, codec_stream='compute', sign_bits=8, scale_bytes=0)"
    >>> for_implementation("powersgd:1", "grace-tf").wire_format((512, 512, 3, 3))
    (('allreduce', 12.0), ('allreduce', 3145728.0))
    """
    impl = resolve_implementation(implementation)
    comp = get_compressor(compressor, parameter)
    family = comp.name if comp.name in COMPRESSORS else comp.family
    if family not in impl.families:
        providers = [k for k, v in IMPLEMENTATIONS.items() if family in v.families]
        raise InvalidParameterError(
            parameter, comp.describe(), f"is not provided by implementation "
            f"{impl.name!r} (it provides {', '.join(impl.families)})",
            "Implementations providing it: " + (", ".join(providers) or "none"))
    if family == "none":
        return comp
    wanted = {**impl.settings.get("*", {}), **impl.settings.get(family, {})}
    fields = {f.name: f for f in attrs.fields(type(comp))}
    changes = {k: v for k, v in wanted.items()
               if k in fields and getattr(comp, k) == fields[k].default}
    return attrs.evolve(comp, **changes) if changes else comp
