"""Ctrl-C or SIGTERM while DatasetWriter's HDF5 writes run: HDF5 writes through a Python file
object (data/_partial_file.PartialFile), so a signal's handler ran inside its callbacks, and
the KeyboardInterrupt left HDF5 half closed: a segfault (exit 139), the partial file left, or a
file committed with a wrong /iq (a review of the seventy-first session: 4 of 63 timed SIGINTs)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# A real signal raised from inside the file object's write (the Nth call of os.pwrite there):
# its handler runs in that callback, as a Ctrl-C arriving mid-write does.
_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import numpy as np
    from rfclassify.data import _partial_file, schema

    calls, at, sig = [0], int(sys.argv[2]), getattr(signal, sys.argv[3])
    real_pwrite = os.pwrite

    def pwrite(fd, data, offset):
        calls[0] += 1
        if calls[0] == at:
            signal.raise_signal(sig)
        return real_pwrite(fd, data, offset)

    _partial_file.os.pwrite = pwrite
    if sig == signal.SIGTERM:
        from rfclassify._signals import Terminated
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(Terminated()))
    out = sys.argv[1]
    attrs = schema.DatasetAttrs(source="test", seed=7, generator="unit test", classes=("QPSK",),
                                snr_grid_db=(0.0,), channel={}, lengths={"rule": "list"})
    rng = np.random.default_rng(0)
    try:
        with schema.DatasetWriter(out, attrs, np.dtype([("sps", "<f4")]), compression="gzip") as w:
            for _ in range(4):
                iq = (rng.standard_normal((500, 1024)) + 1j * rng.standard_normal((500, 1024))).astype(np.complex64)
                w.append(iq, np.zeros(500, np.int16), np.zeros(500, np.float32), np.zeros(500, w._param_dtype))
            w.commit()
        print("committed", calls[0])
    except KeyboardInterrupt as exc:
        print("interrupted", type(exc).__name__, calls[0])
""")


@pytest.mark.parametrize("at, sig", [(3, "SIGINT"), (10, "SIGINT"), (20, "SIGINT"), (10, "SIGTERM")])
def test_an_interrupt_inside_an_hdf5_write_stops_the_writer_cleanly(tmp_path, at, sig):
    out = tmp_path / "d.h5"
    script = tmp_path / "write.py"
    script.write_text(_SCRIPT)
    root = Path(__file__).resolve().parent.parent     # this checkout's package, whatever is installed
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, str(script), str(out), str(at), sig], capture_output=True, text=True,
                          cwd=root, env=env, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr[-2000:])
    assert proc.stdout.startswith("interrupted"), proc.stdout
    assert not out.exists() and not out.with_name("d.h5.partial").exists()
    assert "Traceback" not in proc.stderr and "SystemError" not in proc.stderr, proc.stderr[-2000:]
