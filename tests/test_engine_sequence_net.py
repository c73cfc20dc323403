"""The sequence network: the numpy forward pass serving runs is the torch network it was trained
as, it stores and loads back, it refuses weights that do not fit, and a short fit learns."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, ModelNotFoundError
from rfclassify.dsp.symbol_sequence import N_CHANNELS
from rfclassify.engine.sequence_net import SequenceNet


@pytest.mark.parametrize("gates", [False, True], ids=["plain", "gated"])
def test_the_numpy_network_is_the_torch_network_on_padded_batches(gates):
    """A batch of sequences of different lengths, zero-padded and masked as in training, gives
    each sequence what the numpy network gives it alone (batch norm folded, with non-trivial
    running statistics; the gates' means over the burst taken over its own symbols only)."""
    torch = pytest.importorskip("torch")
    from rfclassify.model.sequence_fit import SequenceFitConfig, make_torch_net, to_sequence_net

    cfg = SequenceFitConfig(bursts=100, width=16, blocks=2, kernel=5, gates=gates)
    torch.manual_seed(0)
    model = make_torch_net(cfg)
    with torch.no_grad():
        for blk in model.blocks:
            for norm in (blk[1], blk[3]):
                norm.running_mean.uniform_(-0.5, 0.5)
                norm.running_var.uniform_(0.5, 2.0)
                norm.weight.uniform_(0.5, 1.5)
                norm.bias.uniform_(-0.3, 0.3)
    model.eval()
    net = to_sequence_net(model, cfg.labels, {}, cfg)
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((N_CHANNELS, n)).astype(np.float32) for n in (1, 4, 37, 130)]
    x = np.zeros((len(seqs), N_CHANNELS, 130), np.float32)
    mask = np.zeros((len(seqs), 1, 130), np.float32)
    for i, s in enumerate(seqs):
        x[i, :, :s.shape[1]], mask[i, :, :s.shape[1]] = s, 1.0
    with torch.no_grad():
        want = torch.log_softmax(model(torch.from_numpy(x), torch.from_numpy(mask)), 1).numpy()
    got = np.stack([net.log_probs(s) for s in seqs])
    np.testing.assert_allclose(got, want, atol=2e-5)
    assert len(net.gates) == (2 if gates else 0)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)]
    folded_away = sum(m.weight.numel() + m.bias.numel() for m in norms)
    assert net.n_params == sum(p.numel() for p in model.parameters()) - folded_away


@pytest.mark.parametrize("gates", [False, True], ids=["plain", "gated"])
def test_a_stored_network_loads_back_and_bad_weights_are_refused(tmp_path, random_sequence_net, gates):
    labels = ("8PSK", "16QAM", "64QAM")
    net = random_sequence_net(labels, blocks=2, gates=gates)
    path = net.save(tmp_path / "seq.npz")
    back = SequenceNet.load(path)
    # exactly the name given (np.savez appended .npz to one without, fit-sequence then named
    # a file that was not there)
    assert net.save(tmp_path / "plain") == tmp_path / "plain" and not (tmp_path / "plain.npz").exists()
    assert SequenceNet.load(tmp_path / "plain").n_params == net.n_params
    seq = np.random.default_rng(2).standard_normal((N_CHANNELS, 50)).astype(np.float32)
    np.testing.assert_array_equal(back.log_probs(seq), net.log_probs(seq))
    assert back.labels == labels and back.info == {"made_by": "test"} and back.n_params == net.n_params
    assert len(back.gates) == len(net.gates) == (2 if gates else 0)
    assert np.exp(back.log_probs(seq)).sum() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(np.exp(back.uniform()), 1 / 3)

    with np.load(path) as z:
        arrays = dict(z)
    arrays["seq_block0_wa"] = arrays["seq_block0_wa"][:, :-1]       # one input channel short
    np.savez(tmp_path / "bad.npz", **arrays)
    with pytest.raises(ModelNotFoundError, match="do not fit together"):
        SequenceNet.load(tmp_path / "bad.npz")
    del arrays["seq_labels"]
    np.savez(tmp_path / "nolabels.npz", **arrays)
    with pytest.raises(ModelNotFoundError, match="cannot read"):
        SequenceNet.load(tmp_path / "nolabels.npz")
    with pytest.raises(ModelNotFoundError, match="fit-sequence"):
        SequenceNet.load(tmp_path / "absent.npz")
    with pytest.raises(ValueError, match="sequence is"):
        net.log_probs(np.zeros((N_CHANNELS - 1, 10), np.float32))
    if gates:   # a gate for one block of two
        with np.load(path) as z:
            arrays = {k: v for k, v in z.items() if not k.startswith("seq_gate1_")}
        np.savez(tmp_path / "onegate.npz", **arrays)
        with pytest.raises(ModelNotFoundError, match="do not fit together"):
            SequenceNet.load(tmp_path / "onegate.npz")


