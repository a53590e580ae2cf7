"""A model given as package.module:function, for the calibration tests."""


def tiny(batch_size):
    """A linear layer on random inputs: ``(model, inputs, targets)``."""
    import torch
    g = torch.Generator().manual_seed(0)
    return torch.nn.Linear(8, 2), torch.randn(batch_size, 8, generator=g), \
        torch.randn(batch_size, 2, generator=g)


def with_unused(batch_size):
    """A linear layer plus one the forward pass never uses (it gets no gradient)."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = torch.nn.Linear(8, 2), torch.nn.Linear(8, 2)

        def forward(self, x):
            return self.used(x)

    g = torch.Generator().manual_seed(0)
    return Net(), torch.randn(batch_size, 8, generator=g), torch.randn(batch_size, 2, generator=g)
