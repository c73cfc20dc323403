"""The decoder interface: the factory, config validation, and reason codes that match the docs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rfclassify._exceptions import ConfigError
from rfclassify.serve.burst_cutter import CutterConfig
from rfclassify.serve.decoders import INPUT_FORMATS, REASONS, Decoder, IngestConfig, make_decoder

DOC = Path(__file__).resolve().parents[1] / "docs" / "ingest.md"


@pytest.mark.parametrize("fmt", INPUT_FORMATS)
def test_factory_gives_a_decoder_per_format(fmt: str) -> None:
    dec = make_decoder(fmt, IngestConfig())
    assert isinstance(dec, Decoder) and dec.input_format == fmt
    assert dec.flush(0.0) == [] and dec.poll_timeout(100.0) == [] and isinstance(dec.stats(), dict)


def test_unknown_format_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="gr-stream"):
        make_decoder("sigmf")


@pytest.mark.parametrize("kwargs,needle", [
    ({"max_message_bytes": 10}, "max_message_bytes"),
    ({"sample_rate_hz": -1.0}, "sample_rate_hz"),
    ({"sample_rate_hz": float("nan")}, "sample_rate_hz"),
    ({"cut_mode": "magic"}, "cut_mode"),
    ({"cut_mode": "tags", "tag_key": ""}, "tag_key"),
    ({"cut_mode": "start_end", "end_tag": ""}, "start_tag and end_tag"),
    ({"idle_flush_s": 0.0}, "idle_flush_s"),
])
def test_ingest_config_validation(kwargs, needle) -> None:
    with pytest.raises(ConfigError, match=needle):
        IngestConfig(**kwargs)


@pytest.mark.parametrize("kwargs", [
    {"block_samples": 0}, {"floor_percentile": 101}, {"epoch_blocks": 0},
    {"history_blocks": 8, "epoch_blocks": 16}, {"hangover_samples": -1},
    {"min_burst_samples": 10, "max_burst_samples": 5},
])
def test_cutter_config_validation(kwargs) -> None:
    with pytest.raises(ConfigError):
        CutterConfig(**kwargs)


def test_every_reason_code_is_documented_and_nothing_else() -> None:
    table = DOC.read_text().split("## Reject reason codes", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `([a-z_]+)` \|", table, flags=re.M))
    assert documented == set(REASONS)


def test_every_reason_code_used_in_ingest_code_is_listed() -> None:
    serve = Path(__file__).resolve().parents[1] / "rfclassify" / "serve"
    used = set()
    for name in ("native", "pmt", "gr_pdu", "gr_stream", "decoders", "burst_cutter"):
        used |= set(re.findall(r'(?:Reject|MessageError|_reject)\("([a-z_]+)"', (serve / f"{name}.py").read_text()))
    assert used and used <= set(REASONS), used - set(REASONS)
