r"""The data-parallel dimension of tensor- and pipeline-parallel jobs (TP x PP x DP).

A job on :math:`n` GPUs with tensor parallelism :math:`t` and pipeline parallelism
:math:`p` (Megatron-LM's ``--tensor-model-parallel-size`` and
``--pipeline-model-parallel-size``) is data-parallel over :math:`d = n/(t p)` replicas.
scalemodel answers for that dimension: ``tp=``, ``pp=`` and ``microbatches=`` turn the
single-GPU profile into the profile of one GPU of the job, and the questions (scaling
factor, iteration time, minimum compression, required bandwidth, memory) are asked with
:math:`d` data-parallel workers. The scaling factor is then the job's time on one replica
(:math:`d = 1`, no data-parallel traffic) over its time on :math:`d`.

One GPU of the job (Megatron-LM's rank order: tensor-parallel ranks fastest, then
data-parallel, then pipeline stages; Narayanan et al., "Efficient Large-Scale Language
Model Training on GPU Clusters Using Megatron-LM", SC 2021, arXiv:2104.04473):

* **compute per micro-batch**: the profile's forward and backward times
  :math:`F, B` (the whole model, one micro-batch, one GPU) split evenly over the
  :math:`t p` GPUs of a replica, plus the tensor-parallel collectives of its
  :math:`L/p` layers on the intra-node link: Megatron-style TP all-reduces the
  :math:`b s h` activations (:math:`S = b s h e` bytes, :math:`e` the activation dtype's
  bytes) twice per layer in forward (after attention and after the MLP) and twice in
  backward (the conjugate operators), each a ring all-reduce of :math:`t` GPUs,
  :math:`A_t = 2(t-1)\alpha_\text{intra} + 2\frac{t-1}{t} \cdot 8S / B_\text{intra}`:

  .. math::
     :label: tp-compute

     f = \frac{F}{t p} + \frac{L}{p}\, 2 A_t, \qquad b = \frac{B}{t p} + \frac{L}{p}\, 2 A_t
         + \frac{L_r}{p}\, 2 A_t ;

  with activation checkpointing, :math:`B` holds the recompute of the checkpointed
  layers' forward (:mod:`scalemodel.checkpointing`) and the last term is the forward's
  tensor-parallel all-reduces those layers run again: :math:`L_r` layers recomputed
  fully (``"full"``: all :math:`L`; a fraction :math:`\phi` of the layers:
  :math:`\mathrm{round}(\phi L)`), each re-running its forward with its two
  all-reduces, as Megatron-LM's full recompute does (``CheckpointFunction`` re-runs the
  layer's ``forward``, ``tensor_parallel/random.py``). ``"selective"`` re-runs none:
  Megatron's selective recompute is the attention core, between the column-parallel QKV
  and the row-parallel output projection, where no collective sits (Korthikanti et al.,
  MLSys 2023, Sec. 5); for the op-level policy with flash attention (torchtitan, which
  runs tensor parallelism with sequence parallelism) none is counted
  either, an assumption. Each recomputed layer's all-reduces delay its gradients as its
  recompute does (at the start of the layer's backward);

* **pipeline (1F1B)**: with :math:`m` micro-batches per step the first stage runs
  :math:`(m + p - 1)(f + b)` (Narayanan et al., Sec. 2.2: the bubble is :math:`(p-1)/m`
  of the ideal time). Its gradients are complete only with its last micro-batch's
  backward, the last operation of the step, so the data-parallel all-reduce overlaps that
  backward alone, as under gradient accumulation (``no_sync``): the step is the
  data-parallel model of :mod:`scalemodel.model` with :math:`m` accumulated micro-batches
  of :math:`(f, b)`, the bubble :math:`(p-1)(f+b)` added as a constant and the optimizer
  step on :math:`1/(t p)` of the state:

  .. math::
     :label: pp-iteration

     T = (m - 1)(f + b) + f + \max\big(b,\ \text{gradients of the stage all-reduced}\big)
         + (p - 1)(f + b) + \frac{T_u}{t p} ;

* **interleaved 1F1B** (``virtual_stages`` :math:`v > 1`, Megatron-LM's
  ``--num-layers-per-virtual-pipeline-stage`` :math:`= L/(p v)`): each GPU holds
  :math:`v` model chunks of :math:`L/(p v)` layers, chunk :math:`c` of stage :math:`s`
  being virtual stage :math:`c p + s`; a micro-batch's forward visits the stages
  :math:`v` times, each chunk taking :math:`f/v` and :math:`b/v`. The pipeline fills and
  drains in chunk steps, so the bubble shrinks by :math:`v` (Narayanan et al., Sec. 2.2.2:
  :math:`t_{pb} = (p-1)(t_f + t_b)/v`, bubble fraction :math:`\frac{1}{v}\frac{p-1}{m}`):

  .. math::
     :label: pp-interleaved

     T = (m - 1)(f + b) + f + \max\big(b,\ \text{gradients of the stage all-reduced}\big)
         + \frac{p - 1}{v}(f + b) + \frac{T_u}{t p} ,

  which is eq. :eq:`pp-iteration` at :math:`v = 1`. The price the paper names, :math:`v`
  times the pipeline's point-to-point traffic, is not charged: point-to-point transfers
  are not modelled at any :math:`v` (Megatron overlaps them with compute by default).
  The data-parallel all-reduce is still taken to overlap only the last micro-batch's
  backward (the first chunk's gradients complete with the step's last backward).
  Megatron's conditions are checked: :math:`p \ge 2`, :math:`m` a multiple of :math:`p`
  (``forward_backward_pipelining_with_interleaving``) and :math:`L` a multiple of
  :math:`p v`. The closed form is checked against a discrete-event simulation of
  Megatron's per-stage order of micro-batches and chunks (``tests/des_interleaved.py``).
  Its memory price, the chunks a stage keeps in flight, is in :func:`~scalemodel.memory`
  (:func:`in_flight_chunks`);
* **uneven stages**: Megatron-LM splits the layers evenly and puts the embedding on the
  first stage (chunk 0 of stage 0) and the final norm and the output layer, the head, on
  the last (chunk :math:`v-1` of stage :math:`p-1`). The embedding computes nothing (a
  lookup); the head's forward and backward :math:`h_f, h_b` (per GPU: the profile's
  share of them, from :func:`~scalemodel.transformer_units`, over :math:`t`) make the
  last stage the slowest, and 1F1B is paced by it: with :math:`f, b` a stage's layers'
  (eq. :eq:`tp-compute` less the head's :math:`1/p`),

  .. math::
     :label: pp-uneven

     T = (m - 1)(f + b) + f + \max\big(b,\ \text{gradients of the stage all-reduced}\big)
         + \frac{p - 1}{v}(f + b) + m\,(h_f + h_b) + \frac{T_u \psi_\text{max}}{t \psi} ,

  eqs. :eq:`pp-iteration` and :eq:`pp-interleaved` with the head's :math:`m (h_f + h_b)`
  in the bubble: the last stage runs its :math:`m` micro-batches back to back while the
  others wait for it, the pipeline's fill and drain are the other stages' (matched to
  1e-9 by the discrete-event reference with each chunk's own times,
  ``tests/test_pipeline_stages.py``). The first stage's gradients, the step's
  data-parallel traffic, are its embedding's and its layers' (:math:`\psi_1 / t`
  parameters), counted in whole elements; the optimizer step is the heaviest stage's
  (:math:`\psi_\text{max}`, the first or, with the head or a tied embedding's copy, the
  last), which :func:`~scalemodel.memory` holds too. A profile without the units
  (a configuration without its vocabulary or MLP width, a measured profile) is split
  evenly. Not modelled: the all-reduce of a tied embedding's gradient between the first
  and the last stage, and (without flash attention) the head's share is taken of the
  forward with the memory-bound score passes in it, a little high;
* **sequence parallelism** (``sequence_parallel=True``, Megatron-LM's
  ``--sequence-parallel``, torchtitan's ``SequenceParallel`` plan; only with :math:`t > 1`):
  the layer-norm, dropout and residual regions of each layer are split along the
  sequence over the :math:`t` ranks (Korthikanti et al., "Reducing Activation
  Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198, Sec. 4.2.2).
  Each of the layer's tensor-parallel all-reduces becomes a reduce-scatter (:math:`\bar g`)
  and an all-gather (:math:`g`) of the same :math:`S` bytes; in the ring
  :math:`\alpha`-:math:`\beta` model a reduce-scatter is :math:`(t-1)\alpha_\text{intra}
  + \frac{t-1}{t} \cdot 8S / B_\text{intra}` and so is an all-gather, so the pair costs
  :math:`2(t-1)\alpha_\text{intra} + 2\frac{t-1}{t} \cdot 8S / B_\text{intra}`: both
  collectives' steps in the latency term and the same bytes on the link, which is
  :math:`A_t` itself (a ring all-reduce *is* a reduce-scatter followed by an all-gather).
  Eq. :eq:`tp-compute` is therefore unchanged with sequence parallelism; the paper
  makes the same point for the communication volume (Sec. 4.2.2: a ring all-reduce is a
  reduce-scatter and an all-gather, so the bandwidth is the same). Not counted: the layer-norm, dropout and residual work, now
  split over the :math:`t` ranks, is element-wise work the FLOP model of the profile does
  not count (it holds the matrix multiplies' FLOPs only), so no time is saved either;
  and Megatron's second all-gather of a column-parallel layer's input in backward (it
  keeps the input sharded and gathers it again for the weight gradient, overlapped with
  the input-gradient GEMM). What sequence parallelism changes here is memory
  (:func:`~scalemodel.memory`: the activations of
  ``scalemodel.memory.model_parallel_activations``);
* **gradients**: each GPU holds :math:`1/(t p)` of the parameters and gradients (with
  a pipeline, its stage's: eq. :eq:`pp-uneven`); its buckets are the profile's tensors at
  that share of their bytes, ready at the profile's times scaled to :math:`b` (the
  stage's gradients come as the model's do);
* **the data-parallel ring** of one tensor-parallel rank joins the ranks
  :math:`r, r + t, r + 2t, \dots` of its stage: with ``gpus_per_node`` :math:`q`
  (:math:`t \mid q`) a node holds :math:`q/t` ranks of each ring and the :math:`t` rings
  of its TP ranks at once, which share its :math:`\nu` NICs: each ring is a ring over
  :math:`d` GPUs with :math:`q/t` per node and :math:`\nu/t` of a NIC (the line rate of a
  ring is :math:`\nu B / t`);
* **sharded data parallelism with tensor parallelism** (``sharding=`` with :math:`t > 1`
  and :math:`p = 1`: FSDP x TP, torchtitan's "2-D"; ZeRO-1 x TP, Megatron-LM's
  distributed optimizer over the data-parallel ranks): each GPU shards its :math:`1/t`
  slice of the model over its data-parallel group, the :math:`d` GPUs of its ring. The
  per-GPU profile above (TP all-reduces in the compute) is wrapped into units as a
  plain profile is (:func:`~scalemodel.sharding.resolve_wrap`), and the sharded schedule
  of :mod:`scalemodel.sharding` (eqs. :eq:`zero3`, :eq:`zero12`) runs on :math:`d`
  GPUs with the ring's view of the node above (:func:`dp_options`): its all-gathers and
  reduce-scatters, like the all-reduce, see :math:`q/t` GPUs per node and
  :math:`\nu/t` of the NICs, and the optimizer step runs on :math:`1/(t s)` of the
  state (:math:`s` the shard group). ``shard_group`` counts data-parallel GPUs (it
  divides :math:`d`) and ``hybrid_shard`` shards over the :math:`q/t` data-parallel GPUs
  of a node (refused below 2). Checked against the discrete-event reference
  (``tests/test_sharding_tp.py``);
* **on a fitted cluster** (``cluster=``, calibrated on plain data-parallel runs): what
  the runs fitted of the network is the NIC's (its achieved fraction of its own line
  rate, its ceiling), which the :math:`t/\nu` rings on it share: one ring achieves
  :math:`(\nu/t)\,\min(u B, C)` (:meth:`~scalemodel.ClusterProfile.ring_view`: the
  ceiling, its interval and alternatives and the utilization table's line rates at
  :math:`\nu/t` of theirs). The compute slowdown stretches every micro-batch and the
  pipeline bubble (the other stages' compute), and the wait for the slowest worker is
  for the slowest of all :math:`n` GPUs (eq. :eq:`straggler` at :math:`n`, not at
  :math:`d`: a replica's GPUs wait for each other at every layer). The framework and
  fixed costs stay per bucket, collective and iteration of one GPU. Checked against a
  direct computation (``tests/test_parallel_cluster.py``); validated by transfer on
  InternLM's tensor-parallel rows, predicted from fits on its tp = 1 rows
  (``benchmarks/validate_large_n.py``).

Not modelled, and not expressible through these parameters:
context parallelism, expert parallelism, stages of unequal layer counts (Megatron-LM's
``--decoder-first-pipeline-num-layers``), tensor parallelism across nodes (refused),
sharded data parallelism with a pipeline
(``pp > 1``; refused by name), asynchronous tensor parallelism (TP communication
overlapped with the GEMMs, torchtitan's AsyncTP: the TP all-reduces here are on the
compute path), and a ceiling that limits each connection rather than each NIC (TCP
sockets: one thread per communicator), which would let each ring reach it alone. Runs of
tensor- and pipeline-parallel jobs calibrate a cluster as plain ones do (a run's ``tp``,
``pp`` and ``microbatches``, :mod:`scalemodel.runs`).
"""