def test_a_short_fit_learns_two_classes_and_saves_what_serving_loads(tmp_path):
    """8PSK against 16QAM at 20..30 dB: 150 steps on the CPU separate them on fresh bursts; the
    file holds the numpy network and its report. A step limit, not a time budget, ends the
    run, so a loaded machine trains it as far as a free one."""
    pytest.importorskip("torch")
    from rfclassify.dsp.symbol_sequence import burst_sequence
    from rfclassify.dsp.synth import synthesize
    from rfclassify.model.sequence_fit import SequenceFitConfig, fit_sequence_net
    from rfclassify.model.training_data import DataRecipe

    cfg = SequenceFitConfig(bursts=600, train_s=600.0, max_steps=150, labels=("8PSK", "16QAM"), lengths=(1024,),
                            snr_range_db=(20.0, 30.0), crops=(32, 64), width=16, blocks=1, batch=64,
                            eval_per_length=60, eval_every=75, workers=0, chunk=100)
    out = tmp_path / "seq.npz"
    rep = fit_sequence_net(out, cfg)
    net = SequenceNet.load(out)
    assert net.labels == ("8PSK", "16QAM") and net.info["steps"] == rep["steps"] == 150
    assert rep["training_bursts"] > 500 and rep["history"][-1]["step"] == rep["steps"]
    assert rep["eval_accuracy_by_length"]["1024"] >= 0.8, rep["eval_accuracy_by_length"]
    rng = np.random.default_rng(99)
    labels = ["8PSK", "16QAM"] * 15
    batch = synthesize(labels, 1024, rng, 25.0, DataRecipe().channel_config())
    right = [net.labels[int(np.argmax(net.log_probs(s)))] == lab
             for s, lab in zip(map(burst_sequence, batch.iq), labels, strict=True) if s is not None]
    assert len(right) >= 25 and np.mean(right) >= 0.8, right


def test_a_streamed_fit_starts_before_its_data_is_made_and_takes_the_rest_as_it_comes(tmp_path):
    """start_bursts: training begins on the first chunks; the later ones join while it runs,
    and the report says how many there were at the start and at the end."""
    pytest.importorskip("torch")
    from rfclassify.model.sequence_fit import SequenceFitConfig, fit_sequence_net

    cfg = SequenceFitConfig(bursts=600, start_bursts=150, train_s=600.0, max_steps=150, labels=("8PSK", "16QAM"),
                            lengths=(1024,), snr_range_db=(20.0, 30.0), crops=(32, 64), width=16, blocks=1,
                            batch=64, eval_per_length=60, eval_every=75, workers=0, chunk=100)
    rep = fit_sequence_net(tmp_path / "seq.npz", cfg)
    assert 150 <= rep["bursts_at_start"] <= 200, rep["bursts_at_start"]
    assert rep["training_bursts"] > rep["bursts_at_start"]
    seen = [h["bursts"] for h in rep["history"]]
    assert seen == sorted(seen) and seen[-1] == rep["training_bursts"]
    assert rep["eval_accuracy_by_length"]["1024"] >= 0.8, rep["eval_accuracy_by_length"]


def test_fit_config_refuses_a_start_beyond_its_bursts():
    from rfclassify.model.sequence_fit import SequenceFitConfig

    with pytest.raises(ConfigError, match="start_bursts"):
        SequenceFitConfig(bursts=600, start_bursts=601)


