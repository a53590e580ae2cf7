"""What one transformer layer keeps for backward, tensor by tensor, written out here
independently of scalemodel.checkpointing (eq. layer-activations).

Each entry: (tensor, bytes per s*b*h element group, kept whole by every tensor-parallel
rank). 16-bit activations; masks 1 byte. For GPT (LayerNorm, plain 4h feed-forward with
GeLU, dropout) the sum is Korthikanti et al.'s 34 (10 replicated + 24 split) and the
score term 5 (arXiv:2205.05198, Sec. 4.1 and Table 2).
"""


def saved_tensors(cfg):
    h, f = cfg.hidden, cfg.ffn
    q = cfg.heads * cfg.head_dim / h  # query and attention-output widths over h
    kv = cfg.kv_heads * cfg.head_dim / h  # key and value widths over h
    rows = [("attention norm input", 2, True), ("QKV projection input", 2, True),
            ("Q (rotary applied)", 2 * q, False), ("K", 2 * kv, False), ("V", 2 * kv, False),
            ("attention output = output projection input", 2 * q, False),
            ("FFN norm input", 2, True), ("FFN input", 2, True)]
    if cfg.gated_ffn:
        rows += [("gate output (activation input)", 2 * f / h, False),
                 ("up output", 2 * f / h, False), ("activation of the gate", 2 * f / h, False),
                 ("gate x up = down projection input", 2 * f / h, False)]
    else:
        rows += [("activation input", 2 * f / h, False),
                 ("activation output = down projection input", 2 * f / h, False)]
    if cfg.dropout:
        rows += [("attention dropout mask", 1, True), ("FFN dropout mask", 1, True)]
    return rows


def hand_units(cfg):
    """(replicated, split, score) per layer: bytes per sbh kept whole and split under
    tensor parallelism, and bytes per a s^2 b of attention scores without flash."""
    rows = saved_tensors(cfg)
    rep = sum(v for _, v, whole in rows if whole)
    split = sum(v for _, v, whole in rows if not whole)
    score = 2 + (3 if cfg.dropout else 0)  # softmax output; dropout mask and output
    return rep, split, score
