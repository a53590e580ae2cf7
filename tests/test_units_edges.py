"""Units and validators at the edges: every value is either read correctly or refused with
a documented exception that names the parameter and the value as given (issue 11,
"Numbers at the edges" and "The command line")."""

import numpy as np
import pytest

import scalemodel as sm
from scalemodel.exceptions import InvalidParameterError, ParameterTypeError
from scalemodel.units import (MAX_COUNT, MIN_TEXT_BANDWIDTH, broadcast_shape, check_count,
                              check_fraction, check_nonnegative, check_ratio, parse_duration,
                              scalar_converter)


@pytest.mark.parametrize("text, bits", [
    ("10Gbps", 10e9), ("10gbps", 10e9), ("10 GBIT/S", 10e9), ("10 Gbits/sec", 10e9),
    ("10Gb/s", 10e9), ("10G", 10e9), ("10e9", 10e9), ("1e9bps", 1e9), ("100GbE", 100e9),
    ("100gbe", 100e9), ("100GE", 100e9), ("400 Mb/s", 400e6), ("400mbps", 400e6),
    ("25GB/s", 200e9), ("25GBps", 200e9), ("25 GBytes/s", 200e9), ("25gB/s", 200e9),
    ("12.5 GiB/s", 12.5 * 8 * 2**30), ("12.5gib/s", 12.5 * 2**30), ("1 Tbit/s", 1e12),
    ("1Pbps", 1e15), (" 10 Gbps ", 10e9), ("1Mbps", MIN_TEXT_BANDWIDTH),
])
def test_bandwidth_strings(text, bits):
    assert sm.parse_bandwidth(text) == pytest.approx(bits, rel=1e-15)


@pytest.mark.parametrize("text, words", [
    ("10", "did you mean 10Gbps?"),
    ("999999", "did you mean 999999Gbps?"),
    ("500kbps", "at least 1 Mbit/s"),
    ("10 bits", "at least 1 Mbit/s"),
    ("10GBPS", "could mean bits or bytes"),
    ("-5Gbps", "must be > 0"),
    ("0Gbps", "must be > 0"),
    ("1e-400Gbps", "must be > 0"),
    ("1e400bps", "too large"),
    ("1e300Tbps", "too large"),
    ("", "cannot read"),
    ("nan", "cannot read"),
    ("inf Gbps", "cannot read"),
    ("10 parsecs", "cannot read"),
    ("10 Gbe/s", "cannot read"),
    ("1e9,10Gbps", "cannot read"),
])
def test_bad_bandwidth_strings_name_the_text_given(text, words):
    with pytest.raises(InvalidParameterError) as info:
        sm.parse_bandwidth(text, "bw")
    assert info.value.parameter == "bw" and info.value.value == text
    assert str(info.value).startswith(f"bw={text!r} is invalid") and words in str(info.value)


def test_numbers_in_the_api_follow_the_rule_of_the_command_line():
    """One rule: a line rate below 1 Mbit/s is a unit slip, as a number or as text, with
    the same hint (``min_compression("bert", 10)`` answered 5.91e9x before)."""
    import decimal
    import fractions
    for value in (10, 10.0, np.float32(10.0), decimal.Decimal("10"), [1e9, 10.0]):
        with pytest.raises(InvalidParameterError, match="at least 1 Mbit/s.*did you mean "
                                                        "10Gbps"):
            sm.parse_bandwidth(value)
    with pytest.raises(InvalidParameterError, match="did you mean 10Gbps"):
        sm.min_compression("bert", 10)
    with pytest.raises(InvalidParameterError, match="bw=1e-300.*at least 1 Mbit/s"):
        sm.scaling_factor("bert", 8, 1e-300)
    with pytest.raises(InvalidParameterError, match="bw=1e-300"):
        sm.iteration_time("bert", n=8, bw=1e-300)
    assert sm.parse_bandwidth(MIN_TEXT_BANDWIDTH) == 1e6
    # any real number type is a number of bits per second
    assert sm.parse_bandwidth(decimal.Decimal("1e10")) == 1e10
    assert sm.parse_bandwidth(fractions.Fraction(10**10, 1)) == 1e10
    assert sm.scaling_factor("bert", 8, decimal.Decimal("1e10")) == \
        sm.scaling_factor("bert", 8, 1e10)
    np.testing.assert_array_equal(sm.parse_bandwidth(["10Gbps", 1e7]), [1e10, 1e7])


@pytest.mark.parametrize("value, kind, words", [
    (None, ParameterTypeError, "bw=None"),
    (True, ParameterTypeError, "bw=True"),
    (np.array([True]), ParameterTypeError, "not booleans"),
    ([True, 1e9], ParameterTypeError, "bw=True"),
    (1e9 + 1j, ParameterTypeError, "bw=(1000000000+1j)"),
    (np.array([1e9 + 1j]), ParameterTypeError, "not complex numbers"),
    ([1e9, None], ParameterTypeError, "bw=None"),
    ({"rate": 1e9}, ParameterTypeError, "bw={'rate': 1000000000.0}"),
    ([[1e9], [1e9, 2e9]], ParameterTypeError, "of one shape"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), ParameterTypeError, "bw="),
    (10**400, InvalidParameterError, "too large for a float"),
    (5e-324, InvalidParameterError, "at least 1 Mbit/s"),
    (1e-300, InvalidParameterError, "bw=1e-300 is invalid: a line rate must be at least"),
    (float("nan"), InvalidParameterError, "bw=nan"),
    (-1e9, InvalidParameterError, "bw=-1000000000.0"),
])
def test_bandwidth_values_that_are_no_bandwidth(value, kind, words):
    with pytest.raises(kind) as info:
        sm.scaling_factor("bert", 8, value)
    assert info.value.parameter == "bw" and words in str(info.value), str(info.value)