def test_fit_sequence_refuses_a_set_larger_than_the_machine_before_making_any_data(tmp_path, monkeypatch):
    # 3e8 bursts of 256 symbols are over a terabyte: a one-line MemoryError naming the sizes
    # (the command prints it), before minutes of evaluation data, not torch's allocator error
    pytest.importorskip("torch")
    from rfclassify.model import sequence_fit

    def no_data(*args, **kwargs):
        raise AssertionError("made data for a set that cannot fit")

    monkeypatch.setattr(sequence_fit, "make_sequences", no_data)
    cfg = sequence_fit.SequenceFitConfig(bursts=300_000_000, chunk=1_000_000, device="cpu")
    with pytest.raises(MemoryError, match=r"300000000 bursts needs [\d.]+ GiB and this machine has"):
        sequence_fit.fit_sequence_net(tmp_path / "net.npz", cfg)
    assert not (tmp_path / "net.npz").exists()


def _older_and_newer(path: Path, field: str, unknown: str) -> tuple[Path, Path]:
    """Two copies of a network file beside it: one without the stored `field` (a file from
    before it was stored) and one with it set to `unknown` (a value from a later version)."""
    with np.load(path) as z:
        arrays = dict(z)
    del arrays[field]
    np.savez(path.with_name(f"{path.stem}_old.npz"), **arrays)
    arrays[field] = np.array(unknown)
    np.savez(path.with_name(f"{path.stem}_future.npz"), **arrays)
    return path.with_name(f"{path.stem}_old.npz"), path.with_name(f"{path.stem}_future.npz")


def test_a_network_of_the_equalized_front_keeps_its_front_and_reads_only_its_channels(tmp_path, random_sequence_net):
    """The front is stored with the weights: an equalized-front network loads back as one and
    refuses the clocked front's 21 channels; a file from before fronts loads as clocked; a
    front this version does not know is refused on load."""
    labels = ("8PSK", "16QAM", "64QAM")
    net = random_sequence_net(labels, front="equalized")
    back = SequenceNet.load(net.save(tmp_path / "eq.npz"))
    assert back.front == "equalized" and back.n_channels == N_CHANNELS + 3
    seq = np.random.default_rng(3).standard_normal((N_CHANNELS + 3, 40)).astype(np.float32)
    np.testing.assert_array_equal(back.log_probs(seq), net.log_probs(seq))
    with pytest.raises(ValueError, match="equalized front"):
        back.log_probs(seq[:N_CHANNELS])

    old, future = _older_and_newer(random_sequence_net(labels).save(tmp_path / "clocked.npz"), "seq_front",
                                   "fractional")
    assert SequenceNet.load(old).front == "clocked"
    with pytest.raises(ModelNotFoundError, match="unknown front 'fractional'"):
        SequenceNet.load(future)
    with np.load(tmp_path / "eq.npz") as z:
        arrays = dict(z)
    arrays["seq_front"] = np.array("clocked")      # 24-channel weights said to read 21 channels
    np.savez(tmp_path / "mislabelled.npz", **arrays)
    with pytest.raises(ModelNotFoundError, match="do not fit together"):
        SequenceNet.load(tmp_path / "mislabelled.npz")


def test_a_network_of_the_blind_front_reads_its_channels_and_takes_no_blind_view(tmp_path, random_sequence_net):
    """A blind-front network loads back as one and reads the clocked, filtered and moment
    channels; it already sees the filtered symbols, so a blind view of it is refused, and a
    refiner file that claims one does not load."""
    from dataclasses import replace

    net = random_sequence_net(("8PSK", "16QAM", "64QAM"), front="blind")
    back = SequenceNet.load(net.save(tmp_path / "blind.npz"))
    assert back.front == "blind" and back.n_channels == 2 * N_CHANNELS + 2
    seq = np.random.default_rng(5).standard_normal((back.n_channels, 30)).astype(np.float32)
    np.testing.assert_array_equal(back.log_probs(seq), net.log_probs(seq))
    with pytest.raises(ValueError, match="blind front"):
        back.log_probs(seq[:N_CHANNELS])
    with pytest.raises(ValueError, match="takes no blind view"):
        replace(back, blind_view=True)


