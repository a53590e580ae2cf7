"""Transformer models for ``python -m scalemodel.calibrate --model MODULE:FUNCTION``.

Each function builds a HuggingFace ``transformers`` model **from its configuration** (random
weights, nothing downloaded) and synthetic token ids, in the shapes of scalemodel's
built-in FLOP-derived profiles, so a measured timeline can be set beside the derived one:

=============== ====================================== ===========================
function        model                                  default shape
=============== ====================================== ===========================
``bert_base``   ``BertForMaskedLM(BertConfig())``      batch x 64 tokens
``bert_large``  BERT-Large (24 layers, 1024 hidden)    batch x 64 tokens
``gpt2``        ``GPT2LMHeadModel(GPT2Config())``      batch x 1024 tokens
=============== ====================================== ===========================

The loss is cross entropy of the language-model logits over every token (the MLM head over
all tokens, as in the HKBU ddl-benchmarks BERT script the built-in profiles follow; there
is no next-sentence head, so the pooler is left out: ``BertForMaskedLM`` has none).

Run from the repository root (``calibration`` is then importable), e.g.::

    python -m scalemodel.calibrate --steps compute \\
        --model calibration.transformer_models:bert_base --batch-size 64 --out h100.json
"""

from __future__ import annotations


def _logits_only(lm):
    """Wrap a HuggingFace LM so ``forward(ids)`` returns ``(tokens, vocab)`` logits."""
    import torch

    class LogitsOnly(torch.nn.Module):
        def __init__(self, lm):
            super().__init__()
            self.lm = lm

        def forward(self, ids):
            logits = self.lm(input_ids=ids).logits
            return logits.reshape(-1, logits.shape[-1])

    return LogitsOnly(lm)


def _tokens(batch_size, seq_len, vocab):
    import torch
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, vocab, (batch_size, seq_len), generator=g)
    targets = torch.randint(0, vocab, (batch_size * seq_len,), generator=g)
    return ids, targets


def bert_base(batch_size, seq_len=64):
    """BERT-Base (110 M parameters in BertModel) with an MLM head, random token ids."""
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig()
    return (_logits_only(BertForMaskedLM(cfg)), *_tokens(batch_size, seq_len, cfg.vocab_size))


def bert_large(batch_size, seq_len=64):
    """BERT-Large (24 layers, hidden 1024, 16 heads) with an MLM head, random token ids."""
    from transformers import BertConfig, BertForMaskedLM
    cfg = BertConfig(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                     intermediate_size=4096)
    return (_logits_only(BertForMaskedLM(cfg)), *_tokens(batch_size, seq_len, cfg.vocab_size))


def gpt2(batch_size, seq_len=1024):
    """GPT-2 small (124 M parameters, 12 layers, hidden 768), random token ids."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config()
    return (_logits_only(GPT2LMHeadModel(cfg)), *_tokens(batch_size, seq_len, cfg.vocab_size))
