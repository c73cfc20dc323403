"""`rfclassify bench`'s table: the call count of each row, and percentiles over too few calls marked."""

from __future__ import annotations

from rfclassify.engine.bench import TABLE_HEADER, few_calls_note, format_row


def _row(calls: int) -> dict:
    lat = {"median": 1.0, "p90": 2.0, "p99": 3.0, "mean": 1.5}
    return {"backend": "onnxruntime", "precision": "fp32", "device": "cpu", "bucket": 1024, "batch": 1,
            "calls": calls, "latency_ms": lat, "throughput_windows_per_s": 1000.0,
            "baseline": {"calls": calls, "latency_ms": lat, "throughput_windows_per_s": 500.0},
            "speedup_latency": 2.0, "speedup_throughput": 2.0}


def test_a_p99_over_five_calls_is_marked_and_the_count_shown():
    """It printed a p99 over as few as 5 calls (MIN_CALLS), the slowest of them, unmarked."""
    assert "calls" in TABLE_HEADER.split()
    few, some, many = format_row(_row(5)), format_row(_row(50)), format_row(_row(500))
    assert " 5 " in few and "2.000*" in few and "3.000*" in few
    assert "2.000*" not in some and "3.000*" in some
    assert "*" not in many and " 500 " in many
    assert len(TABLE_HEADER) == len(few) == len(many)          # the columns line up
    assert few_calls_note([_row(500)]) is None
    assert "p99 under 100" in few_calls_note([_row(500), _row(50)])