from __future__ import annotations

import attrs
import numpy as np

from .exceptions import InvalidParameterError, ParameterTypeError
from .profile_format import MAX_TIME

__all__ = ["ModelParallel", "resolve_model_parallel", "model_parallel_profile",
           "tp_allreduce_time", "in_flight_chunks"]


def _divisors(k):
    return [d for d in range(1, k + 1) if k % d == 0]


_MAX_MICROBATCHES = 10**6
"""Most micro-batches per optimizer step, the bound of a profile's ``grad_accum``
(:class:`~scalemodel.WorkloadProfile`) [micro-batches]."""


def _count(value, name):
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise ParameterTypeError(name, value, "an integer >= 1")
    if value < 1:
        raise InvalidParameterError(name, value, "must be >= 1")
    return int(value)


@attrs.frozen
class ModelParallel:
    """Tensor and pipeline parallelism of a job whose data-parallel dimension is asked.

    Parameters
    ----------
    tp : int
        Tensor-parallel GPUs (Megatron-style, inside a node) [GPUs].
    pp : int
        Pipeline stages, 1F1B schedule [stages].
    microbatches : int
        Micro-batches per optimizer step and replica [micro-batches].
    virtual_stages : int
        Model chunks per pipeline stage, :math:`v` of eq. :eq:`pp-interleaved` (1: plain
        1F1B; Megatron: layers / (pp x ``--num-layers-per-virtual-pipeline-stage``))
        [chunks].
    sequence_parallel : bool
        Megatron-style sequence parallelism over the ``tp`` ranks (only with ``tp > 1``;
        :func:`resolve_model_parallel` turns it off at ``tp == 1``) [-].
    """

    tp: int = 1
    pp: int = 1
    microbatches: int = 1
    virtual_stages: int = 1
    sequence_parallel: bool = False

    @property
    def bubble_fraction(self) -> float:
        """The pipeline bubble over the ideal time of even stages, :math:`(p-1)/(v m)`
        (Narayanan et al.'s bubble fraction); the model's bubble adds the head's work on
        the last stage, eq. :eq:`pp-uneven` [-]."""
        return (self.pp - 1) / (self.virtual_stages * self.microbatches)

    @property
    def size(self) -> int:
        """GPUs of one replica, ``tp * pp`` [GPUs]."""
        return self.tp * self.pp

    @property
    def active(self) -> bool:
        """True unless ``tp == pp == 1``."""
        return self.size > 1

    def dp(self, n):
        """Data-parallel replicas ``n / (tp pp)``, vectorized [workers].

        Parameters
        ----------
        n : int or array_like of int
            GPUs of the job [GPUs].

        Raises
        ------
        InvalidParameterError
            ``n`` not a multiple of ``tp * pp``.
        """
        if type(n) is int or (type(n) is np.ndarray and n.ndim == 0 and n.dtype.kind in "iu"):
            one = int(n)  # one count (a Python int, or numpy's of one): the same answer
            if one % self.size == 0:
                return one // self.size
        arr = np.asarray(n)
        bad = arr % self.size != 0
        if np.any(bad):
            first = int(arr[bad].flat[0])
            raise InvalidParameterError(
                "n", first, f"tp={self.tp} x pp={self.pp} needs n a multiple of "
                f"{self.size}: the data-parallel replicas are n / (tp pp)")
        out = arr // self.size
        return int(out) if out.ndim == 0 else out

    def settings(self) -> dict:
        """What is assumed: sizes, the schedule, and what is not modelled [-]."""
        return {"tp": self.tp, "pp": self.pp, "microbatches": self.microbatches,
                "virtual_stages": self.virtual_stages,
                "pipeline_schedule": "interleaved 1f1b" if self.virtual_stages > 1
                else "1f1b", "sequence_parallel": self.sequence_parallel,
                "context_parallel": 1}


