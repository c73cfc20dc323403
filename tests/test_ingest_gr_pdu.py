"""GNU Radio PDU decoding (bytes made by our PMT serializer; tests/test_gnuradio_* use real GNU Radio)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rfclassify.serve.bursts import Burst, Reject, Truth
from rfclassify.serve.decoders import IngestConfig, make_decoder
from rfclassify.serve.pmt import Pair, serialize


def _pdu(meta, iq) -> bytes:
    return serialize(Pair(meta, iq))


def test_pdu_fields_and_samples() -> None:
    iq = (np.arange(300) * (0.01 + 0.02j)).astype(np.complex64)
    meta = {"burst_id": 9, "stream": "sdr0", "sample_rate": 2e6, "freq": 915e6,
            "rx_time": (100, 0.5), "label": "GMSK", "snr_db": 12.0, "packet_len": 300,
            "gain": complex(1, 2), "taps": np.ones(3, np.float32), "nan": float("nan")}
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6, stream="default"))
    (b,) = dec.decode([_pdu(meta, iq)], 7.0)
    assert isinstance(b, Burst)
    np.testing.assert_array_equal(b.iq, iq)
    assert (b.burst_id, b.stream, b.sample_rate_hz, b.center_freq_hz, b.time) == (9, "sdr0", 2e6, 915e6, 100.5)
    assert b.truth == Truth("GMSK", 12.0) and b.received_s == 7.0
    assert b.meta == {"packet_len": 300, "gain": [1.0, 2.0], "taps": [1.0, 1.0, 1.0], "nan": "nan"}
    json.dumps(b.meta, allow_nan=False)


def test_pdu_num_is_the_burst_id_when_there_is_none() -> None:
    # pdu.tags_to_pdu writes pdu_num (a uint64) and no burst_id
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6))
    iq = np.ones(100, np.complex64)
    (numbered,) = dec.decode([_pdu({"pdu_num": 2**63 + 5, "sample_rate": 1e6}, iq)], 0.0)
    (both,) = dec.decode([_pdu({"pdu_num": 3, "burst_id": "b7"}, iq)], 0.0)
    (bad,) = dec.decode([_pdu({"pdu_num": True}, iq)], 0.0)
    assert (numbered.burst_id, both.burst_id, bad.burst_id) == (2**63 + 5, "b7", None)


def test_metadata_keyed_by_a_long_list_or_a_vector_is_a_burst() -> None:
    # any PMT may be a dict key in GNU Radio; a long list's key failed the decoder (internal_error)
    from rfclassify.serve.pmt import pmt_list

    meta = b"".join([b"\x09", serialize(Pair(pmt_list(list(range(5000))), 1)),
                     b"\x09", serialize(Pair((np.ones(2, np.uint8),), 2)), b"\x09", serialize(Pair("burst_id", 4)), b"\x06"])
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6))
    (b,) = dec.decode([b"\x07" + meta + serialize(np.ones(100, np.complex64))], 0.0)
    assert isinstance(b, Burst) and b.burst_id == 4
    assert sorted(b.meta.values()) == [1, 2] and any(k.startswith("Pair(car=0, cdr=") for k in b.meta)


@pytest.mark.parametrize("rx_time", [float("inf"), float("nan"), (1e308, 1e308), (0, float("nan"))])
def test_a_time_that_is_not_a_finite_number_is_left_out(rx_time) -> None:
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6))
    (b,) = dec.decode([_pdu({"rx_time": rx_time, "burst_id": 1}, np.ones(100, np.complex64))], 0.0)
    assert isinstance(b, Burst) and b.time is None and b.burst_id == 1


def test_config_defaults_fill_missing_fields_and_nil_meta() -> None:
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=48e3, stream="s", center_freq_hz=1e8))
    (b,) = dec.decode([_pdu(None, np.ones(100, np.complex128))], 0.0)
    assert isinstance(b, Burst) and b.iq.dtype == np.complex64
    assert (b.sample_rate_hz, b.stream, b.center_freq_hz, b.burst_id, b.truth) == (48e3, "s", 1e8, None, None)


@pytest.mark.parametrize("frames,reason", [
    ([], "bad_frames"),
    ([b"a", b"b", b"c"], "bad_frames"),
    ([bytes.fromhex("0a0a" + "ffffffff" + "0100")], "bad_pmt"),
    ([b"\x99garbage"], "bad_pmt"),
    ([serialize(np.ones(4, np.complex64))], "bad_pdu"),
    ([serialize(Pair({"a": 1}, np.ones(4, np.float32)))], "bad_pdu"),
    ([serialize(Pair({"a": 1}, "text"))], "bad_pdu"),
    ([serialize(Pair(5, np.ones(4, np.complex64)))], "bad_pdu"),
    ([serialize(Pair({"burst_id": "x"}, np.ones(0, np.complex64)))], "empty_payload"),
])
def test_bad_pdus_reject_and_decoder_recovers(frames, reason) -> None:
    dec = make_decoder("gr-pdu")
    (r,) = dec.decode(frames, 0.0)
    assert isinstance(r, Reject) and r.reason == reason, r
    (ok,) = dec.decode([b"topic", _pdu({}, np.ones(64, np.complex64))], 0.0)
    assert isinstance(ok, Burst) and ok.n_samples == 64


def test_reject_names_burst_id_when_meta_parsed() -> None:
    (r,) = make_decoder("gr-pdu").decode([serialize(Pair({"burst_id": "b1", "stream": "z"}, 3))], 0.0)
    assert (r.reason, r.burst_id, r.stream) == ("bad_pdu", "b1", "z")


def test_too_large() -> None:
    dec = make_decoder("gr-pdu", IngestConfig(max_message_bytes=1024))
    (r,) = dec.decode([_pdu({}, np.ones(200, np.complex64))], 0.0)
    assert r.reason == "too_large"


@pytest.mark.parametrize("meta,rate,center", [
    ({"rx_rate": 2e6, "rx_freq": 915e6}, 2e6, 915e6),                 # what tagged_stream_to_pdu carries from UHD
    ({"rx_rate": 2_000_000, "rx_freq": 915_000_000}, 2e6, 915e6),     # integers too
    ({"sample_rate": 3e6, "rx_rate": 2e6, "freq": 1e9, "rx_freq": 915e6}, 3e6, 1e9),   # the older keys first
    ({"center_freq": 2e9, "freq": 1e9, "rx_freq": 915e6}, 1e6, 2e9),
    ({"rx_rate": -1.0, "rx_freq": float("nan")}, 1e6, 1e8),           # unusable: the config's, as for sample_rate
    ({"rx_rate": "fast", "rx_freq": "high"}, 1e6, 1e8),
])
def test_uhd_rx_rate_and_rx_freq_are_the_bursts_rate_and_frequency(meta, rate, center) -> None:
    """UHD tags rx_rate and rx_freq with rx_time, and pdu.tagged_stream_to_pdu carries them as
    metadata keys: they were echoed in meta and the burst took the config's rate and frequency."""
    dec = make_decoder("gr-pdu", IngestConfig(sample_rate_hz=1e6, center_freq_hz=1e8))
    (b,) = dec.decode([_pdu({**meta, "rx_time": (1700000000, 0.5)}, np.ones(100, np.complex64))], 0.0)
    assert isinstance(b, Burst) and (b.sample_rate_hz, b.center_freq_hz, b.time) == (rate, center, 1700000000.5)
    assert b.meta == {}   # fields, not echoed
