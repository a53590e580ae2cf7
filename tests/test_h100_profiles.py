"""The H100 profiles: measured, with their source, and a check of the FLOP-derived ones."""

import numpy as np
import pytest

import scalemodel as sm


@pytest.mark.parametrize("model", ["bert-base", "bert-large", "gpt2"])
def test_flop_split_matches_the_measured_h100_timeline(model):
    """The FLOP-derived profile readies each gradient at the fraction of backward that
    the H100 measured for the same model (paired by tensor name), within 8 %."""
    derived, measured = sm.load_profile(model), sm.load_profile(f"{model}-h100")

    def key(name):
        for prefix in ("lm.", "bert.", "transformer."):
            name = name.removeprefix(prefix)
        return name

    frac = {key(n): r / derived.backward_time
            for n, r in zip(derived.tensor_names, derived.tensor_ready)}
    pairs = [(frac[key(n)], r / measured.backward_time)
             for n, r in zip(measured.tensor_names, measured.tensor_ready) if key(n) in frac]
    assert len(pairs) >= 0.95 * measured.tensor_bytes.size  # nearly every tensor pairs up
    a, b = np.array(pairs).T
    assert np.max(np.abs(a - b)) < 0.08
    # and the pairing is meaningful: the backward order agrees
    assert np.corrcoef(a, b)[0, 1] > 0.99


def test_h100_profiles_are_measurements_with_their_source():
    for name in sm.list_profiles():
        if "-h100" not in name:
            continue
        p = sm.load_profile(name)
        assert "H100" in p.device and "measured on one NVIDIA H100" in p.provenance["source"]
        assert p.provenance["timer"] == "CUDA events"
        assert ("bf16" in name) == (p.provenance["autocast"] == "bf16")
        assert p.tensor_shapes is not None and p.precision == "fp32"
