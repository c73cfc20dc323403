"""The HDF5 schema: writer -> reader round trip, and clear errors for files that are not ours."""

from __future__ import annotations

import re

import h5py
import numpy as np
import pytest

from rfclassify._exceptions import ConfigError, InputError
from rfclassify.data import schema
from rfclassify.data.reader import DatasetReader
from rfclassify.dsp.synth import PARAM_DTYPE, synthesize
from rfclassify.dsp.windows import normalize_burst


def _attrs(**kw) -> schema.DatasetAttrs:
    base = dict(source="test", seed=7, generator="unit test", classes=("QPSK", "FM"),
                snr_grid_db=(0.0, 10.0), channel={"full": {"p_cfo": 0.9}}, lengths={"rule": "list"})
    base.update(kw)
    return schema.DatasetAttrs(**base)


@pytest.fixture()
def written(tmp_path):
    """A file with two synthesized groups of different lengths, and what went into it."""
    rng = np.random.default_rng(3)
    a = synthesize(["QPSK", "FM", "NOISE"], 100, rng, snr_db=np.array([0.0, 10.0, 5.0]))
    b = synthesize(["BPSK", "GMSK"], 300, rng, snr_db=np.array([20.0, -5.0]))
    path = tmp_path / "rt.h5"
    with schema.DatasetWriter(path, _attrs(), PARAM_DTYPE) as w:
        w.append(a.iq, a.label_index, a.snr_db, a.params)
        w.append(b.iq, b.label_index, b.snr_db, b.params, channel_index=0)
        assert not path.exists()  # only the .partial file until commit
        w.commit()
    return path, a, b


def test_round_trip_samples_labels_params(written):
    path, a, b = written
    with DatasetReader(path) as ds:
        assert len(ds) == 5
        assert ds.lengths.tolist() == [100, 100, 100, 300, 300]
        got = ds.read([0, 1, 2, 3, 4])
        for i in range(3):
            np.testing.assert_array_equal(got[i], a.iq[i])
        for i in range(2):
            np.testing.assert_array_equal(got[3 + i], b.iq[i])
        np.testing.assert_array_equal(ds.label_index, np.concatenate([a.label_index, b.label_index]))
        np.testing.assert_array_equal(ds.snr_db, np.concatenate([a.snr_db, b.snr_db]))
        params = ds.params
        assert params.dtype.names == PARAM_DTYPE.names
        for name in PARAM_DTYPE.names:
            np.testing.assert_array_equal(params[name], np.concatenate([a.params[name], b.params[name]]))
        assert list(ds.label_names) == ["QPSK", "FM", "NOISE", "BPSK", "GMSK"]
        assert ds.indices_for_labels(["GMSK", "QPSK", "OOK"]).tolist() == [0, 4]
        assert ds.attrs.seed == 7 and ds.attrs.classes == ("QPSK", "FM")
        assert ds.channel_names == ("full",)
        # out-of-order, repeated and negative indices come back in the order asked for
        got = ds.read([4, 1, 1, -1])
        np.testing.assert_array_equal(got[0], b.iq[1])
        np.testing.assert_array_equal(got[1], a.iq[1])
        np.testing.assert_array_equal(got[2], a.iq[1])
        np.testing.assert_array_equal(got[3], b.iq[1])


def test_samples_digest_is_the_sha256_of_the_samples_in_order_whatever_the_chunk(written, tmp_path):
    import hashlib

    path, a, b = written
    expected = hashlib.sha256(np.concatenate([a.iq.ravel(), b.iq.ravel()]).astype(np.complex64).tobytes()).hexdigest()
    with DatasetReader(path) as ds:
        assert ds.samples_sha256() == ds.samples_sha256(chunk=7) == expected
    other = tmp_path / "other.h5"     # one sample changed by a float32 rounding: another digest
    c = a.iq.copy()
    c[0, 0] = np.nextafter(c[0, 0].real, np.float32(np.inf)) + 1j * c[0, 0].imag
    with schema.DatasetWriter(other, _attrs(), PARAM_DTYPE) as w:
        w.append(c, a.label_index, a.snr_db, a.params)
        w.append(b.iq, b.label_index, b.snr_db, b.params, channel_index=0)
        w.commit()
    with DatasetReader(other) as ds:
        assert ds.samples_sha256() != expected


def test_in_memory_reader_matches(written):
    path, _, _ = written
    with DatasetReader(path) as ds, DatasetReader(path, in_memory=True) as mem:
        for x, y in zip(ds.read(range(5)), mem.read([0, 1, 2, 3, 4])):
            np.testing.assert_array_equal(x, y)
        # scattered indices (three separate runs: one HDF5 read of their union)
        scattered = [4, 0, 2, 2, 0]
        got = ds.read(scattered)
        for x, i in zip(got, scattered):
            np.testing.assert_array_equal(x, mem.read([i])[0])
            assert x.shape == (ds.lengths[i],)


