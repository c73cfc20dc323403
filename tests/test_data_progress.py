"""rfclassify._progress: silent off a terminal except one summary line; a redrawn bar on one."""

from __future__ import annotations

import io

from rfclassify._progress import Progress


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_not_a_tty_prints_only_a_summary():
    buf = io.StringIO()
    with Progress(10, desc="gen", unit="bursts", stream=buf) as bar:
        for _ in range(10):
            bar.update(1)
        assert buf.getvalue() == ""
    lines = buf.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gen: 10/10 bursts in ") and "bursts/s" in lines[0]
    bar.close()  # idempotent
    assert len(buf.getvalue().splitlines()) == 1


def test_tty_redraws_one_line():
    buf = _Tty()
    bar = Progress(4, desc="x", stream=buf, min_interval_s=0.0)
    bar.update(2)
    assert "\r" in buf.getvalue() and "2/4" in buf.getvalue() and "#" in buf.getvalue()
    bar.update(2)
    bar.close()
    assert buf.getvalue().endswith("\n") and buf.getvalue().count("\n") == 1
    assert bar.count == 4 and bar.rate_per_s > 0
