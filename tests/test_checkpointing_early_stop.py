"""PyTorch's non-reentrant checkpoint with early stopping, run for real on the CPU: the
matrix products its recompute runs are the ones ``recompute_fraction(cfg,
"full-early-stop")`` counts (all but each block's last), and all of them with early
stopping off (``"full"``)."""

import pytest

torch = pytest.importorskip("torch")

import scalemodel as sm  # noqa: E402
from helpers_benchmarks import load_calibration  # noqa: E402
from scalemodel.checkpointing import _layer_matmuls, recompute_fraction  # noqa: E402


@pytest.fixture(scope="module")
def lm():
    return load_calibration("llm_memory", "llm_memory_early_stop")


def _mm_flops(lm, cfg, mode, early_stop):
    """FLOPs of every matrix product (aten.mm / addmm / bmm) of one forward and backward
    pass of ``cfg``'s model under ``mode``."""
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.checkpoint import set_checkpoint_early_stop

    total = [0.0]

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = str(func.overloadpacket)
            if name.endswith(("mm", "addmm")) and not name.endswith("bmm"):
                a, b = args[-2], args[-1]
                total[0] += 2.0 * a.shape[0] * a.shape[1] * b.shape[1]
            return out

    model = lm.build_model(cfg, flash=True, device="cpu", dtype=torch.float32)
    lm.apply_checkpointing(model, mode, True)
    ids = torch.randint(0, cfg.vocab, (cfg.micro_batch, cfg.seq))
    with set_checkpoint_early_stop(early_stop), Count():
        logits = model(ids)
        logits.float().pow(2).mean().backward()
    return total[0]


@pytest.mark.parametrize("gated", [True, False])
@pytest.mark.parametrize("early_stop", [True, False])
def test_recomputed_products_are_the_counted_ones(lm, gated, early_stop):
    cfg = sm.TransformerConfig(layers=3, hidden=64, heads=4, ffn=176 if gated else 256,
                               vocab=128, seq=16, micro_batch=2, gated_ffn=gated,
                               norm="rmsnorm" if gated else "layernorm", bias=False)
    recomputed = (_mm_flops(lm, cfg, "full", early_stop)
                  - _mm_flops(lm, cfg, "none", early_stop)) / cfg.layers
    T = cfg.tokens
    matmul = sum(2.0 * T * i * o for i, o in _layer_matmuls(cfg))
    core = 4.0 * cfg.micro_batch * cfg.seq ** 2 * cfg.heads * cfg.head_dim
    ck = "full-early-stop" if early_stop else "full"
    # recompute_fraction counts the attention core too; it is not a matrix product here
    assert recomputed == pytest.approx(recompute_fraction(cfg, ck) * (matmul + core) - core,
                                       rel=1e-12)
    last_in, last_out = _layer_matmuls(cfg)[-1]
    assert recomputed == pytest.approx(matmul - (2.0 * T * last_in * last_out
                                                 if early_stop else 0.0), rel=1e-12)