def test_iter_batches_groups_equal_lengths_and_fits_to_length(written):
    path, a, b = written
    with DatasetReader(path) as ds:
        batches = list(ds.iter_batches(2))
        assert [x.iq.shape for x in batches] == [(2, 100), (1, 100), (2, 300)]
        seen = np.concatenate([x.indices for x in batches])
        assert sorted(seen.tolist()) == [0, 1, 2, 3, 4]
        fixed = list(ds.iter_batches(8, length_samples=128))
        assert len(fixed) == 1 and fixed[0].iq.shape == (5, 128)
        np.testing.assert_array_equal(fixed[0].iq[0, :100], a.iq[0])       # short: zero-padded
        assert not fixed[0].iq[0, 100:].any()
        np.testing.assert_array_equal(fixed[0].iq[3], b.iq[0, :128])       # long: first window
        norm = next(ds.iter_batches(8, length_samples=128, normalize=True))
        np.testing.assert_allclose(norm.iq[3], normalize_burst(b.iq[0])[:128], rtol=1e-5, atol=1e-6)
        rng_batches = list(ds.iter_batches(2, shuffle_rng=np.random.default_rng(0)))
        assert sorted(np.concatenate([x.indices for x in rng_batches]).tolist()) == [0, 1, 2, 3, 4]
        assert all(len(set(ds.lengths[x.indices])) == 1 for x in rng_batches)


