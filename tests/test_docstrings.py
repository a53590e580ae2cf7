"""Contract tests over the public API (python-control style): every parameter of every
public function is documented, and its description ends with a unit in brackets."""

import inspect
import re

import pytest

import scalemodel as sm

PUBLIC = [getattr(sm, name) for name in sm.__all__
          if inspect.isfunction(getattr(sm, name))]


def documented_parameters(doc):
    """{name: description} from a numpydoc Parameters section."""
    doc = inspect.cleandoc(doc or "")
    m = re.search(r"^Parameters\n-+\n(.*?)(?:^\w[\w ]*\n-+\n|\Z)", doc, re.S | re.M)
    if not m:
        return {}
    out, current = {}, None
    for line in m.group(1).splitlines():
        if line and not line.startswith(" "):
            names = line.split(" : ")[0]
            current = [n.strip() for n in names.split(",")]
            for n in current:
                out[n] = ""
        elif current:
            for n in current:
                out[n] += " " + line.strip()
    return out


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda f: f.__name__)
def test_every_parameter_documented_with_unit(fn):
    params = [p for p in inspect.signature(fn).parameters.values()
              if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)]
    documented = documented_parameters(fn.__doc__)
    if params:
        assert documented, f"{fn.__name__} has no Parameters section"
    for p in params:
        assert p.name in documented, f"{fn.__name__}: parameter {p.name!r} undocumented"
        text = documented[p.name].strip()
        # a unit in brackets, e.g. [s], [bits/s], [-]; or a pointer to where it is documented
        assert re.search(r"\[[^\]]+\]", text) or "As in" in text or "see" in text.lower(), \
            f"{fn.__name__}: {p.name!r} has no unit: {text!r}"


@pytest.mark.parametrize("fn", PUBLIC, ids=lambda f: f.__name__)
def test_no_mutable_defaults(fn):
    for p in inspect.signature(fn).parameters.values():
        assert not isinstance(p.default, (list, dict, set)), (fn.__name__, p.name)
