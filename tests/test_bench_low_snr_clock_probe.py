"""benchmarks/low_snr_clock_probe.py: the low-SNR rule misses fewer slow bursts at 4 dB than its
namesake on the same bursts, and the corrected band reaches the rate where the plain one does not."""

from __future__ import annotations

import json

from benchmark_modules import load_benchmark

probe = load_benchmark("low_snr_clock_probe")


def test_the_low_snr_rule_finds_rates_its_namesake_misses_on_the_same_bursts() -> None:
    misses = probe.rate_misses(["8PSK"], [4.0, 20.0], ["alphabet_fit_3", "alphabet_fit_3_low_snr"], 4, seed=3)
    assert misses["bursts"]["8PSK 4 dB"] == [4, 4, 4]
    slow_plain, slow_low = misses["alphabet_fit_3"]["8PSK 4 dB"][2], misses["alphabet_fit_3_low_snr"]["8PSK 4 dB"][2]
    assert slow_plain == 4 and slow_low <= 1
    assert misses["alphabet_fit_3"]["8PSK 20 dB"] == misses["alphabet_fit_3_low_snr"]["8PSK 20 dB"]


def test_the_band_table_and_the_json(tmp_path) -> None:
    bands = probe.band_estimates(["64QAM"], [4.0], 40, seed=3)["64QAM 4 dB"]
    assert bands["plain_within"] == 0.0 and bands["low_snr_within"] >= 0.9 and bands["bursts"] >= 10
    out = tmp_path / "probe.json"
    assert probe.main(["--quick", "--json", str(out)]) == 0
    rec = json.loads(out.read_text())
    assert set(rec["totals"]) == {"alphabet_fit_3", "alphabet_fit_3_low_snr"}
    assert rec["totals"]["alphabet_fit_3_low_snr"] < rec["totals"]["alphabet_fit_3"]
