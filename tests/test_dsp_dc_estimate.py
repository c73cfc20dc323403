"""dc_estimate: estimate_offset is far closer to a receiver DC offset than the burst's mean,
near zero without one, nothing for a burst with no clock; leak_line_offset takes out a leak
and keeps a carrier."""

from __future__ import annotations

import numpy as np

from rfclassify.dsp import symbol_clock as sc
from rfclassify.dsp.dc_estimate import NO_OFFSET, estimate_offset, leak_line_offset
from rfclassify.dsp.synth import ChannelConfig, synthesize
from rfclassify.labels import HIGH_ORDER_LABELS


def test_the_estimate_finds_an_offset_the_mean_cannot_and_none_where_there_is_none():
    rng = np.random.default_rng(7)
    iq = synthesize(["64QAM", "16QAM", "32APSK", "256QAM"], 1024, rng, snr_db=np.full(4, 25.0),
                    channel=ChannelConfig(p_dc_offset=0.0, p_multipath=0.0)).iq.astype(np.complex128)
    x = iq[0]                                                    # 64QAM, 9.1 samples/symbol; no multipath, the rest on
    power = np.mean(np.abs(x) ** 2)
    offset = np.sqrt(power * 10 ** -1.5) * np.exp(1j)            # -15 dB of the signal
    def error_db(estimate):
        return 10 * np.log10(abs(estimate - offset) ** 2 / power)
    found, none = estimate_offset(x + offset, HIGH_ORDER_LABELS), estimate_offset(x, HIGH_ORDER_LABELS)
    assert error_db(found.offset) < -40                          # -50.8 here
    assert error_db((x + offset).mean()) > -25                   # the mean: -18.2 (the signal's own 0 Hz content)
    assert abs(none.offset) ** 2 / power < 1e-4                  # no offset: -51.5 dB
    # the fit's standard error tells the two apart: an offset stands many of them clear, none does not
    assert abs(found.offset) > 10 * found.stderr and abs(none.offset) < 4 * none.stderr
    assert estimate_offset(np.zeros(50, complex), HIGH_ORDER_LABELS) == NO_OFFSET     # no clock: nothing to take out


def test_the_leak_rule_takes_out_a_leak_and_keeps_a_carrier():
    clean = ChannelConfig(p_dc_offset=0.0, p_cfo=0.0, p_multipath=0.0, p_quantization=0.0)
    qam, ook = synthesize(["64QAM", "OOK"], 1024, np.random.default_rng(2), snr_db=np.full(2, 30.0),
                          channel=clean).iq.astype(np.complex128)               # 2.0 and 6.3 samples/symbol
    leak = 10 ** (-12 / 20) * np.sqrt(np.mean(np.abs(qam) ** 2))                   # -12 dB of the signal
    assert sc.zero_hz_line_ratio(qam + leak) > sc.DC_LINE_RATIO                    # 503 symbols: it stands out
    assert leak_line_offset(qam + leak) == (qam + leak).mean()
    # OOK at zero carrier offset holds its carrier at 0 Hz, -3 dB of its power: a carrier, kept
    assert sc.zero_hz_line_ratio(ook) > sc.DC_LINE_RATIO
    assert leak_line_offset(ook) == 0
    assert leak_line_offset(qam) == 0                                              # no line, nothing taken out
    assert leak_line_offset(np.zeros(0, complex)) == 0 and leak_line_offset(np.full(8, np.nan + 0j)) == 0
