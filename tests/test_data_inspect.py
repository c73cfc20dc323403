"""`dataset inspect`: the coverage report counts what is in the file."""

from __future__ import annotations

from rfclassify.cli import main


def test_inspect_prints_coverage(tmp_path, capsys):
    out = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(out), "--classes", "QPSK,AM-DSB-WC", "--snr=-10,20",
                 "--per-cell", "3", "--lengths", "100,2048"]) == 0
    capsys.readouterr()
    assert main(["dataset", "inspect", str(out)]) == 0
    text = capsys.readouterr().out
    assert "examples: 12" in text
    lines = text.splitlines()
    snr_header = next(i for i, ln in enumerate(lines) if ln.startswith("class x SNR"))
    assert lines[snr_header + 1].split() == ["class", "-10", "20", "total"]
    assert lines[snr_header + 2].split() == ["QPSK", "3", "3", "6"]
    assert lines[snr_header + 3].split() == ["AM-DSB-WC", "3", "3", "6"]
    bucket_header = next(i for i, ln in enumerate(lines) if ln.startswith("class x length bucket"))
    assert lines[bucket_header + 1].split()[:7] == ["class", "128", "256", "512", "1024", "2048", "4096"]
    qpsk = lines[bucket_header + 2].split()
    assert qpsk[0] == "QPSK" and int(qpsk[1]) + int(qpsk[5]) == 6 and int(qpsk[1]) > 0 and int(qpsk[5]) > 0
    assert "rolloff" in text and "mod_index" in text


def test_inspect_of_a_foreign_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.h5"
    bad.write_bytes(b"\x00" * 100)
    assert main(["dataset", "inspect", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_inspect_draws_a_png_sheet(tmp_path, capsys):
    import pytest

    pytest.importorskip("matplotlib")
    out = tmp_path / "d.h5"
    assert main(["dataset", "generate", "--out", str(out), "--classes", "QPSK,FM", "--snr", "30",
                 "--per-cell", "2", "--lengths", "256", "--channel", "clean"]) == 0
    png = tmp_path / "sheet.png"
    assert main(["dataset", "inspect", str(out), "--png", str(png)]) == 0
    assert f"sheet: {png}" in capsys.readouterr().out
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
    # a name without a suffix is the file written (matplotlib appended .png, and the report
    # named a file that was not there); a directory is one line, exit 2 (a traceback before)
    assert main(["dataset", "inspect", str(out), "--png", str(tmp_path / "plain")]) == 0
    assert (tmp_path / "plain").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not (tmp_path / "plain.png").exists()
    # a suffix matplotlib has no writer for raised its ValueError; a PNG under that name now
    assert main(["dataset", "inspect", str(out), "--png", str(tmp_path / "sheet.bin")]) == 0
    assert (tmp_path / "sheet.bin").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert main(["dataset", "inspect", str(out), "--png", str(tmp_path / "sheet.svg")]) == 0
    assert b"<svg" in (tmp_path / "sheet.svg").read_bytes()[:1000]
    capsys.readouterr()
    with pytest.raises(SystemExit) as exc:      # found as the command line is read, before the work
        main(["dataset", "inspect", str(out), "--png", str(tmp_path)])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.endswith(f"error: argument --png: {tmp_path} is a directory; name a file\n")
