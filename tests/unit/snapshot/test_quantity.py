import pytest

from diag.core.errors import ParseError
from diag.snapshot.quantity import gpu_count, mig_counts, mig_total, parse_quantity


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2", 2.0),
        ("500m", 0.5),
        ("100m", 0.1),
        ("16Gi", 16 * 2**30),
        ("50Mi", 50 * 2**20),
        ("5Gi", 5 * 2**30),
        ("1k", 1000.0),
        ("1.5G", 1.5e9),
        ("1e3", 1000.0),
        ("12E-1", 1.2),
        ("250u", 0.00025),
        (" 8 ", 8.0),
        (4, 4.0),
    ],
)
def test_quantities(text, expected):
    assert parse_quantity(text) == pytest.approx(expected)


@pytest.mark.parametrize("bad", ["", "Gi", "5 Gi", "16GB", "1.2.3", "abc", None, True, [1]])
def test_bad_quantities_are_parse_errors(bad):
    with pytest.raises(ParseError) as err:
        parse_quantity(bad)
    assert "\n" not in str(err.value)


def test_gpu_count_reads_limits_then_requests():
    assert gpu_count({"cpu": "3", "memory": "5Gi", "nvidia.com/gpu": "5"}) == 5
    assert gpu_count({}, {"nvidia.com/gpu": "2"}) == 2
    assert gpu_count({"nvidia.com/gpu": "1"}, {"nvidia.com/gpu": "1"}) == 1
    assert gpu_count({"cpu": "500m"}, {"memory": "2Gi"}) == 0


def test_gpu_count_rejects_fractions():
    with pytest.raises(ParseError, match="whole number"):
        gpu_count({"nvidia.com/gpu": "500m"})


def test_mig_profiles_are_counted_and_summed():
    limits = {"nvidia.com/mig-1g.10gb": "2", "nvidia.com/mig-3g.40gb": "1", "cpu": "4"}
    assert mig_counts(limits) == {"nvidia.com/mig-1g.10gb": 2, "nvidia.com/mig-3g.40gb": 1}
    assert mig_total(limits) == 3
    assert mig_total({}, {"nvidia.com/mig-2g.20gb": "1"}) == 1
    assert mig_total({"nvidia.com/gpu": "1"}) == 0


@pytest.mark.parametrize("value", ["1e400", "1e999999", "9" * 400, 1e308 * 10])
def test_a_quantity_out_of_range_is_a_parse_error(value: str | float) -> None:
    """Found by reading: "1e400" raised OverflowError out of the parser (10.0 ** 400)."""
    with pytest.raises(ParseError, match="out of range"):
        parse_quantity(value)
