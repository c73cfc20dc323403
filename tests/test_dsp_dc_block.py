"""The stream DC blocker: removes a receiver's constant offset, keeps a burst's own 0 Hz content."""

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.dsp.dc_block import DcBlocker


def _noise(n, seed=0, scale=0.01):
    rng = np.random.default_rng(seed)
    return (scale * (rng.standard_normal(n) + 1j * rng.standard_normal(n))).astype(np.complex64)


@pytest.mark.parametrize("cuts", [[1], [7, 1000, 1001], [4095, 4096, 4097, 9000], [20000]])
def test_the_output_does_not_depend_on_how_the_stream_is_chunked(cuts):
    x = _noise(30000, 1) + np.complex64(0.5 - 0.2j)
    x[12000:16000] += np.exp(2j * np.pi * 0.001 * np.arange(4000)).astype(np.complex64)
    whole = DcBlocker(4096).process(x)
    blocker = DcBlocker(4096)
    chunked = np.concatenate([blocker.process(c) for c in np.split(x, cuts)])
    np.testing.assert_array_equal(chunked, whole)
    assert whole.dtype == np.complex64 and whole.shape == x.shape


def test_a_constant_leak_is_removed_from_the_first_samples_on():
    leak = np.complex64(0.3 - 0.2j)
    blocker = DcBlocker(65536)
    y = blocker.process(_noise(200000) + leak)
    assert abs(y[100:1000].mean()) < 0.003       # no slow decay at the start
    assert abs(y[100000:].mean()) < 0.001
    assert abs(blocker.dc - leak) < 0.001


def test_a_bursts_own_carrier_is_kept_once_the_leak_is_learned():
    leak = np.complex64(0.3 - 0.2j)
    x = _noise(200000, 2) + leak
    carrier = np.complex64(1.0)                   # an AM-with-carrier-like burst at 0 Hz
    x[150000:154096] += carrier * (1 + 0.3 * np.cos(2 * np.pi * 0.01 * np.arange(4096))).astype(np.complex64)
    y = DcBlocker(65536).process(x)
    kept = y[150000:154096].mean()
    assert abs(kept - carrier) < 0.05 * abs(carrier)   # loses about 4096 / 65536 / 2 of it
    assert abs(y[140000:150000].mean()) < 0.003        # and the leak is gone around it


def test_a_burst_with_a_mean_of_its_own_leaves_no_offset_behind_it():
    """An OOK-like burst 30 dB over the noise: the estimate averaged it in and handed back a
    decaying offset after it (here about 4096 / 65536 of its mean, 25 dB over the noise), which
    the energy detector cut into spurious bursts; busy blocks now leave the estimate alone."""
    leak = np.complex64(0.05 + 0.02j)
    x = _noise(300_000, 4) + leak
    x[150_000:154_096] += np.complex64(0.3)            # mean 0.3; the noise's rms is 0.014
    blocker = DcBlocker(65536)
    y = blocker.process(x)
    assert abs(y[150_000:154_096].mean() - 0.3) < 0.003   # all of its own 0 Hz content kept
    assert abs(y[154_096:170_000].mean()) < 0.002          # and nothing after it
    assert abs(blocker.dc - leak) < 0.002


def test_a_lasting_change_of_the_leak_is_learned():
    x = _noise(600_000, 5) + np.complex64(0.05)
    x[200_000:] += np.complex64(0.2)                   # a retune: 0.25 from here on, 25 dB over the noise
    blocker = DcBlocker(65536)
    y = blocker.process(x)
    assert abs(y[-100_000:].mean()) < 0.003 and abs(blocker.dc - 0.25) < 0.003


def test_non_finite_samples_do_not_poison_the_estimate():
    x = _noise(20000, 3) + np.complex64(0.4)
    x[5000:5010] = np.nan
    x[6000] = np.inf
    blocker = DcBlocker(1024)
    y = blocker.process(x)
    assert np.isnan(y[5000:5010]).all() and not np.isfinite(y[6000])   # still garbage: rejected later
    assert np.isfinite(blocker.dc) and abs(blocker.dc - 0.4) < 0.01
    assert abs(y[10000:].mean()) < 0.003


def test_an_empty_chunk_is_fine_and_the_time_constant_is_checked():
    assert DcBlocker(10).process(np.zeros(0, np.complex64)).shape == (0,)
    with pytest.raises(ConfigError):
        DcBlocker(0)
