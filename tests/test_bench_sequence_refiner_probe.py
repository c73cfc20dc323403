"""The sequence probe's features (benchmarks/sequence_refiner_probe.py): the carrier-recovered
channels put a clean burst's symbols back on its constellation, and a burst the clock cannot
take gives no sequence."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np

from rfclassify.dsp.channel import ChannelConfig
from rfclassify.dsp.constellations import constellation
from rfclassify.dsp.synth import synthesize

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "sequence_refiner_probe.py"
_spec = importlib.util.spec_from_file_location("sequence_refiner_probe", _PATH)
srp = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = srp
_spec.loader.exec_module(srp)


def _mer_db(d: np.ndarray, alphabet: np.ndarray) -> float:
    """Modulation error ratio of unit-power points d against the alphabet, at the best of a
    fixed 0..90 degree rotation (the 4th-power line leaves a quarter-turn ambiguity)."""
    d = d / np.sqrt(np.mean(np.abs(d) ** 2))
    err = min(np.mean(np.min(np.abs(d[:, None] * np.exp(1j * a) - alphabet[None, :]) ** 2, axis=1))
              for a in np.linspace(0, np.pi / 2, 91))
    return float(-10 * np.log10(err))


def test_the_carrier_recovered_channels_sit_on_the_constellation():
    """Clean 16QAM at 30 dB with a carrier offset and phase: the whole-burst 4th-power channel
    is within a few dB of the genie clock's (about 30 dB); the refiner's symbols, with only
    the band-centroid carrier removed, still turn and are far off the grid."""
    from rfclassify.dsp import symbol_clock as sc

    alphabet = constellation("16QAM")
    alphabet = alphabet / np.sqrt(np.mean(np.abs(alphabet) ** 2))
    channel = ChannelConfig(p_cfo=1.0, p_phase=1.0, p_multipath=0.0, p_pa=0.0, p_phase_noise=0.0,
                            p_iq_imbalance=0.0, p_dc_offset=0.0, p_quantization=0.0, p_sro=0.0)
    batch = synthesize(["16QAM"] * 6, 1024, np.random.default_rng(4), 30.0, channel)
    recovered, raw = [], []
    for x in batch.iq:
        out = srp.clocked_sequence(x)
        assert out is not None
        seq, inv = out
        assert seq.shape[0] == srp.N_CHANNELS and seq.shape[1] >= 40 and inv[0] == 1.0
        recovered.append(_mer_db(seq[2] + 1j * seq[3], alphabet))      # 4th power, whole burst
        xc = sc.remove_dc_line(x)
        sps, timing, f0 = sc.blind_clock(xc)
        y = sc.symbols_at(xc * np.exp(-2j * np.pi * f0 * np.arange(xc.size)), sps, sc.BLIND_ROLLOFF, timing)
        raw.append(_mer_db(y, alphabet))
    assert np.median(recovered) > 22.0, recovered
    assert np.median(raw) < 15.0, raw  # about what points spread over the plane score


def test_a_burst_without_a_clock_gives_no_sequence_and_the_net_takes_any_length():
    assert srp.clocked_sequence(np.zeros(1024, np.complex64)) is None
    assert srp.clocked_sequence(np.ones(16, np.complex64)) is None
    assert srp.clocked_sequence(np.full(1024, np.nan, np.complex64)) is None
    model = srp.make_seqnet()
    rng = np.random.default_rng(0)
    seqs = [rng.standard_normal((srp.N_CHANNELS, n)).astype(np.float32) for n in (5, 64, 300)] + [None]
    lp = srp.log_probs(model, seqs)
    assert lp.shape == (4, 12) and np.allclose(np.exp(lp).sum(1), 1.0, atol=1e-5)
    assert np.allclose(lp[3], np.log(1 / 12))  # no sequence: uniform
