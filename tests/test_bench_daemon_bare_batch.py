"""`bench daemon`'s bare baseline classifies batches of the size it is labelled with."""

from __future__ import annotations

import numpy as np
import pytest

from rfclassify.serve.bench_daemon import POOL, bare_throughput


class _Recorder:
    """Stands in for the Classifier: keeps each call's bursts."""

    def __init__(self) -> None:
        self.calls: list[list[np.ndarray]] = []

    def classify(self, bursts: list[np.ndarray]) -> None:
        self.calls.append(list(bursts))


@pytest.mark.parametrize("max_batch", [1, 64, POOL, POOL + 1, 1024, 4096])
def test_the_bare_loop_classifies_batches_of_max_batch_even_past_the_pool(max_batch):
    """With --max-batch 1024 it printed "batch 1024" but classified batches of the 256 bursts
    of its pool, so `max / bare` compared unlike batches."""
    bursts = [np.full(8, i, np.complex64) for i in range(POOL)]     # as _phases passes: POOL bursts
    clf = _Recorder()
    assert bare_throughput(clf, bursts, max_batch, 0.01) > 0
    assert len(clf.calls) >= 2                                       # the warm-up and at least one timed call
    assert {len(c) for c in clf.calls} == {max_batch}
    # the pool's bursts in turn, round again past its end
    order = [int(b[0].real) for c in clf.calls[1:] for b in c]
    assert order == [i % POOL for i in range(len(order))]
