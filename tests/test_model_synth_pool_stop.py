"""The training data workers stop, and `rfclassify train` exits, however full their queues are.

The workers ignore SIGTERM (a SIGTERM to the process group must not kill them before the trainer
writes its checkpoint), so SynthPool.close could no longer end a worker with terminate(): a worker
stopped with a batch too large for the pipe still in its queue's buffer waited at its exit to
write it, and the trainer's exit waited for that worker for good."""
import os
import signal
import subprocess
import sys
import time

from rfclassify.model import training_data as td


def test_closing_the_pool_ends_workers_that_hold_batches_nobody_will_read():
    recipe = td.DataRecipe(buckets_samples=(4096,), batch_size=64)   # 2 MiB a batch: more than a pipe holds
    pool = td.SynthPool(recipe, seed=0, n_workers=2, queue_batches=1)
    try:
        assert pool.get(timeout=120) is not None
        deadline = time.monotonic() + 120
        while pool.qsize() < 1 and time.monotonic() < deadline:   # a worker has put its next batch
            time.sleep(0.1)
        assert pool.qsize() == 1
    finally:
        pool.close()
    # each ended on its own, not by the SIGKILL that close() keeps for a worker that would not
    assert [p.exitcode for p in pool._procs] == [0, 0]


def test_train_exits_after_its_run_with_data_workers(tmp_path):
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "rfclassify", "train", "--out", str(out), "--device", "cpu", "--steps", "2",
           "--batch-size", "64", "--buckets", "4096", "--val-per-bucket", "4", "--workers", "2", "--log-every", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        output, _ = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        output, _ = proc.communicate()
        raise AssertionError("rfclassify train did not exit after its run:\n" + output[-2000:])
    assert proc.returncode == 0, output[-2000:]
    assert "done:" in output and (out / "model.pt").is_file()
