"""The process's BLAS threads (rfclassify._cpus): one thread for the refiners' numpy work; the
refiner worker processes the cores allow."""

from __future__ import annotations

import importlib
import threading

import numpy as np
import pytest
from threadpoolctl import threadpool_info, threadpool_limits

from rfclassify._cpus import auto_refiner_workers, one_blas_thread, refiner_worker_count


def blas_threads() -> list[int]:
    """The thread counts of the loaded BLAS libraries, each once."""
    return sorted({d["num_threads"] for d in threadpool_info() if d["user_api"] == "blas"})


@pytest.fixture
def two_blas_threads():
    """BLAS at two threads for the test (a one-core box runs the limit's test with nothing to limit)."""
    importlib.import_module("scipy.linalg")     # its own BLAS, loaded as the refiners load it
    with threadpool_limits(2, user_api="blas"):
        if blas_threads() != [2]:
            pytest.skip(f"this machine's BLAS will not run two threads (it runs {blas_threads()})")
        yield


def test_one_blas_thread_holds_for_the_block_and_nested_blocks_and_is_lifted_after(two_blas_threads):
    with one_blas_thread():
        assert blas_threads() == [1]
        with one_blas_thread():
            assert blas_threads() == [1]
        assert blas_threads() == [1]    # the inner block leaving does not lift the outer's limit
    assert blas_threads() == [2]


def test_blocks_overlapping_in_two_threads_lift_the_limit_when_the_last_one_leaves(two_blas_threads):
    inside, leave = threading.Event(), threading.Event()
    seen: list[list[int]] = []

    def other() -> None:
        with one_blas_thread():
            inside.set()
            leave.wait(10)
            seen.append(blas_threads())

    worker = threading.Thread(target=other)
    with one_blas_thread():
        worker.start()
        assert inside.wait(10)
    assert blas_threads() == [1]        # this thread left first; the other is still inside
    leave.set()
    worker.join(10)
    assert seen == [[1]] and blas_threads() == [2]


def test_a_thread_other_than_the_one_that_last_set_the_pool_sets_and_lifts_the_limit(two_blas_threads):
    """As the daemon's inference thread does, while the main thread's own limit (the fixture's)
    is in force: threadpoolctl alone would ignore the second thread."""
    seen: list[list[int]] = []

    def inference() -> None:
        with one_blas_thread():
            seen.append(blas_threads())
        seen.append(blas_threads())

    worker = threading.Thread(target=inference)
    worker.start()
    worker.join(10)
    assert seen == [[1], [2]] and blas_threads() == [2]


def test_the_classifier_runs_its_dc_pass_and_refiners_on_one_blas_thread(two_blas_threads, monkeypatch):
    """The shipped model's refiners, observed where the Classifier calls them; the caller's BLAS
    threads are as they were once classify returns."""
    import rfclassify.engine.dc_pass as dc_pass
    import rfclassify.engine.refiner as refiner_module
    from rfclassify.dsp.channel import ChannelConfig
    from rfclassify.dsp.synth import synthesize
    from rfclassify.engine.classifier import Classifier

    seen: dict[str, list[list[int]]] = {"dc pass": [], "refiners": []}

    def observed(name: str, real):
        def call(*args, **kwargs):
            seen[name].append(blas_threads())
            return real(*args, **kwargs)
        return call

    monkeypatch.setattr(dc_pass, "offsets_to_remove", observed("dc pass", dc_pass.offsets_to_remove))
    monkeypatch.setattr(refiner_module, "refine_routed", observed("refiners", refiner_module.refine_routed))
    bursts = list(synthesize(["64QAM", "QPSK"], 1024, np.random.default_rng(4), 20.0, ChannelConfig()).iq)
    with Classifier.load(backend="onnxruntime") as clf:
        results = clf.classify(bursts)
    assert seen == {"dc pass": [[1]], "refiners": [[1]]}
    assert all(r.ok for r in results) and blas_threads() == [2]


def test_auto_refiner_workers_leave_two_cores_start_two_at_least_and_none_on_one_core():
    counts = [auto_refiner_workers(cpus) for cpus in (1, 2, 3, 4, 5, 8, 12, 16, 18, 64)]
    assert counts == [0, 2, 2, 2, 3, 6, 10, 14, 16, 16]


def test_a_refiner_workers_setting_of_minus_one_is_auto_and_others_are_themselves():
    assert refiner_worker_count(-1, cpus=12) == 10 and refiner_worker_count(-1, cpus=1) == 0
    assert refiner_worker_count(0, cpus=12) == 0 and refiner_worker_count(3, cpus=2) == 3
    with pytest.raises(ValueError, match=r"-1 \(auto\) or 0..256, got -2"):
        refiner_worker_count(-2)
    with pytest.raises(ValueError, match=r"-1 \(auto\) or 0..256, got 1000000000000000000000000000000"):
        refiner_worker_count(10 ** 30)


X86_CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
flags\t\t: fpu vme sse4_1 sse4_2 avx avx2 fma

processor\t: 1
model name\t: Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz
flags\t\t: fpu avx512_vnni
"""

ORIN_CPUINFO = """processor\t: 0
BogoMIPS\t: 62.50
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp cpuid asimdrdm lrcpc dcpop asimddp uscat
CPU implementer\t: 0x41
CPU architecture: 8
CPU part\t: 0xd42
"""


def test_cpu_description_names_the_cpu_and_its_int8_features():
    from rfclassify._cpus import cpu_description

    # the first processor's entry only: a later one's flags are not this CPU's (they repeat it)
    assert cpu_description(X86_CPUINFO) == {"model": "Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz",
                                            "int8_features": ["avx2"]}
    orin = cpu_description(ORIN_CPUINFO)
    assert orin["int8_features"] == ["asimddp"]
    assert "part 0xd42" in orin["model"] and "implementer 0x41" in orin["model"]
    unknown = cpu_description("")
    assert unknown["int8_features"] is None and unknown["model"]


def test_bench_reports_the_cpu():
    from rfclassify.engine.bench import machine_info

    info = machine_info({"cpu"})
    assert set(info["cpu"]) == {"model", "int8_features"} and info["cpu"]["model"]
