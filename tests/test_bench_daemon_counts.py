"""`bench daemon`'s rate phases: what the load generator sent, beside the rate it was asked
for (it reported the asked --rate as "offered": --rate 300000 printed "(300000/s offered)"
while the daemon received 17,698 in its second)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("zmq")


def test_a_rate_past_what_the_generator_can_send_reports_what_it_sent(tiny_model_dir, tmp_path, capsys):
    from rfclassify.cli import main
    from rfclassify.serve.bench_daemon import rate_text, sent_short

    out = tmp_path / "bench.json"
    assert main(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime", "--no-refiner",
                 "--seconds", "0.3", "--rate", "1e6", "--json", str(out)]) == 0
    fixed = json.loads(out.read_text())["phases"]["fixed"]
    assert fixed["offered_rate"] == 1e6 and fixed["sent"] > 0
    assert fixed["sent_rate_bursts_per_s"] == pytest.approx(fixed["sent"] / fixed["window_s"])
    # a million 8 KiB bursts a second (8 GB/s) from one Python process over loopback: not here
    assert fixed["sent_rate_bursts_per_s"] < 1e6 and sent_short(fixed)
    printed = capsys.readouterr().out
    assert f"(1000000/s asked, {rate_text(fixed['sent_rate_bursts_per_s'])}/s sent)" in printed
    assert f"dropped {fixed['dropped']} of {fixed['sent']} sent" in printed
    assert f"the load generator sent {rate_text(fixed['sent_rate_bursts_per_s'])} bursts/s of the 1000000 asked" \
        in printed


def test_the_max_phase_counts_what_it_sent_too(tiny_model_dir, tmp_path):
    from rfclassify.cli import main

    out = tmp_path / "bench.json"
    assert main(["bench", "daemon", "--model-dir", str(tiny_model_dir), "--backend", "onnxruntime", "--no-refiner",
                 "--seconds", "0.3", "--json", str(out)]) == 0
    phases = json.loads(out.read_text())["phases"]
    # at max the daemon's queue and the sockets' buffers hold thousands of bursts sent before the
    # window: in a short window the generator may send none (it waits on them)
    assert phases["max"]["offered_rate"] is None and phases["max"]["sent"] >= 0
    assert phases["half"]["sent"] > 0 and "sent_rate_bursts_per_s" in phases["half"]


def test_a_rate_under_one_burst_a_second_is_not_printed_as_zero():
    """`--rate 0.5` printed "(0/s offered)"."""
    from rfclassify.serve.bench_daemon import rate_text

    assert [rate_text(r) for r in (0.001, 0.5, 2.25, 99.4, 150.4, 300000)] == \
        ["0.001", "0.5", "2.25", "99.4", "150", "300000"]


def test_a_slow_rate_in_a_short_window_is_not_called_short_by_a_burst():
    from rfclassify.serve.bench_daemon import sent_short

    def phase(rate, sent, window_s=1.0):
        return {"offered_rate": rate, "sent": sent, "window_s": window_s}
    assert not sent_short(phase(None, 10))
    assert not sent_short(phase(0.5, 0)) and not sent_short(phase(2.0, 0))    # a burst or two: the window's edges
    assert not sent_short(phase(1000.0, 960)) and sent_short(phase(1000.0, 900))
    assert sent_short(phase(300000.0, 17698))
