"""benchmarks/compare_memory.py's markdown: sums, ratios and the count over 0.25x,
checked against hand-computed figures."""

from __future__ import annotations

from helpers import benchmark_script

MIB = 1 << 20


def test_the_table_sums_and_counts_the_cases_over_a_quarter():
    rows = [  # inputs + result: 100 MiB, then 400 MiB
        {"id": 1, "expr": "ab,bc->ac", "inputs": 80 * MIB, "result": 20 * MIB,
         "gpu_tc": 30 * MIB, "numpy": 100 * MIB, "pytblis": 4 * MIB, "gpu_tc_warm": 10 * MIB},
        {"id": 2, "expr": "abc,cd->abd", "inputs": 300 * MIB, "result": 100 * MIB,
         "gpu_tc": 20 * MIB, "numpy": None, "numpy_reason": "MemoryError",
         "pytblis": 8 * MIB, "gpu_tc_warm": 0},
    ]
    doc = {"dtype": "float64", "memory": rows, "host": "a host", "command": "cmd",
           "commit": "abc1234"}
    text = benchmark_script("compare_memory").memory_markdown(doc)
    lines = text.splitlines()
    assert "| numpy MiB | pytblis MiB |" in lines[6]
    assert "| 1 | `ab,bc->ac` | 100 | 30 | 0.30 | 10 | 0.10 | 100 | 4 |" in lines
    assert "| 2 | `abc,cd->abd` | 400 | 20 | 0.05 | 0 | 0.00 | failed | 8 |" in lines
    assert "| sum |  |  | 50 |  | 10 |  | 100 | 12 |" in lines
    assert "gpu_tc 1 of 2 in a fresh process, 0 warm." in text
    assert "fresh 0.50, warm 0.10." in text
    assert "Host: a host. Command: `cmd` (commit abc1234)." in text


def test_the_timing_table_gives_ratios_to_unbounded_and_their_geomean():
    rows = [
        {"id": 20, "expr": "fbea,ecfd->dcba", "error": 1e-15, "default_s": 2.1,
         "unbounded_s": 2.0, "limit_s": 4.0, "default_bytes": 128 * MIB,
         "unbounded_bytes": 410 * MIB, "limit_bytes": 15 * MIB, "default_reason": "r"},
        {"id": 21, "expr": "fbea,cedf->dcba", "error": 2e-15, "default_s": 0.9,
         "unbounded_s": 1.0, "limit_s": 1.0, "default_bytes": 64 * MIB,
         "unbounded_bytes": 410 * MIB, "limit_bytes": 16 * MIB, "default_reason": "r"},
    ]
    doc = {"dtype": "float64", "timing": rows, "host": "h", "command": "c", "commit": "x"}
    text = benchmark_script("compare_memory").timing_markdown(doc)
    assert ("| 20 | `fbea,ecfd->dcba` | 2.000 | 2.100 | 1.050 |  | 128.0 | 4.000 | 2.000 | "
            "15.0 | 1.0e-15 |") in text.splitlines()
    # geomeans: sqrt(1.05 * 0.9) = 0.972, sqrt(2 * 1) = 1.414; 1.05 counts as within 5%
    assert "geomean 0.972, 0.900-1.050, 2 of 2 cases within 5%." in text
    assert "Limit / unbounded: geomean 1.414, 1.000-2.000." in text


def test_the_timing_table_gives_the_median_of_paired_ratios_and_their_spread():
    """Rows with each repeat's default/unbounded ratio (newer runs) show their median
    and range, and the summary counts the cases whose paired median is within 5%."""
    rows = [
        {"id": 20, "expr": "fbea,ecfd->dcba", "error": 1e-15, "default_s": 2.1,
         "unbounded_s": 2.0, "limit_s": 4.0, "default_bytes": 128 * MIB,
         "limit_bytes": 15 * MIB, "paired": [1.10, 1.02, 0.98]},
        {"id": 21, "expr": "fbea,cedf->dcba", "error": 2e-15, "default_s": 1.0,
         "unbounded_s": 1.0, "limit_s": 1.0, "default_bytes": 64 * MIB,
         "limit_bytes": 16 * MIB, "paired": [1.08, 1.07, 1.06, 1.20]},
    ]
    doc = {"dtype": "float64", "timing": rows, "host": "h", "command": "c", "commit": "x"}
    text = benchmark_script("compare_memory").timing_markdown(doc)
    assert ("| 20 | `fbea,ecfd->dcba` | 2.000 | 2.100 | 1.050 | 1.020 (0.980-1.100) | 128.0 | "
            "4.000 | 2.000 | 15.0 | 1.0e-15 |") in text.splitlines()
    # paired medians 1.02 and 1.075: geomean sqrt(1.02 * 1.075) = 1.047, one within 5%
    assert "; paired 1.047, 1.020-1.075, 1 of 2 within 5%. Limit" in text
