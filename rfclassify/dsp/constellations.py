"""Symbol alphabets of the linear modulations, each scaled to unit average energy.

ASK is unipolar (levels 0..M-1, as on-off keying generalizes) and PAM4 bipolar
(-3, -1, 1, 3): with the same level count they would otherwise be the same signal.
APSK follows DVB-S2 / S2X ring layouts; the 16/32APSK ring ratios are drawn per burst from
the DVB-S2 code-rate table (a receiver sees whichever code rate the link uses).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np

#: DVB-S2 ring ratios (r2/r1) of 16APSK 4+12 over the code rates 2/3 .. 9/10.
APSK16_RATIOS = (3.15, 2.85, 2.75, 2.70, 2.60, 2.57)
#: DVB-S2 ring ratios (r2/r1, r3/r1) of 32APSK 4+12+16 over the code rates 3/4 .. 9/10.
APSK32_RATIOS = ((2.84, 5.27), (2.72, 4.87), (2.64, 4.64), (2.54, 4.33), (2.53, 4.30))
#: DVB-S2X 64APSK 4+12+20+28 (rate 128/180) and 128APSK 16+16+16+16+16+48 (rate 135/180).
APSK64 = ((4, 12, 20, 28), (1.0, 2.4, 4.3, 7.0))
APSK128 = ((16, 16, 16, 16, 16, 48), (1.0, 1.715, 2.118, 2.681, 2.75, 3.87))


def _unit(points: np.ndarray) -> np.ndarray:
    points = np.asarray(points, dtype=np.complex128)
    return (points / np.sqrt(np.mean(np.abs(points) ** 2))).astype(np.complex64)


def _psk(m: int, offset: float = 0.0) -> np.ndarray:
    return np.exp(1j * (2 * np.pi * np.arange(m) / m + offset))


def _square_qam(side: int) -> np.ndarray:
    lv = np.arange(-(side - 1), side, 2, dtype=np.float64)
    return (lv[:, None] + 1j * lv[None, :]).ravel()


def _cross_qam(m: int) -> np.ndarray:
    # 32-cross: 6x6 minus the corner point of each quadrant; 128-cross: 12x12 minus 2x2 corners.
    side, cut = {32: (6, 1), 128: (12, 2)}[m]
    pts = _square_qam(side)
    lim = side - 1 - 2 * cut  # largest |level| kept on both axes at once
    keep = ~((np.abs(pts.real) > lim) & (np.abs(pts.imag) > lim))
    out = pts[keep]
    assert out.size == m
    return out


def apsk(counts: tuple[int, ...], radii: tuple[float, ...]) -> np.ndarray:
    """Concentric PSK rings, ring i with counts[i] points at radius radii[i], phases interleaved."""
    rings = [r * _psk(n, np.pi / n) for n, r in zip(counts, radii, strict=True)]
    return _unit(np.concatenate(rings))


@lru_cache(maxsize=None)
def constellation(label: str) -> np.ndarray:
    """Unit-energy alphabet of a fixed-layout linear label (APSK16/32 need apsk())."""
    if label == "OOK":
        return _unit([0.0, 1.0])
    if label in ("4ASK", "8ASK"):
        return _unit(np.arange(int(label[0]), dtype=np.float64))
    if label == "PAM4":
        return _unit([-3.0, -1.0, 1.0, 3.0])
    if label == "BPSK":
        return _unit(_psk(2))
    if label in ("QPSK", "OQPSK"):
        return _unit(_psk(4, np.pi / 4))
    if label.endswith("PSK") and label[:-3].isdigit():
        return _unit(_psk(int(label[:-3])))
    if label.endswith("QAM"):
        m = int(label[:-3])
        return _unit(_cross_qam(m) if m in (32, 128) else _square_qam(int(round(np.sqrt(m)))))
    if label == "64APSK":
        return apsk(*APSK64)
    if label == "128APSK":
        return apsk(*APSK128)
    raise KeyError(label)