def resolve_model_parallel(tp=1, pp=1, microbatches=None, grad_accum=1,
                           virtual_stages=1, sequence_parallel=False) -> ModelParallel:
    """Checked tensor and pipeline parallelism [-].

    Parameters
    ----------
    tp : int
        Tensor-parallel GPUs [GPUs].
    pp : int
        Pipeline stages [stages].
    microbatches : int or None
        Micro-batches per step; None: ``grad_accum`` without a pipeline, required with
        one [micro-batches].
    grad_accum : int
        The profile's micro-batches per step [micro-batches].
    virtual_stages : int
        Model chunks per stage (interleaved 1F1B), 1 for plain 1F1B [chunks].
    sequence_parallel : bool
        Megatron-style sequence parallelism; True with ``tp == 1`` resolves to False (the
        callers warn that it is ignored) [-].

    Raises
    ------
    ParameterTypeError
        A value that is not an integer; ``sequence_parallel`` not a bool.
    InvalidParameterError
        A value below 1; ``pp > 1`` without ``microbatches``; ``virtual_stages > 1``
        with ``pp < 2`` or ``microbatches`` not a multiple of ``pp`` (Megatron's
        conditions for the interleaved schedule).
    """
    tp = _count(1 if tp is None else tp, "tp")
    pp = _count(1 if pp is None else pp, "pp")
    if microbatches is None:
        if pp > 1:
            raise InvalidParameterError(
                "microbatches", None, f"pp={pp} (1F1B) needs the micro-batches per step: "
                "the bubble is (pp - 1) / microbatches of the compute",
                "Pass microbatches= (Megatron: global batch / (micro batch x data-parallel "
                "size))")
        microbatches = int(grad_accum)
    m = _count(microbatches, "microbatches")
    if m > _MAX_MICROBATCHES:
        raise InvalidParameterError("microbatches", m, f"must be at most "
                                    f"{_MAX_MICROBATCHES:,} (micro-batches per optimizer "
                                    "step, as a profile's grad_accum)")
    v = _count(1 if virtual_stages is None else virtual_stages, "virtual_stages")
    if v > 1 and pp < 2:
        raise InvalidParameterError(
            "virtual_stages", v, f"the interleaved schedule needs a pipeline (pp >= 2), "
            f"got pp={pp}", "Pass virtual_stages=1 without a pipeline")
    if v > 1 and m % pp:
        raise InvalidParameterError(
            "microbatches", m, f"the interleaved schedule (virtual_stages={v}) needs the "
            f"micro-batches a multiple of pp={pp}, as Megatron-LM asserts: valid are "
            f"{[pp * k for k in range(1, 4)]}, ...")
    sp = check_sequence_parallel(sequence_parallel)
    return ModelParallel(tp, pp, m, v, sp and tp > 1)