@pytest.mark.parametrize("value, words", [
    ([1e20], "n=1e+20 is invalid"),              # was shown as n=-9223372036854775808
    (10**20, "n=100000000000000000000 is invalid"),
    (np.array([4, 2**40]), "n=1099511627776 is invalid"),   # as written, not 1.0995e12
    (MAX_COUNT + 1, f"must be an integer in [1, {MAX_COUNT}]"),
    (np.array([True]), "not booleans"),
    (None, "n=None"),
    (np.array([8 + 0j]), "not complex"),
])
def test_worker_counts_out_of_range_keep_their_value(value, words):
    with pytest.raises((InvalidParameterError, ParameterTypeError)) as info:
        sm.scaling_factor("bert", value, 1e10)
    assert info.value.parameter == "n" and words in str(info.value), str(info.value)
    assert "-9223372036854775808" not in str(info.value)


def test_largest_count_is_accepted():
    assert check_count(MAX_COUNT) == MAX_COUNT
    assert check_count(np.array([1, MAX_COUNT])).dtype == np.int64


@pytest.mark.parametrize("check", [check_nonnegative, check_fraction, check_ratio])
@pytest.mark.parametrize("value", [None, "1", np.array([True]), np.array([0.5j]), [0.5, None],
                                   object()])
def test_validators_refuse_non_numbers(check, value):
    with pytest.raises(ParameterTypeError) as info:
        check(value, "p")
    assert info.value.parameter == "p" and str(info.value).startswith("p=")


@pytest.mark.parametrize("alpha, kind", [("1 fortnight", InvalidParameterError), (None, None),
                                         ([1e-6], ParameterTypeError),
                                         (-1e-6, InvalidParameterError),
                                         (float("inf"), InvalidParameterError),
                                         (True, ParameterTypeError)])
def test_alpha_is_checked_by_the_units_validators(alpha, kind):
    # a time with a unit is read as one, like the CLI's --alpha
    assert sm.scaling_factor("bert", 8, 1e10, alpha="1ms") == \
        sm.scaling_factor("bert", 8, 1e10, alpha=1e-3)
    if kind is None:  # None: the cluster's latency, else 0
        assert sm.scaling_factor("bert", 8, 1e10, alpha=alpha) == \
            sm.scaling_factor("bert", 8, 1e10)
        return
    with pytest.raises(kind) as info:
        sm.scaling_factor("bert", 8, 1e10, alpha=alpha)
    assert info.value.parameter == "alpha" and "alpha=" in str(info.value)


@pytest.mark.parametrize("text, seconds", [("5us", 5e-6), ("5 µs", 5e-6), ("0.1ms", 1e-4),
                                           ("2s", 2.0), ("2 sec", 2.0), ("30ns", 30e-9),
                                           ("1e-6", 1e-6), ("0", 0.0)])
def test_durations(text, seconds):
    assert parse_duration(text, "alpha") == pytest.approx(seconds, rel=1e-15)


@pytest.mark.parametrize("text", ["1h", "-1ms", "1e999s", "", "fast", "nan"])
def test_bad_durations(text):
    with pytest.raises(InvalidParameterError, match=f"alpha={text!r} is invalid"):
        parse_duration(text, "alpha")


def test_scalar_converter():
    convert = scalar_converter("alpha")
    assert convert(np.float32(0.5)) == 0.5 and isinstance(convert(1), float)
    for bad, kind in (("x", ParameterTypeError), (None, ParameterTypeError),
                      ([1e-6], ParameterTypeError), (-1.0, InvalidParameterError)):
        with pytest.raises(kind, match="alpha="):
            convert(bad)
    assert scalar_converter("alpha", parse_duration)("5us") == pytest.approx(5e-6)


def test_broadcast_shape_names_the_parameters_and_shapes():
    assert broadcast_shape(n=8, bw=1e9) == ()
    assert broadcast_shape(n=[16, 32, 64], bw=[[1e9], [1e10]], utilization=0.5) == (2, 3)
    with pytest.raises(InvalidParameterError) as info:
        broadcast_shape(n=[1, 2], bw=[1e9, 2e9, 3e9])
    msg = str(info.value)
    assert info.value.parameter == "bw"
    assert msg.startswith("bw=[1000000000.0, 2000000000.0, 3000000000.0] is invalid")
    assert "shape (3,)" in msg and "n of shape (2,)" in msg
    with pytest.raises(InvalidParameterError, match=r"compression=.*n of shape \(2,\), bw of "
                                                    r"shape \(1,\)"):
        broadcast_shape(n=[1, 2], bw=[1e9], compression=[1, 2, 3])


def test_format_bandwidth_takes_arrays():
    assert sm.format_bandwidth(10e9) == "10 Gbit/s"
    assert isinstance(sm.format_bandwidth(np.float64(25e9)), str)
    out = sm.format_bandwidth([[1e9, 2.5e10], [4e11, 1.6e15]])
    assert isinstance(out, np.ndarray) and out.shape == (2, 2)
    assert out.tolist() == [["1 Gbit/s", "25 Gbit/s"], ["400 Gbit/s", "1.6 Pbit/s"]]
    assert sm.format_bandwidth(np.array([])).shape == (0,)
    assert sm.format_bandwidth(["10gbps", 1e6]).tolist() == ["10 Gbit/s", "1 Mbit/s"]
    assert sm.format_bandwidth(float("inf")) == "inf bit/s"
    with pytest.raises(ParameterTypeError, match="bits_per_second=None"):
        sm.format_bandwidth(None)
