"""Models to calibrate with: torchvision names, ``module:function`` specs, built-in toys.

A *model spec* names what to train in a calibration run:

- a torchvision model name (``"resnet50"``, ``"vgg16_bn"``, ...) when torchvision is
  installed: the model with its default number of classes on random 224 x 224 images.
  ``scalemodel[calibrate]`` does not install torchvision: install the release made for
  your torch (torchvision 0.28 for torch 2.13, 0.29 for 2.14); a mismatched one fails to
  load (``operator torchvision::nms does not exist``), and the error says so;
- ``"package.module:function"``: ``function(batch_size: int) -> (model, inputs,
  targets)``, where ``model`` is a ``torch.nn.Module``, ``inputs`` one batch of
  ``batch_size`` samples (a tensor passed as ``model(inputs)``) and ``targets`` the
  matching labels; the module must be importable (on ``PYTHONPATH``, or in the folder
  the command runs from) and the profile is named after the function;
- a built-in model that needs nothing beyond torch: ``"mlp"`` (a 4-layer perceptron,
  4.2 M parameters, 16.8 MB of fp32 gradients) and ``"convnet"`` (a small VGG-style
  network on 32 x 32 images, 2.5 M parameters, 9.8 MB), used by the tests and the
  emulated cluster.

The loss is cross entropy when the targets are integers and mean squared error
otherwise. All inputs are synthetic (random, fixed seed): calibration measures time, not
accuracy.
"""

from __future__ import annotations

import importlib

from ..exceptions import InvalidParameterError, UnknownNameError

__all__ = ["BUILTIN_MODELS", "load_model", "loss_function", "model_name", "check_model_spec",
           "SPEC_HELP"]

SPEC_HELP = ("mlp or convnet (built in), a torchvision name such as resnet50 (needs "
             "torchvision, which scalemodel[calibrate] does not install), or "
             "package.module:function, a function(batch_size) that returns (model, inputs, "
             "targets): a torch.nn.Module, one batch of inputs and its targets (integer "
             "labels: cross entropy; floats: mean squared error)")
"""What a model spec may be, for help texts."""


def _torch():
    try:
        import torch
    except ImportError:  # pragma: no cover - exercised only without torch
        raise ImportError("calibration needs torch: pip install 'scalemodel[calibrate]' "
                          "(on a CPU-only machine pin the CPU build, e.g. torch==2.13.0)") \
            from None
    return torch


def mlp(batch_size):
    """A 4-layer perceptron, 1024-1024-1024-1024-1000 (4.2 M parameters), random inputs."""
    torch = _torch()
    nn = torch.nn
    model = nn.Sequential(nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1024), nn.ReLU(),
                          nn.Linear(1024, 1024), nn.ReLU(), nn.Linear(1024, 1000))
    g = torch.Generator().manual_seed(0)
    return model, torch.randn(batch_size, 1024, generator=g), \
        torch.randint(0, 1000, (batch_size,), generator=g)


def convnet(batch_size):
    """A small VGG-style network on random 32 x 32 images (2.5 M parameters)."""
    torch = _torch()
    nn = torch.nn

    def block(cin, cout):
        return [nn.Conv2d(cin, cout, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2)]

    model = nn.Sequential(*block(3, 32), *block(32, 64), *block(64, 128), nn.Flatten(),
                          nn.Linear(128 * 4 * 4, 1024), nn.ReLU(), nn.Linear(1024, 256),
                          nn.ReLU(), nn.Linear(256, 10))
    g = torch.Generator().manual_seed(0)
    return model, torch.randn(batch_size, 3, 32, 32, generator=g), \
        torch.randint(0, 10, (batch_size,), generator=g)


BUILTIN_MODELS = {"mlp": mlp, "convnet": convnet}


def _torchvision_models():
    """torchvision's model module, or a one-line error saying why it cannot be used."""
    try:
        from torchvision import models as tvm
    except ImportError:
        return None, ("torchvision, which provides the other names, is not installed "
                      "(scalemodel[calibrate] does not install it: install the torchvision "
                      "release made for your torch, or pass package.module:function)")
    except Exception as exc:  # noqa: BLE001 - a torchvision built for another torch
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        return None, (f"torchvision is installed but does not load ({type(exc).__name__}: "
                      f"{first}); it was built for another torch release: install the one "
                      "made for this torch, or pass package.module:function")
    return tvm, ""