def check_sequence_parallel(value) -> bool:
    """``sequence_parallel`` checked: True or False (numpy booleans too) [-].

    Parameters
    ----------
    value : bool
        The setting [-].

    Raises
    ------
    ParameterTypeError
        Anything but a bool (``1``, ``"yes"``, None), naming ``sequence_parallel``.
    """
    if not isinstance(value, (bool, np.bool_)):
        raise ParameterTypeError("sequence_parallel", value, "True or False")
    return bool(value)


SEQUENCE_PARALLEL_IGNORED = ("with tp=1 there is no tensor-parallel group to split the "
                             "sequence over: sequence parallelism needs tp > 1")
"""Why ``sequence_parallel=True`` is ignored at ``tp == 1`` (the ModelWarning's text)."""


def in_flight_chunks(mp, stage=0) -> int:
    r"""Model chunks whose forward activations stage ``stage`` holds at its peak under
    the job's schedule (Megatron-LM's ``schedules.py``), in chunks of
    :math:`L/(p v)` layers [chunks].

    A stage runs its warm-up forwards, then one forward and one backward alternately,
    so it holds at most its warm-up forwards plus one. Plain 1F1B (:math:`v = 1`): the
    warm-up is :math:`p - s - 1` forwards, at most :math:`m`, so stage :math:`s` holds
    :math:`\min(p - s, m)` micro-batches (the first stage :math:`\min(p, m)`).
    Interleaved (:math:`v > 1`, :math:`m` a multiple of :math:`p`): with :math:`m = p`
    every stage runs all :math:`m v` forwards first and holds them all; otherwise the
    warm-up is :math:`2(p - s - 1) + (v - 1) p` chunk forwards, and the first stage holds
    :math:`p v + p - 1` chunks, i.e. :math:`L (1 + \frac{p - 1}{p v})` layers:
    Korthikanti et al.'s factor on the :math:`L` layers of 1F1B, :math:`1 + \frac{p-1}{p v}`
    (their :math:`m`, "the number of interleaving stages", is :math:`v` here; "Reducing
    Activation Recomputation in Large Transformer Models", MLSys 2023, arXiv:2205.05198,
    Sec. 4.2.3), which Megatron-LM applies as ``interleaved_schedule_memory_penalty``
    (``megatron/training/theoretical_memory_usage.py``). With :math:`m = p` the factor
    overstates the schedule: :math:`p v` chunks, :math:`L` layers, as 1F1B; the count
    here is the schedule's.

    Parameters
    ----------
    mp : ModelParallel
        The parallelism [-].
    stage : int
        Pipeline stage, 0 (the first) to ``pp - 1`` [stages].
    """
    p, v, m = mp.pp, mp.virtual_stages, mp.microbatches
    if v == 1:
        return min(p - stage, m)
    if m == p:
        return m * v
    return min(m * v, 2 * (p - stage - 1) + (v - 1) * p + 1)


