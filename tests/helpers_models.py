"""A model given as package.module:function, for the calibration tests."""


def tiny(batch_size):
    """A linear layer on random inputs: ``(model, inputs, targets)``."""
    import torch
    g = torch.Generator().manual_seed(0)
    return torch.nn.Linear(8, 2), torch.randn(batch_size, 8, generator=g), \
        torch.randn(batch_size, 2, generator=g)