def test_iter_batches_normalizes_like_serving_with_keep_dc(tmp_path):
    rng = np.random.default_rng(5)
    sb = synthesize(["QPSK", "FM", "AM-DSB-SC"], 300, rng, snr_db=np.array([10.0, 10.0, 10.0]))
    # a DC offset large enough that removing it or not is a big difference, one burst with no power
    iq = np.concatenate([sb.iq + np.array([[2 - 1j], [0.5j], [-3.0]], np.complex64),
                         np.zeros((1, 300), np.complex64)])
    path = tmp_path / "dc.h5"
    with schema.DatasetWriter(path, _attrs(), PARAM_DTYPE) as w:
        w.append(iq, np.zeros(4, np.int16), np.zeros(4), np.zeros(4, PARAM_DTYPE))
        w.commit()
    with DatasetReader(path) as ds:
        kept = next(ds.iter_batches(8, length_samples=256, normalize=True, normalization="keep_dc"))
        removed = next(ds.iter_batches(8, length_samples=256, normalize=True))
        whole = next(ds.iter_batches(8, normalize=True, normalization="keep_dc"))
        for i in range(3):
            np.testing.assert_allclose(kept.iq[i], normalize_burst(iq[i], "keep_dc")[:256], rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(whole.iq[i], normalize_burst(iq[i], "keep_dc"), rtol=1e-5, atol=1e-6)
            # normalized over the whole burst, then cropped: the crop keeps the burst's DC
            assert abs(kept.iq[i].mean() - removed.iq[i].mean()) > 0.3
        assert not kept.iq[3].any()  # cannot be normalized: left as is
        with pytest.raises(ConfigError, match="unknown normalization"):
            next(ds.iter_batches(8, normalize=True, normalization="dc"))


def test_a_burst_with_a_nan_is_all_nan_in_every_window_normalize_cuts(tmp_path):
    """Passed through as it was, a burst with one NaN came out of a crop that missed the NaN
    finite and at the file's scale (x1000 here): past training's check for NaN windows."""
    rng = np.random.default_rng(6)
    iq = 1000 * synthesize(["QPSK", "QPSK"], 1024, rng, snr_db=np.array([10.0, 10.0])).iq
    iq[0, 1000] = np.nan
    path = tmp_path / "nan.h5"
    with schema.DatasetWriter(path, _attrs(), PARAM_DTYPE) as w:
        w.append(iq, np.zeros(2, np.int16), np.zeros(2), np.zeros(2, PARAM_DTYPE))
        w.commit()
    with DatasetReader(path) as ds:
        first = next(ds.iter_batches(8, length_samples=128, normalize=True))   # samples 0..127
        assert np.isnan(first.iq[0]).all()
        np.testing.assert_allclose(first.iq[1], normalize_burst(iq[1])[:128], rtol=1e-5, atol=1e-6)
        raw = next(ds.iter_batches(8, length_samples=128))                       # not normalized: as it is
        np.testing.assert_array_equal(raw.iq[0], iq[0, :128])


def test_bucket_selection_follows_the_serving_rule(written):
    path, _, _ = written
    with DatasetReader(path) as ds:
        assert ds.buckets().tolist() == [128, 128, 128, 256, 256]  # 100 < 128 pads into 128
        assert ds.indices_for_bucket(256).tolist() == [3, 4]
        with pytest.raises(InputError):
            ds.indices_for_bucket(300)


def test_failed_writer_leaves_no_file(tmp_path):
    path = tmp_path / "x.h5"
    with pytest.raises(RuntimeError):
        with schema.DatasetWriter(path, _attrs(), PARAM_DTYPE) as w:
            w.append(np.zeros((1, 64), np.complex64), np.zeros(1, np.int16), np.zeros(1), np.zeros(1, PARAM_DTYPE))
            raise RuntimeError("boom")
    assert not path.exists() and not (tmp_path / "x.h5.partial").exists()


def test_writer_rejects_out_of_range_lengths(tmp_path):
    with schema.DatasetWriter(tmp_path / "x.h5", _attrs(), PARAM_DTYPE) as w:
        with pytest.raises(InputError, match="64..8192"):
            w.append(np.zeros((1, 63), np.complex64), np.zeros(1, np.int16), np.zeros(1), np.zeros(1, PARAM_DTYPE))


def test_not_ours_and_corrupt_files_raise_input_error(tmp_path, written):
    text = tmp_path / "text.h5"
    text.write_text("hello")
    with pytest.raises(InputError, match="not a readable HDF5"):
        DatasetReader(text)
    foreign = tmp_path / "foreign.h5"
    with h5py.File(foreign, "w") as f:
        f["data"] = np.zeros(3)
    with pytest.raises(InputError, match="not an rfclassify dataset"):
        DatasetReader(foreign)
    with pytest.raises(InputError, match="no such"):
        DatasetReader(tmp_path / "missing.h5")
    path, _, _ = written
    with h5py.File(path, "a") as f:
        del f[schema.LABEL_INDEX]
    with pytest.raises(InputError, match="missing label_index"):
        DatasetReader(path)


@pytest.mark.parametrize("key,value,message", [
    ("schema_version", "[]", "schema version None"),        # once: ValueError from int()
    ("labels", "[" * 3000, "corrupt dataset attributes"),     # once: RecursionError from json
])
def test_attributes_that_cannot_be_parsed_raise_input_error(written, key, value, message):
    path, _, _ = written
    with h5py.File(path, "a") as f:
        f.attrs[key] = value
    with pytest.raises(InputError, match=re.escape(message)):
        DatasetReader(path)


def _replace(f: h5py.File, name: str, data: np.ndarray) -> None:
    del f[name]
    f.create_dataset(name, data=data)


@pytest.mark.parametrize("name,make,message", [
    # numpy's ValueError out of astype, a traceback in classify, evaluate and inspect
    (schema.SNR_DB, lambda a: np.array([b"x"] * a.size), "/snr_db is not a list of numbers (dtype |S1"),
    (schema.SNR_DB, lambda a: np.zeros((a.size, 2)), "/snr_db is not a list of numbers (dtype float64, shape"),
    (schema.OFFSET, lambda a: a.astype(np.float64), "/offset is not a list of integers"),
    # 65536 + 3 read as int16 was label 3: a burst scored against another class's truth
    (schema.LABEL_INDEX, lambda a: np.r_[a.astype(np.int64)[:-1], 65536 + 3], "/label_index holds values past int16"),
    (schema.LENGTH, lambda a: np.r_[a[:-1], -5], "a negative burst length"),
])
def test_per_example_arrays_of_the_wrong_kind_raise_input_error(written, name, make, message):
    path, _, _ = written
    with h5py.File(path, "a") as f:
        _replace(f, name, make(f[name][()]))
    with pytest.raises(InputError, match=re.escape(message)):
        DatasetReader(path)


def test_a_writer_stopped_while_it_is_made_leaves_no_partial_file(tmp_path):
    """The partial file exists before the writer does: a Ctrl-C or SIGTERM (Terminated, a
    KeyboardInterrupt) while it was being made left it, since no `with` block had the writer
    yet (a clean-clone run caught `dataset import` leaving one on SIGTERM)."""
    class Interrupted:
        def to_hdf5(self):
            raise KeyboardInterrupt

    path = tmp_path / "out.h5"
    with pytest.raises(KeyboardInterrupt):
        schema.DatasetWriter(path, Interrupted(), PARAM_DTYPE)
    assert list(tmp_path.iterdir()) == []