def test_a_short_fit_of_the_equalized_front_stores_that_front_and_pass_and_the_refiner_feeds_it(tmp_path):
    """fit-sequence --front equalized --carrier fit: the network reads 24 channels and says so
    in its file, with its carrier pass; the refiner's statistics give it the equalized front
    of that pass (its log-probabilities differ from uniform and match the front made by hand)."""
    pytest.importorskip("torch")
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.sequence_fronts import burst_front_sequence
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics
    from rfclassify.dsp.symbol_clock import N_INVARIANTS
    from rfclassify.model.sequence_fit import SequenceFitConfig, fit_sequence_net

    cfg = SequenceFitConfig(bursts=120, train_s=2.0, labels=("8PSK", "16QAM"), lengths=(512,),
                            snr_range_db=(20.0, 30.0), crops=(32,), width=8, blocks=1, batch=32,
                            eval_per_length=20, eval_every=1000, workers=0, chunk=60, front="equalized",
                            carrier="fit")
    rep = fit_sequence_net(tmp_path / "eq.npz", cfg)
    net = SequenceNet.load(tmp_path / "eq.npz")
    assert net.front == "equalized" and net.n_channels == N_CHANNELS + 3 and rep["config"]["front"] == "equalized"
    assert net.carrier == "fit" and rep["config"]["carrier"] == "fit"
    iq = synthesize(["16QAM"], 1024, np.random.default_rng(8), 25.0, ChannelConfig.clean()).iq[0]
    stats = burst_statistics(iq, net)
    expected = net.log_probs(burst_front_sequence(iq, "equalized", net.labels, carrier="fit"))
    np.testing.assert_allclose(stats[N_INVARIANTS:], expected, rtol=1e-5, atol=1e-5)
    assert not np.allclose(expected, net.uniform())
    with pytest.raises(Exception, match="front"):
        SequenceFitConfig(front="fractional")


def test_a_network_keeps_the_rate_rule_of_its_training_clock(tmp_path, random_sequence_net):
    """The rate rule its bursts were clocked by is stored with the weights; a file from before
    rate rules loads as the strongest line's; a rule this version does not know is refused."""
    labels = ("8PSK", "16QAM", "64QAM")
    path = random_sequence_net(labels, rate_rule="alphabet_fit").save(tmp_path / "af.npz")
    assert SequenceNet.load(path).rate_rule == "alphabet_fit"
    old, future = _older_and_newer(path, "seq_rate_rule", "loudest_line")
    assert SequenceNet.load(old).rate_rule == "strongest_line"
    with pytest.raises(ModelNotFoundError, match="unknown rate rule 'loudest_line'"):
        SequenceNet.load(future)