def tp_allreduce_time(nbytes, tp, intra_bw, intra_alpha=0.0) -> float:
    r"""One ring all-reduce of ``nbytes`` over ``tp`` GPUs on the intra-node link
    (:math:`A_t` of eq. :eq:`tp-compute`) [s].

    With sequence parallelism the all-reduce is a reduce-scatter and an all-gather of the
    same ``nbytes``, :math:`(t-1)` ring steps of :math:`S/t` each: together
    :math:`2(t-1)\alpha + 2\frac{t-1}{t} 8S/B`, this same time (module docstring).

    Parameters
    ----------
    nbytes : float
        Bytes per GPU [bytes].
    tp : int
        GPUs [GPUs].
    intra_bw : float
        Intra-node link rate per GPU [bits/s].
    intra_alpha : float
        Latency per ring step [s].
    """
    if tp == 1:
        return 0.0
    return 2.0 * (tp - 1) * intra_alpha + 2.0 * (tp - 1) / tp * 8.0 * nbytes / intra_bw


def _config(profile, mp):
    cfg = profile.provenance.get("config") if isinstance(profile.provenance, dict) else None
    if not isinstance(cfg, dict):
        raise InvalidParameterError(
            "tp" if mp.tp > 1 else "pp", mp.tp if mp.tp > 1 else mp.pp,
            f"{profile.name} has no transformer config: its layers and activations, which "
            "tensor and pipeline parallelism split, are unknown",
            "Use a built-in LLM or transformer_profile(TransformerConfig(...))")
    return cfg


