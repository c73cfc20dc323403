"""The energy cutter across a receiver dropout: a stretch of exact zeros (zero-filled) in the
noise, as it reaches the cutter (raw) or after the stream's DC blocker (a small constant).

The zeros went into the noise floor's history: with 10 % of it zeros, the floor fell to
floor_min and the ordinary noise after them was "on" until they left the history. A
50,000-sample dropout in a recording of six bursts gave a seventh "burst", 117,152 samples of
plain noise (`rfclassify classify`: unknown, -15.5 dB).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfclassify.dsp.dc_block import DcBlocker
from rfclassify.serve.burst_cutter import EnergyCutter
from rfclassify.serve.config import CutterConfig

PAD, BLOCK = 32, 32   # CutterConfig defaults
DC_BLOCK_SAMPLES = 65536   # gr-stream's and classify's DC blocker (dc_block_samples)


def _noise(rng: np.random.Generator, n: int, voltage: float = 0.01) -> np.ndarray:
    return (voltage * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(np.complex64)


def _recording(seed: int, n: int, bursts: list[int], length: int = 4096) -> np.ndarray:
    """Noise (-37 dB) with random-phase bursts of 0.09 power (about 27 dB above it) at bursts."""
    rng = np.random.default_rng(seed)
    x = _noise(rng, n)
    for start in bursts:
        x[start:start + length] += 0.3 * np.exp(2j * np.pi * rng.random(length)).astype(np.complex64)
    return x


def _cut(x: np.ndarray, dc: bool, seed: int = 0, config: CutterConfig = CutterConfig()) -> list[tuple[int, int]]:
    """(start, end) of the bursts cut from x in random chunks, through the DC blocker if dc."""
    rng, cutter = np.random.default_rng(seed), EnergyCutter(config)
    blocker = DcBlocker(DC_BLOCK_SAMPLES) if dc else None
    out, pos = [], 0
    while pos < x.shape[0]:
        chunk = x[pos:pos + int(rng.integers(1, 20000))]
        out += cutter.feed(blocker.process(chunk) if blocker else chunk)
        pos += chunk.shape[0]
    return [(s.start_sample, s.start_sample + s.n_samples) for s in out + cutter.flush()]


def _is_cut_of(cut: tuple[int, int], start: int, length: int) -> bool:
    a, b = cut
    return start - PAD - BLOCK < a <= start - PAD and start + length + PAD <= b < start + length + PAD + BLOCK


BURSTS = [100_000, 300_000, 700_000, 900_000]


@pytest.mark.parametrize("dc", [False, True], ids=["raw", "dc_blocked"])
@pytest.mark.parametrize("start,length", [
    (150_000, 50_000),     # in the noise between two bursts
    (30_000, 20_000),      # before the first burst
    (400_000, 250_000),    # longer than the floor's history (131,072 samples)
])
def test_a_zero_filled_dropout_in_the_noise_is_no_burst(dc: bool, start: int, length: int) -> None:
    x = _recording(1, 1_000_000, BURSTS)
    x[start:start + length] = 0
    cuts = _cut(x, dc)
    assert len(cuts) == len(BURSTS) and all(_is_cut_of(c, s, 4096) for c, s in zip(cuts, BURSTS)), cuts


@pytest.mark.parametrize("dc", [False, True], ids=["raw", "dc_blocked"])
def test_a_dropout_inside_a_burst_ends_it_and_the_rest_is_a_burst_of_its_own(dc: bool) -> None:
    """A dropout longer than hangover_samples inside a burst splits it at the dropout's edges
    (like the burst going quiet there); a shorter one leaves it whole, zeros inside."""
    x = _recording(2, 400_000, [])
    x[100_000:180_000] += 0.3 * np.exp(2j * np.pi * np.random.default_rng(3).random(80_000)).astype(np.complex64)
    x[120_000:150_000] = 0        # 30,000 samples: the floor fell to floor_min behind it
    x[170_000:170_100] = 0        # 100 samples, under the hangover (256)
    cuts = _cut(x, dc)
    assert len(cuts) == 2, cuts
    assert _is_cut_of(cuts[0], 100_000, 20_000) and _is_cut_of(cuts[1], 150_000, 30_000)


def test_after_a_dropout_the_floor_follows_a_receiver_that_came_back_quieter() -> None:
    """The floor keeps its level across a dropout, and still learns a real change: noise 30 dB
    quieter after it is measured as usual (it varies as noise does), not taken for a dropout."""
    rng = np.random.default_rng(4)
    loud, quiet = _noise(rng, 200_000), _noise(rng, 400_000, voltage=0.0003)
    quiet[300_000:303_000] += 0.003 * np.exp(2j * np.pi * rng.random(3000)).astype(np.complex64)  # 20 dB up
    loud[50_000:53_000] += 0.3 * np.exp(2j * np.pi * rng.random(3000)).astype(np.complex64)
    x = np.concatenate([loud, np.zeros(60_000, np.complex64), quiet])
    cuts = _cut(x, dc=False)
    assert len(cuts) == 2 and _is_cut_of(cuts[0], 50_000, 3000) and _is_cut_of(cuts[1], 560_000, 3000), cuts


def test_classify_a_raw_recording_with_a_dropout_finds_only_its_bursts(tiny_model_dir, tmp_path, capsys) -> None:
    """`rfclassify classify --raw`: the DC blocker and the energy cutter as a user runs them."""
    from rfclassify.cli import main

    x = _recording(5, 1_500_000, [200_000, 700_000, 1_200_000])
    x[500_000:550_000] = 0
    path = tmp_path / "dropout.cf32"
    x.tofile(path)
    assert main(["classify", str(path), "--raw", "cf32_le", "--sample-rate", "1e6", "--json", "--device", "cpu",
                 "--model-dir", str(tiny_model_dir)]) == 0
    records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["start_sample"], r["n_samples"]) for r in records] == [(s - PAD, 4096 + 2 * PAD)
                                                                      for s in (200_000, 700_000, 1_200_000)]