def test_a_network_keeps_its_carrier_pass_and_the_refiner_clocks_its_symbols_by_it(tmp_path, random_sequence_net):
    """The second carrier pass its bursts had is stored with the weights (a file from before
    passes loads as the lines'; one this version does not know is refused), and the refiner's
    statistics give the network the symbols of that pass: a 16PSK burst, whose lines pass
    and fitted pass differ, gets the fitted pass's log-probabilities."""
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.sequence_fronts import burst_front_sequence
    from rfclassify.dsp.symbol_clock import N_INVARIANTS
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.refiner import burst_statistics

    labels = ("8PSK", "16PSK", "64QAM")
    net = SequenceNet.load(random_sequence_net(labels, seed=4, carrier="fit").save(tmp_path / "fit.npz"))
    assert net.carrier == "fit"
    old, future = _older_and_newer(tmp_path / "fit.npz", "seq_carrier", "pilot")
    assert SequenceNet.load(old).carrier == "lines"
    with pytest.raises(ModelNotFoundError, match="unknown carrier pass 'pilot'"):
        SequenceNet.load(future)
    iq = synthesize(["16PSK"], 1024, np.random.default_rng(3), 28.0, ChannelConfig.clean()).iq[0]
    fitted = net.log_probs(burst_front_sequence(iq, "clocked", labels, carrier="fit"))
    lines = net.log_probs(burst_front_sequence(iq, "clocked", labels, carrier="lines"))
    assert not np.allclose(fitted, lines, atol=1e-3)
    np.testing.assert_allclose(burst_statistics(iq, net)[N_INVARIANTS:], fitted, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(burst_statistics(iq, SequenceNet.load(old))[N_INVARIANTS:], lines, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="one core: BLAS has one thread anyway, nothing to limit")
def test_the_data_workers_run_one_blas_thread_each():
    """fit-sequence's data processes each get one BLAS thread: the workers are the
    parallelism, and the fitted carrier pass in 15 workers of 16 threads each made 67x fewer
    carriers a second than with one (eighteenth session, the H200 host)."""
    from threadpoolctl import threadpool_info

    from rfclassify.model.sequence_fit import data_pool

    assert max(pool["num_threads"] for pool in threadpool_info()) > 1      # here, unlimited
    with data_pool(2) as pool:
        infos = pool.map(_blas_info, range(2))
    assert all(pool["num_threads"] == 1 for info in infos for pool in info), infos


def _blas_info(_: int) -> list[dict]:
    from threadpoolctl import threadpool_info
    return threadpool_info()


def test_fit_sequence_refuses_an_unknown_rate_rule_or_carrier_pass():
    from rfclassify.model.sequence_fit import SequenceFitConfig

    with pytest.raises(ConfigError, match="rate_rule must be one of"):
        SequenceFitConfig(bursts=600, rate_rule="loudest_line")
    with pytest.raises(ConfigError, match="carrier must be one of lines, fit"):
        SequenceFitConfig(bursts=600, carrier="pilot")


def test_fit_sequence_refuses_a_negative_step_limit():
    from rfclassify.model.sequence_fit import SequenceFitConfig

    with pytest.raises(ConfigError, match="max_steps must be >= 0"):
        SequenceFitConfig(bursts=600, max_steps=-1)
    assert SequenceFitConfig(bursts=600).max_steps == 0     # the time budget alone, as before


def test_a_blind_reader_must_read_the_filtered_front_over_the_same_labels_of_a_network_with_a_blind_view(
        random_sequence_net):
    """SequenceNet.blind_reader: refused without the blind view, of another front, or over other
    labels; stored under its own prefix it loads back as it was."""
    labels = ("8PSK", "16QAM", "64QAM")
    net, reader = random_sequence_net(labels), random_sequence_net(labels, seed=1, front="filtered")
    from dataclasses import replace

    assert replace(net, blind_view=True, blind_reader=reader).blind_reader is reader
    with pytest.raises(ValueError, match="takes none"):
        replace(net, blind_reader=reader)
    with pytest.raises(ValueError, match="filtered front"):
        replace(net, blind_view=True, blind_reader=random_sequence_net(labels, seed=1))
    with pytest.raises(ValueError, match="same labels"):
        replace(net, blind_view=True, blind_reader=random_sequence_net(labels[:2], seed=1, front="filtered"))
    with pytest.raises(ValueError, match="carrier pass"):
        replace(net, blind_view=True, blind_reader=random_sequence_net(labels, seed=1, front="filtered",
                                                                       carrier="fit"))
    arrays = reader.arrays("other_")
    assert arrays and all(k.startswith("other_") for k in arrays)
    back = SequenceNet.from_arrays(arrays, "test", "other_")
    seq = np.random.default_rng(2).standard_normal((N_CHANNELS, 30)).astype(np.float32)
    assert back.front == "filtered"
    np.testing.assert_array_equal(back.log_probs(seq), reader.log_probs(seq))
    with pytest.raises(ModelNotFoundError, match="cannot read"):
        SequenceNet.from_arrays(arrays, "test")          # not under the default prefix


def test_fit_sequence_refuses_a_device_torch_cannot_use_before_making_any_data(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from rfclassify.model import sequence_fit

    monkeypatch.setattr(sequence_fit, "make_sequences", lambda *a, **k: pytest.fail("made data"))
    with pytest.raises(ConfigError, match="unknown device 'cuda:x'"):
        sequence_fit.fit_sequence_net(tmp_path / "net.npz", sequence_fit.SequenceFitConfig(device="cuda:x"))
