"""A synthetic SDR front end: labelled bursts from the synthesizer, sent as native messages.

Each message carries its ground truth (`label`, `snr_db`) in the header, so the daemon can
count live accuracy. Bursts are synthesized in batches ahead of the send schedule (the
synthesizer runs ~2,000 bursts/s of 1,024 samples on one core); `pool` > 0 synthesizes that
many once and cycles through them, for load tests faster than the synthesizer.
Like a real front end it binds a PUB socket by default (the daemon SUB-connects); `push`
gives a lossless PUSH socket for a daemon in PULL mode.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np
import zmq

from rfclassify._exceptions import ConfigError
from rfclassify.dsp.channel import QUANT_CI8, QUANT_CI16, QUANT_FULL_SCALE
from rfclassify.dsp.synth import SNR_LIMIT_DB, ChannelConfig, synthesize
from rfclassify.labels import LABELS
from rfclassify.serve.control import open_socket
from rfclassify.serve.native import DTYPES, encode_native

PATTERNS = ("random", "cycle")
BATCH = 64


#: the dtypes simulate sends: float, or integers the channel's quantizer makes in that format
QUANT_FORMAT = {"cf32_le": None, "ci16_le": QUANT_CI16, "ci8": QUANT_CI8}


@dataclass(frozen=True)
class SimulateOptions:
    endpoint: str = "tcp://127.0.0.1:5555"
    bind: bool = True
    socket_type: str = "pub"                 # pub | push
    rate_bursts_per_s: float = 100.0         # 0: as fast as the socket takes them
    count: int = 0                           # 0: until stopped
    classes: tuple[str, ...] = LABELS
    snr_min_db: float = 0.0
    snr_max_db: float = 20.0
    length_min_samples: int = 256
    length_max_samples: int = 2048
    pattern: str = "random"                  # random | cycle (labels in turn)
    sample_rate_hz: float = 1e6
    center_freq_hz: float = 915e6
    stream: str = "sim0"
    dtype: str = "cf32_le"
    seed: int = 0
    warmup_s: float = 0.5                    # PUB: let subscribers connect before sending
    pool: int = 0                            # >0: synthesize this many once and cycle
    clean_channel: bool = False
    sndhwm: int = 100_000

    def __post_init__(self) -> None:
        if self.socket_type not in ("pub", "push"):
            raise ConfigError(f"socket type must be pub or push, got {self.socket_type!r}")
        if self.pattern not in PATTERNS:
            raise ConfigError(f"pattern must be one of {', '.join(PATTERNS)}, got {self.pattern!r}")
        if self.rate_bursts_per_s < 0 or self.count < 0 or self.pool < 0:
            raise ConfigError("rate, count and pool must be >= 0")
        if 0 < self.rate_bursts_per_s < 1e-3:   # a burst every 1e300 s overflowed time.sleep
            raise ConfigError(f"rate must be 0 (as fast as possible) or at least 0.001 bursts/s, "
                              f"got {self.rate_bursts_per_s:g}")
        if not self.sample_rate_hz > 0:   # every burst sent would be a bad_header reject
            raise ConfigError(f"sample rate must be > 0 Hz, got {self.sample_rate_hz:g}")
        if not 1 <= self.length_min_samples <= self.length_max_samples:
            raise ConfigError("need 1 <= length-min <= length-max")
        if self.snr_min_db > self.snr_max_db:
            raise ConfigError("need snr-min <= snr-max")
        if not (abs(self.snr_min_db) <= SNR_LIMIT_DB and abs(self.snr_max_db) <= SNR_LIMIT_DB):
            # past it the synthesizer refuses (before the sixty-seventh session: NaN bursts)
            raise ConfigError(f"snr-min and snr-max must lie in -{SNR_LIMIT_DB:g}..{SNR_LIMIT_DB:g} dB")
        if not self.classes:
            raise ConfigError("at least one class is needed")
        if self.dtype not in QUANT_FORMAT:
            raise ConfigError(f"dtype must be one of {', '.join(QUANT_FORMAT)}, got {self.dtype!r}")


class BurstSource:
    """Endless labelled bursts: (iq complex64, label, snr_db), synthesized BATCH at a time."""

    def __init__(self, opts: SimulateOptions) -> None:
        self.opts = opts
        self.rng = np.random.default_rng(opts.seed)
        channel = ChannelConfig.clean() if opts.clean_channel else ChannelConfig()
        quant = QUANT_FORMAT[opts.dtype]
        self._to_wire = np.float32(1.0)
        if quant is not None:
            # Integer samples: the quantizer's AGC puts each burst at -30..-5 dBFS rms on the
            # format's grid. The receiver gain (+-20 dB) left a fifth of the bursts clipped at
            # full scale by encode_native (before the sixty-seventh session).
            channel = dataclasses.replace(channel, p_quantization=1.0, p_ci8=float(quant == QUANT_CI8))
            # the quantizer writes k / 127 (k / 32767), the wire reads k / 128 (k / 32768):
            # rescaled, each of its codes is one integer on the wire, none rounded a second time
            self._to_wire = np.float32(QUANT_FULL_SCALE[quant] * DTYPES[opts.dtype][1])
        self.channel = channel
        self._turn = 0

    def batch(self, n: int) -> list[tuple[np.ndarray, str, float]]:
        o = self.opts
        if o.pattern == "cycle":
            labels = [o.classes[(self._turn + i) % len(o.classes)] for i in range(n)]
            self._turn += n
        else:
            labels = [o.classes[i] for i in self.rng.integers(0, len(o.classes), n)]
        snr = self.rng.uniform(o.snr_min_db, o.snr_max_db, n).astype(np.float32)
        lengths = self.rng.integers(o.length_min_samples, o.length_max_samples + 1, n)
        out: list[tuple[np.ndarray, str, float] | None] = [None] * n
        # one synthesizer call per power-of-two length class, cropped to each burst's length;
        # kept_samples makes the SNR exact over the samples sent (before the sixty-seventh
        # session it held over the group's longest length: off by up to 7 dB for AM-SSB-WC)
        groups = np.ceil(np.log2(np.maximum(lengths, 2))).astype(int)
        for g in np.unique(groups):
            idx = np.flatnonzero(groups == g)
            n_gen = int(lengths[idx].max())
            sb = synthesize([labels[i] for i in idx], n_gen, self.rng, snr_db=snr[idx], channel=self.channel,
                            kept_samples=lengths[idx])
            for row, i in enumerate(idx):
                out[i] = (sb.iq[row, : lengths[i]] * self._to_wire, labels[i], round(float(snr[i]), 2))
        return [x for x in out if x is not None]

    def __iter__(self) -> Iterator[tuple[np.ndarray, str, float]]:
        if self.opts.pool:
            pool = []
            while len(pool) < self.opts.pool:
                pool.extend(self.batch(min(BATCH * 4, self.opts.pool - len(pool))))
            while True:
                yield from pool
        while True:
            yield from self.batch(BATCH)


def _open(context: zmq.Context, opts: SimulateOptions) -> zmq.Socket:
    def setup(sock: zmq.Socket) -> None:
        sock.setsockopt(zmq.LINGER, 2000)
        sock.setsockopt(zmq.SNDHWM, opts.sndhwm)

    kind = zmq.PUB if opts.socket_type == "pub" else zmq.PUSH
    return open_socket(context, kind, "simulate", opts.endpoint, opts.bind, setup)


def run_simulator(opts: SimulateOptions, *, stop: threading.Event | None = None,
                  on_sent: Callable[[int, str, float, int], None] | None = None,
                  context: zmq.Context | None = None) -> int:
    """Send bursts on schedule until count is reached or stop is set; returns how many were sent.

    on_sent(burst_id, label, snr_db, n_samples) is called after each send."""
    ctx = context or zmq.Context.instance()
    stop = stop or threading.Event()
    sock = _open(ctx, opts)
    sent = 0
    try:
        if opts.socket_type == "pub" and opts.warmup_s > 0:
            stop.wait(opts.warmup_s)      # PUB drops messages sent before subscribers join
        # the first batch (or the whole pool) is synthesized before the clock starts, so the
        # schedule does not open with a catch-up burst
        source = iter(BurstSource(opts))
        first = next(source)
        t0 = time.monotonic()
        for iq, label, snr in itertools.chain([first], source):
            if stop.is_set() or (opts.count and sent >= opts.count):
                break
            if opts.rate_bursts_per_s > 0:
                delay = t0 + sent / opts.rate_bursts_per_s - time.monotonic()
                if delay > 0 and stop.wait(delay):
                    break
            header = {"sample_rate": opts.sample_rate_hz, "burst_id": sent, "stream": opts.stream,
                      "center_freq": opts.center_freq_hz, "time": time.time(), "label": label,
                      "snr_db": snr, "meta": {"source": "rfclassify-simulate"}}
            while True:
                try:
                    sock.send_multipart(encode_native(iq, header, opts.dtype), zmq.NOBLOCK)
                    break
                except zmq.Again:          # PUSH with a full pipe: wait for the daemon
                    if stop.wait(0.01):
                        return sent
            if on_sent is not None:
                on_sent(sent, label, snr, int(iq.shape[0]))
            sent += 1
    finally:
        sock.close()
    return sent