def check_pipeline_layers(pp, layers, name):
    """Raise when ``pp``, an integer > 1, does not divide the ``layers``: checked before
    the micro-batches are asked for, so that a pipeline the model cannot be split into is
    said first (anything else in ``pp`` is left to :func:`resolve_model_parallel`) [-].

    Parameters
    ----------
    pp : object
        Pipeline stages, as given [stages].
    layers : int or None
        Transformer layers (None: not known) [layers].
    name : str
        The model, for the message [-].
    """
    if (isinstance(pp, (int, np.integer)) and not isinstance(pp, (bool, np.bool_))
            and pp > 1 and isinstance(layers, (int, np.integer)) and layers > 0
            and layers % pp):
        raise InvalidParameterError("pp", pp, f"must divide the {layers} layers of "
                                    f"{name}: valid are {_divisors(int(layers))}")


def check_config(mp, layers, heads, name, kv_heads=None, ffn=None):
    """Raise unless ``pp`` divides the layers and ``tp`` the attention heads, the key and
    value heads and the MLP width (Megatron-LM splits each across the TP ranks: its
    ``num_query_groups % tensor_model_parallel_size == 0`` and the column-parallel
    linears' ``divide``) [-].

    Parameters
    ----------
    mp : ModelParallel
        The parallelism [-].
    layers : int
        Transformer layers [layers].
    heads : int
        Attention heads [heads].
    name : str
        The model, for the message [-].
    kv_heads : int or None
        Key and value heads (grouped-query attention); None: as ``heads`` [heads].
    ffn : int or None
        MLP width; None: not checked [-].

    Raises
    ------
    InvalidParameterError
        Naming ``pp``, ``virtual_stages`` or ``tp`` and the valid values.
    """
    if layers % mp.pp:
        raise InvalidParameterError("pp", mp.pp, f"must divide the {layers} layers of "
                                    f"{name}: valid are {_divisors(layers)}")
    if (layers // mp.pp) % mp.virtual_stages:
        raise InvalidParameterError(
            "virtual_stages", mp.virtual_stages, f"must divide the {layers // mp.pp} layers "
            f"per stage of {name} (pp={mp.pp}): valid are {_divisors(layers // mp.pp)}")
    for count, what in ((heads, "attention heads"), (kv_heads, "key and value heads"),
                        (ffn, "MLP width")):
        if count and int(count) % mp.tp:  # the tp that divide all three (one list)
            valid = [d for d in _divisors(heads) if all(
                not c or int(c) % d == 0 for c in (kv_heads, ffn))]
            raise InvalidParameterError("tp", mp.tp, f"must divide the {int(count)} {what} "
                                        f"of {name}: valid are {valid}")


def check_against(mp, profile, options):
    """Raise unless ``mp`` fits the profile's layers and heads and the node [-].

    Parameters
    ----------
    mp : ModelParallel
        The parallelism [-].
    profile : WorkloadProfile
        A profile with a transformer config [-].
    options : CollectiveOptions
        The topology [-].

    Raises
    ------
    InvalidParameterError
        ``pp`` not dividing the layers, ``virtual_stages`` not dividing a stage's layers,
        ``tp`` not dividing the heads or a node's GPUs.
    """
    cfg = _config(profile, mp)
    layers, heads = int(cfg["layers"]), int(cfg["heads"])
    check_config(mp, layers, heads, profile.name, cfg.get("kv_heads"), cfg.get("ffn"))
    gpn = options.gpus_per_node
    check_tp_in_node(mp, heads, gpn if gpn is not None else usual_server(profile),
                     usual=gpn is None)
    return cfg


def usual_server(profile):
    """GPUs in the usual server of a FLOP-derived profile's built-in GPU (the node a
    tensor-parallel group must fit in when no ``gpus_per_node`` is given), or None [-]."""
    from .efficiency import gpu_name_of
    from .hardware import get_gpu

    name = gpu_name_of(profile)
    try:
        return None if name is None else get_gpu(name).gpus_per_server
    except (InvalidParameterError, ParameterTypeError):  # a GPU that is not built in
        return None


def check_tp_in_node(mp, heads, gpus_per_node, usual=False):
    """Raise unless the tensor-parallel degree divides a node's GPUs (``gpus_per_node``
    None: no nodes, nothing to check; ``usual``: the GPU's usual server, none given) [-].

    Raises
    ------
    InvalidParameterError
        ``tp`` not dividing ``gpus_per_node``, listing the degrees that divide it and the
        heads.
    """
    gpn = gpus_per_node
    if gpn is not None and gpn % mp.tp:
        node = (f"the {gpn} GPUs of the GPU's usual server (gpus_per_node= for another)"
                if usual else f"gpus_per_node={gpn}")
        raise InvalidParameterError(
            "tp", mp.tp, f"tensor parallelism inside a node must divide {node}:"
            f" valid are {[d for d in _divisors(gpn) if heads % d == 0]} (across nodes it "
            "is not modelled)")


def model_parallel_profile(profile, mp, options):
    """The profile of one GPU of the job, eqs. :eq:`tp-compute`, :eq:`pp-iteration` and
    :eq:`pp-interleaved` [-].

    Parameters
    ----------
    profile : WorkloadProfile
        The single-GPU profile of the whole model (one micro-batch) [-].
    mp : ModelParallel
        The parallelism [-].
    options : CollectiveOptions
        The topology (``intra_bw``, ``intra_alpha`` for the TP collectives) [-].

    Returns
    -------
    WorkloadProfile
        Forward and backward of one micro-batch on one GPU of the first stage,
        ``grad_accum`` the micro-batches, the bubble (the head's work on the last stage
        included) in ``update_time``, gradients of the first stage's ``1/tp`` share of
        the model's bytes (``1/(tp pp)`` without a pipeline or units; eq.
        :eq:`pp-uneven`).
    """
    if not mp.active and mp.microbatches == profile.grad_accum:
        return profile
    from .hardware import DTYPE_BYTES

    k = mp.size
    act_tp = 0.0
    bubble_layers = 0.0
    if mp.active:
        cfg = check_against(mp, profile, options)
        elem = DTYPE_BYTES.get(str(cfg.get("dtype", "bf16")), 2)
        nbytes = float(cfg["micro_batch"]) * float(cfg["seq"]) * float(cfg["hidden"]) * elem
        per_layer = 2.0 * tp_allreduce_time(nbytes, mp.tp, options.intra_bw,
                                            options.intra_alpha)
        act_tp = cfg["layers"] / mp.pp * per_layer
        redo_tp = recomputed_layers(profile, cfg["layers"]) / mp.pp * per_layer
        bubble_layers = (mp.pp - 1) / mp.virtual_stages  # eq. (pp-interleaved)
    else:
        redo_tp = 0.0
    f = profile.forward_time / k + act_tp
    b = profile.backward_time / k + act_tp
    per = _recompute_list(profile)
    ready = _per_gpu_ready(profile, k, act_tp, per)
    prov = dict(profile.provenance)
    if redo_tp > 0 and per is not None:  # at each recomputed layer's backward start
        redo = np.cumsum(per)
        ready = ready + (redo_tp * redo / redo[-1] if redo[-1] > 0 else redo_tp)
        b += redo_tp
    if per is not None:  # per GPU, as the ready times move: the sharded model's
        total = float(per.sum())  # units split the forward without it
        prov["recompute"] = (per / k + (redo_tp * per / total if redo_tp > 0
                                        and total > 0 else 0.0)).tolist()
    # eq. (pp-uneven): the head on the last stage, the embedding on the first (the step's
    # reference: its gradients complete last)
    shares = stage_shares(profile, mp)
    head_f = profile.forward_time * shares.head_forward / mp.tp
    head_b = (profile.backward_time - (float(per.sum()) if per is not None else 0.0)) \
        * shares.head_backward / mp.tp
    if head_f + head_b > 0:
        b_first = b - head_b / mp.pp
        ready = ready * (b_first / b) if b > 0 else ready
        f, b = f - head_f / mp.pp, b_first
    bubble_f = bubble_layers * f + mp.microbatches * head_f * (mp.pp > 1)
    bubble_b = bubble_layers * b + mp.microbatches * head_b * (mp.pp > 1)
    prov["model_parallel"] = dict(mp.settings(),
                                  tp_collectives_per_microbatch=2 * act_tp + redo_tp,
                                  tp_recompute_collectives_per_microbatch=redo_tp,
                                  pipeline_bubble=bubble_f + bubble_b,
                                  pipeline_bubble_forward=bubble_f,
                                  pipeline_bubble_backward=bubble_b)
    update = profile.update_time * shares.heaviest / mp.tp + bubble_f + bubble_b
    if "offload_cpu_step" in prov:  # the offloaded CPU step, of the heaviest stage's shard
        prov["offload_cpu_step"] = prov["offload_cpu_step"] * shares.heaviest / mp.tp
    if not mp.microbatches * (f + b) + update <= MAX_TIME:  # as the profile would refuse
        raise InvalidParameterError(
            "microbatches", mp.microbatches, f"makes an optimizer step of "
            f"{mp.microbatches * (f + b) + update:.4g} s, longer than a day ({MAX_TIME:g} s)")
    nbytes = np.asarray(profile.tensor_bytes, float) / k
    if shares.first * mp.pp != 1.0:  # the first stage's: whole elements, as compressors
        from .hardware import ELEMENT_BYTES  # count them (planner: round(bytes / e))
        e = ELEMENT_BYTES.get(str(profile.precision).lower(), 4)
        nbytes = np.round(nbytes * shares.first * mp.pp / e) * e
    return attrs.evolve(
        profile, tensor_bytes=nbytes,
        tensor_ready=ready, tensor_shapes=None,
        forward_time=f, backward_time=b,
        update_time=update, grad_accum=mp.microbatches, provenance=prov)


@attrs.frozen
class StageShares:
    """What the pipeline's end stages hold of the model (eq. :eq:`pp-uneven`).

    Attributes
    ----------
    head_forward, head_backward : float
        The head's (final norm and output layer) share of one micro-batch's forward and
        of its backward without recompute, all on the last stage [-].
    first : float
        The first stage's share of the parameters (the embedding and :math:`L/p`
        layers): its gradients are the step's data-parallel traffic [-].
    heaviest : float
        The share of the stage holding the most parameters (first or last; with tied
        embeddings the last keeps a copy of them): its optimizer step ends the step [-].
    """

    head_forward: float
    head_backward: float
    first: float
    heaviest: float


def stage_shares(profile, mp) -> StageShares:
    """The end stages' shares of ``profile`` under the pipeline ``mp``: with
    :math:`p > 1` and a config with units, the head on the last stage and the embedding
    on the first, as Megatron-LM places them; otherwise an even split (no head share,
    :math:`1/p` of the parameters each) [-].

    Parameters
    ----------
    profile : WorkloadProfile
        The single-GPU profile of the whole model [-].
    mp : ModelParallel
        The parallelism [-].
    """
    even = StageShares(0.0, 0.0, 1.0 / mp.pp, 1.0 / mp.pp)
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    cfg = prov.get("config")
    if mp.pp == 1 or not isinstance(cfg, dict):
        return even
    from .workloads import end_stage_params, stage_parts

    parts = stage_parts(cfg)
    if parts is None:
        return even
    first, heaviest = end_stage_params(parts, mp.pp)
    fwd, bwd = parts["forward"], parts["backward"]
    return StageShares(head_forward=fwd[2] / sum(fwd) if sum(fwd) > 0 else 0.0,
                       head_backward=bwd[2] / sum(bwd) if sum(bwd) > 0 else 0.0,
                       first=first, heaviest=heaviest)


def _recompute_list(profile):
    """``provenance["recompute"]`` (:func:`~scalemodel.checkpointing.with_recompute`: each
    tensor's recompute, in backward order) as an array, None without one [s].

    Raises
    ------
    InvalidParameterError
        A list that is not one finite, non-negative time per tensor (a profile file's,
        edited or corrupt), naming it.
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    raw = prov.get("recompute")
    if not raw:
        return None
    k = len(profile.tensor_ready)
    try:
        per = np.asarray(raw, float)
    except (TypeError, ValueError):
        per = None
    if per is None or per.shape != (k,) or not np.all(np.isfinite(per)) or np.any(per < 0):
        raise InvalidParameterError(
            "profile.provenance['recompute']", raw, f"must be one finite time >= 0 per "
            f"tensor ({k} of them, backward order) [s], as with_recompute writes it",
            "Remove it, or give the profile without checkpointing and pass "
            "activation_checkpointing=")
    return per


def _per_gpu_ready(profile, k, act_tp, per=None):
    """The gradients' ready times on one GPU, before the recompute's TP collectives [s].

    The backward's own work (the profile's ready times less the recompute before them,
    ``provenance["recompute"]``) is split over the :math:`k = t p` GPUs and stretched by
    the backward's TP collectives ``act_tp``, which run in the blocks' backward; the
    recompute is split over the GPUs and keeps its place. Spreading ``act_tp`` over the
    recompute too would let a longer recompute move the gradients before it (the head's)
    earlier. ``per``: the recompute per tensor (:func:`_recompute_list`), None without."""
    ready = np.asarray(profile.tensor_ready, float)
    cum = np.cumsum(per) if per is not None else np.zeros_like(ready)
    own = profile.backward_time - (float(cum[-1]) if cum.size else 0.0)
    stretch = (own / k + act_tp) / own if own > 0 else 0.0
    return (ready - cum) * stretch + cum / k


def recomputed_layers(profile, layers) -> int:
    """Layers whose forward, tensor-parallel all-reduces included, runs again in backward:
    :math:`L_r` of eq. :eq:`tp-compute`, ``round(fraction * layers)`` under ``"full"``
    checkpointing, 0 otherwise (``"selective"`` re-runs no collective) [layers].

    Parameters
    ----------
    profile : WorkloadProfile
        The single-GPU profile, after :func:`~scalemodel.checkpointing.with_recompute`
        (its ``provenance["checkpointing"]``) [-].
    layers : int
        Transformer layers of the model [layers].
    """
    prov = profile.provenance if isinstance(profile.provenance, dict) else {}
    ck = prov.get("checkpointing")
    if not isinstance(ck, dict) or ck.get("mode") != "full" or not prov.get("recompute"):
        return 0
    return int(round(float(ck.get("fraction", 1.0)) * int(layers)))


def dp_options(options, mp):
    """The options of one data-parallel ring and the factor on the line rate [-].

    With ``gpus_per_node`` :math:`q`, the ring has :math:`q/t` GPUs per node and
    :math:`\\nu/t` of the node's NICs: one NIC at :math:`\\nu/t` times the line rate.

    Parameters
    ----------
    options : CollectiveOptions
        The job's topology [-].
    mp : ModelParallel
        The parallelism [-].
    """
    gpn = options.gpus_per_node
    if gpn is None or mp.tp == 1:
        return options, 1.0
    return (options.evolve(gpus_per_node=gpn // mp.tp, nics_per_node=1),
            options.nics_per_node / mp.tp)