def _torchvision(name, batch_size):
    tvm = check_model_spec(name)
    torch = _torch()
    model = tvm.get_model(name)
    g = torch.Generator().manual_seed(0)
    size = 299 if name.startswith("inception") else 224
    return model, torch.randn(batch_size, 3, size, size, generator=g), \
        torch.randint(0, 1000, (batch_size,), generator=g)


def model_name(spec: str) -> str:
    """The profile name a model spec records: the function's name for
    ``package.module:function``, else the spec itself.

    Parameters
    ----------
    spec : str
        A model spec [-].
    """
    return spec.partition(":")[2] or spec if isinstance(spec, str) else spec


def check_model_spec(spec: str):
    """Check that ``spec`` names a model, without building it (before a long run).

    Parameters
    ----------
    spec : str
        A built-in name, a torchvision name, or ``package.module:function`` [-].

    Returns
    -------
    object
        The function for ``package.module:function``, torchvision's model module for a
        torchvision name, the built-in function otherwise.

    Raises
    ------
    InvalidParameterError
        The module cannot be imported, the function is missing or not callable, or
        torchvision is needed and is missing or broken.
    UnknownNameError
        An unknown name.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise InvalidParameterError("model", spec, SPEC_HELP)
    if ":" in spec:
        module, _, func = spec.partition(":")
        if not module or not func or not func.isidentifier():
            raise InvalidParameterError("model", spec, "package.module:function names a "
                                        "module and a function in it")
        try:
            fn = getattr(importlib.import_module(module), func)
        except (ImportError, AttributeError) as exc:
            raise InvalidParameterError("model", spec, f"cannot import it ({exc}); the "
                                        "module must be on PYTHONPATH or in the current "
                                        "folder") from None
        if not callable(fn):
            raise InvalidParameterError("model", spec, "is not a function(batch_size) "
                                        "returning (model, inputs, targets)")
        return fn
    if spec in BUILTIN_MODELS:
        return BUILTIN_MODELS[spec]
    tvm, why = _torchvision_models()
    if tvm is None:
        raise UnknownNameError("model", spec, sorted(BUILTIN_MODELS), extra=why)
    if spec not in tvm.list_models():
        raise UnknownNameError("model", spec, sorted(BUILTIN_MODELS) + tvm.list_models(),
                               extra="or package.module:function")
    return tvm


def load_model(spec: str, batch_size: int):
    """The model, inputs and targets a spec names.

    Parameters
    ----------
    spec : str
        A built-in name, a torchvision name, or ``package.module:function`` [-].
    batch_size : int
        Samples per worker [samples].

    Returns
    -------
    tuple
        ``(model, inputs, targets, name)``; ``name`` is the profile name to record.
    """
    if not isinstance(spec, str) or not spec:
        raise InvalidParameterError("model", spec, "a model name or package.module:function")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise InvalidParameterError("batch_size", batch_size, "an integer >= 1")
    if ":" in spec:
        fn = check_model_spec(spec)
        try:
            out = fn(batch_size)
        except Exception as exc:  # the user's code: said in one line, by the option
            raise InvalidParameterError("model", spec, f"the function raised "
                                        f"{type(exc).__name__}: {exc}") from None
        torch = _torch()
        if not (isinstance(out, tuple) and len(out) == 3
                and isinstance(out[0], torch.nn.Module)):
            raise InvalidParameterError("model", spec, "the function must return "
                                        "(model, inputs, targets), the model a "
                                        "torch.nn.Module")
        return (*out, model_name(spec))
    if spec in BUILTIN_MODELS:
        return (*BUILTIN_MODELS[spec](batch_size), spec)
    return (*_torchvision(spec, batch_size), spec)


def loss_function(targets):
    """Cross entropy for integer targets, mean squared error otherwise."""
    torch = _torch()
    if targets.dtype in (torch.int64, torch.int32, torch.int16, torch.uint8):
        return torch.nn.functional.cross_entropy
    return torch.nn.functional.mse_loss
