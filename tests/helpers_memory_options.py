"""What the tests of a memory option threaded through the calls share (``loss=``,
tests/test_loss_option.py; ``accounting=``, tests/test_accounting_option.py): the job, the
reference (:func:`scalemodel.memory` with the same settings), and the calls that report
memory."""

import pytest

import scalemodel as sm

# micro-batch 4 at 4096 tokens: the loss's peak (12sbV vs 4sbV + 16sb) is about 5 GiB apart
CFG = sm.llm_config("llama-2-7b", seq=4096, micro_batch=4)
PROFILE = sm.transformer_profile(CFG, "h100-sxm")
N, BW = 64, 100e9
NODES = dict(gpus_per_node=8, nics_per_node=8)


def reference(option, value, mem_kw, model=PROFILE, n=N):
    """memory()'s per-GPU figure with ``option=value`` and the settings ``mem_kw``
    [bytes]."""
    return sm.memory(model, n, gpu="h100-sxm", **{option: value}, **mem_kw).per_gpu


def asks(option):
    """The calls that report memory, each ``f(value, settings)`` with ``option=value``."""
    return {
        "min_compression": lambda v, kw: sm.min_compression(PROFILE, BW, n=N,
                                                            **{option: v}, **kw),
        "required_bandwidth": lambda v, kw: sm.required_bandwidth(PROFILE, n=N,
                                                                  **{option: v}, **kw),
        "plan_compression": lambda v, kw: sm.plan_compression(
            PROFILE, BW, n=N, compressors=["fp16"], **{option: v}, **kw),
    }


def cases(calls, settings, ids):
    """One ``pytest.param(name, settings, memory settings)`` per call and setting."""
    return [pytest.param(name, kw, mem_kw, id=f"{name}-{i}") for name in sorted(calls)
            for (kw, mem_kw), i in zip(settings, ids)]
