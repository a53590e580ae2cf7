"""Bad input found by the session-11 sweep in the modules the sweep left alone: each is a
documented error naming the parameter and the value (they were bare TypeError,
IndexError, ValueError, OverflowError or AttributeError tracebacks)."""

import pytest

import scalemodel as sm
from scalemodel.fusion import bucket_ready_times


@pytest.mark.parametrize("sizes, ready, name", [
    ([], [], "sizes"), (None, [0.1], "sizes"), ("x", [0.1], "sizes"),
    (10**400, [0.1], "sizes"), ([[1, 2]], [0.1], "sizes"), ([1e6, -1.0], [0.1, 0.2], "sizes"),
    ([1e6, float("nan")], [0.1, 0.2], "sizes"), ([1e6, 2e6], None, "ready"),
    ([1e6, 2e6], [], "ready"), ([1e6, 2e6], [0.1], "ready"), ([1e6], [float("inf")], "ready")])
def test_bucket_ready_times_names_the_bad_argument(sizes, ready, name):
    with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError), match=rf"^{name}="):
        bucket_ready_times(sizes, ready)


def test_bucket_ready_times_still_buckets():
    b = bucket_ready_times([4e6, 4e6, 30e6], [0.01, 0.02, 0.03])
    assert b.nbytes.sum() == 38e6 and len(b) >= 1


def test_a_reduction_that_is_not_a_reduction_cost():
    with pytest.raises(sm.ParameterTypeError, match="reduction='x'"):
        sm.collective_time("ring", 1e6, 8, 10e9, reduction="x")


@pytest.mark.parametrize("value", [[], [1e-12, 2e-12]])
def test_codec_cost_is_one_number(value):
    with pytest.raises(sm.ParameterTypeError, match="codec_cost="):
        sm.scaling_factor("bert", 64, 10e9, codec_cost=value, compression=2)


def test_a_ratio_near_the_largest_float_answers_without_numpy_warnings():
    # (pytest turns warnings into errors: numpy's overflow in u * bw * r leaked)
    assert sm.scaling_factor("bert", [64], 10e9, compression=[1e308])[0] == pytest.approx(
        sm.scaling_factor("bert", 64, 10e9, compression=1e300))


@pytest.mark.parametrize("text", ["16,,64", "16,64,", ",16"])
def test_a_cli_list_with_an_empty_item_is_refused(text, capsys):
    from scalemodel.cli import main
    assert main(["scaling", "--model", "bert", "--n", text, "--bw", "10Gbps"]) == 2
    assert f"--n='{text}' is invalid: has an empty item" in capsys.readouterr().err


@pytest.mark.parametrize("candidates", [{}, 1e308, ["25"], [True], [1e12], [[1, 2]],
                                        10**400, []])
def test_best_bucket_size_candidates_are_one_list_of_caps(candidates):
    with pytest.raises((sm.InvalidParameterError, sm.ParameterTypeError),
                       match="^candidates="):
        sm.best_bucket_size("resnet50", 16, 10e9, candidates=candidates)


def test_best_bucket_size_candidates_still_taken():
    assert sm.best_bucket_size("resnet50", 16, 10e9, candidates=(1, 2.5)).bucket_cap_mb in (
        1.0, 2.5)


@pytest.mark.parametrize("ask", [
    lambda: sm.memory("llama-2-7b", 64, pp=3),
    lambda: sm.scaling_factor("llama-2-7b", 6, 10e9, pp=3),
    lambda: sm.min_compression("llama-2-7b", 10e9, n=6, pp=3)])
def test_a_pipeline_the_layers_cannot_split_is_said_before_the_micro_batches(ask):
    # (it asked for microbatches= first, then refused pp=3 once they were given)
    with pytest.raises(sm.InvalidParameterError, match=r"pp=3 .*32 layers.*valid are"):
        ask()


@pytest.mark.parametrize("ask", [
    lambda: sm.memory("llama-3-8b", 64, sharding="zero3", pp=3),
    lambda: sm.memory("llama-3-8b", 64, sharding="zero3", pp=2),
    lambda: sm.iteration_time("llama-3-8b", 64, 100e9, sharding="zero3", pp=3),
    lambda: sm.min_compression("llama-3-8b", 10e9, n=64, sharding="zero2", pp=2)])
def test_sharding_with_a_pipeline_is_said_first(ask):
    # what the model cannot do at all comes before the layer count and the micro-batches
    # (validate_parallel's 405B rows with FSDP x PP 8 said "must divide the 126 layers")
    with pytest.raises(sm.InvalidParameterError, match=r"pp=\d is invalid: sharding="
                                                        r"'zero\d' with pipeline"):
        ask()
