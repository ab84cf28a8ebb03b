"""Nothing overwritten or mixed without being asked (docs/capture.md): ``Capture`` refuses a folder
holding a capture unless ``overwrite=True``; ``opconform export`` refuses a non-empty folder unless
``--overwrite`` (which removes the old cases), refuses an export whose estimated size passes
``--max-bytes`` before writing anything, and shows its progress on stderr."""

from __future__ import annotations

import io
import json

import pytest
import torch

from opconform import cli
from opconform.capture import Capture, read_index
from opconform.capture.export import export_cases
from opconform.commands import export as export_command


def _main(argv):
    try:
        return cli.main(argv)
    except SystemExit as exc:
        return exc.code


def _record(folder, op, calls, **options):
    with Capture(folder, shard_bytes=1, **options) as cap:  # one shard per call
        f = cap.wrap(lambda x: x * 2, op, lambda x: {"x": x}, name=op)
        for _ in range(calls):
            f(torch.randn(2, 4))


def _ops(folder) -> list[str]:
    return [json.loads((case / "case.json").read_text())["op"] for case in sorted(folder.iterdir())]


def test_capture_refuses_a_folder_holding_a_capture_unless_overwrite(tmp_path):
    """A second capture into the folder is one line naming it, and the first is intact."""
    _record(tmp_path, "new_gelu", calls=3)
    with pytest.raises(ValueError, match=f"out: {tmp_path} already holds a capture") as refused:
        Capture(tmp_path)
    assert "overwrite=True" in str(refused.value) and "\n" not in str(refused.value)
    assert [e.op for e in read_index(tmp_path)[1]] == ["new_gelu"] * 3


def test_capture_overwrite_replaces_the_old_capture_without_leaving_its_shards(tmp_path):
    """overwrite=True: only the new capture's calls and shards remain."""
    _record(tmp_path, "new_gelu", calls=3)
    _record(tmp_path, "quick_gelu", calls=1, overwrite=True)
    assert [e.op for e in read_index(tmp_path)[1]] == ["quick_gelu"]
    assert [p.name for p in tmp_path.glob("*.safetensors")] == ["shard_000000.safetensors"]


def test_capture_refuses_a_folder_with_shards_of_an_interrupted_capture(tmp_path):
    """Shards without an index (a capture never closed) are a capture too: refused."""
    (tmp_path / "shard_000004.safetensors").write_bytes(b"")
    with pytest.raises(ValueError, match="already holds a capture"):
        Capture(tmp_path)


def test_export_refuses_a_non_empty_folder_and_overwrite_replaces_never_mixes(tmp_path, capsys):
    """The issue's mix (2 new gelu_and_mul cases beside 4 stale rms_norm ones) cannot happen."""
    out = tmp_path / "cases"
    assert _main(["export", "--op", "rms_norm", "--cases", "4", "--format", "bin", "--out", str(out)]) == 0
    again = ["export", "--op", "gelu_and_mul", "--cases", "2", "--format", "bin", "--out", str(out)]
    capsys.readouterr()
    assert _main(again) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--out {out}: not empty" in err[0] and "--overwrite" in err[0], err
    assert _ops(out) == ["rms_norm"] * 4
    assert _main([*again, "--overwrite"]) == 0
    assert _ops(out) == ["gelu_and_mul"] * 2


def test_export_overwrite_refuses_a_folder_holding_more_than_cases(tmp_path, capsys):
    """--overwrite removes an earlier export's case folders only, never a user's other files."""
    export_cases("rms_norm", out=tmp_path, cases=1)
    (tmp_path / "notes.txt").write_text("mine")
    argv = ["export", "--op", "rms_norm", "--format", "bin", "--out", str(tmp_path), "--overwrite"]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "notes.txt is not one" in err[0], err
    assert (tmp_path / "notes.txt").read_text() == "mine" and (tmp_path / "case_0000" / "case.json").exists()


def test_export_past_the_size_bound_is_refused_before_writing_anything(tmp_path, capsys):
    """--cases 100000 (the issue's 884 MB) is one line with the estimate, exit 2, nothing written."""
    out = tmp_path / "cases"
    assert (
        _main(["export", "--op", "rms_norm", "--cases", "100000", "--format", "bin", "--out", str(out)]) == 2
    )
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "--max-bytes 268435456: this export would take about" in err[0], err
    assert "100000 cases" in err[0] and "Traceback" not in captured.err and list(out.iterdir()) == []
    with pytest.raises(ValueError, match="--max-bytes 10000"):
        export_cases("rms_norm", out=out, cases=3, max_bytes=10_000)
    assert list(out.iterdir()) == []
    assert len(export_cases("rms_norm", out=out, cases=3, max_bytes=1 << 20)) == 3


def test_export_from_a_capture_is_bounded_by_its_index(tmp_path):
    """A capture's calls are sized from the index's shapes, before any tensor is read."""
    _record(tmp_path / "cap", "new_gelu", calls=4)
    for shard in (tmp_path / "cap").glob("*.safetensors"):
        shard.unlink()  # reading a tensor would now fail: the refusal comes first
    with pytest.raises(ValueError, match=r"--max-bytes 4096: .*\(4 cases"):
        export_cases("new_gelu", out=tmp_path / "cases", from_capture=tmp_path / "cap", max_bytes=4096)
    assert not (tmp_path / "cases").exists()


@pytest.mark.parametrize("size", ["0", "12x", "-5", "1.5G"])
def test_a_bad_max_bytes_is_one_line(tmp_path, capsys, size):
    """--max-bytes takes a positive count of bytes, optionally with K, M or G."""
    argv = ["export", "--op", "rms_norm", "--format", "bin", "--out", str(tmp_path), f"--max-bytes={size}"]
    assert _main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--max-bytes {size!r}" in err[0], err
    assert export_command.parse_size("2G") == 2 << 30 and export_command.parse_size("100k") == 100 << 10


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_lines_are_throttled_and_close_with_the_last_case():
    """One line per interval at most, none for an export shorter than it, and the final count; on a
    terminal one line rewritten in place."""
    now = [0.0]
    stream = io.StringIO()
    progress = export_command.Progress(stream, seconds=2.0, clock=lambda: now[0])
    for done, at in enumerate((0.5, 1.9, 2.1, 3.0, 4.0, 4.5), start=1):
        now[0] = at
        progress(done, 6, done * 1024)
    assert stream.getvalue().splitlines() == [
        "opconform export: 3/6 cases, 3.0 KiB written",
        "opconform export: 6/6 cases, 6.0 KiB written",
    ]
    terminal = _Terminal()
    rewritten = export_command.Progress(terminal, seconds=0.0, clock=lambda: 0.0)
    for done, nbytes in ((1, 1023 * 1024), (2, 1024 * 1024), (3, 1 << 21)):  # 1023.0 KiB, 1.0 MiB, ...
        rewritten(done, 3, nbytes)
    assert terminal.getvalue().split("\r")[1:] == [
        "opconform export: 1/3 cases, 1023.0 KiB written",
        "opconform export: 2/3 cases, 1.0 MiB written" + " " * 3,  # blanks the longer line's tail
        "opconform export: 3/3 cases, 2.0 MiB written\n",
    ]
    quiet = io.StringIO()
    short = export_command.Progress(quiet, seconds=2.0, clock=lambda: 0.0)
    short(1, 1, 10)
    assert quiet.getvalue() == ""


def test_export_shows_progress_on_stderr(tmp_path, capsys, monkeypatch):
    """The CLI reports progress on stderr (interval 0 here: every case), stdout keeps its summary."""
    monkeypatch.setattr(export_command, "PROGRESS_SECONDS", 0.0)
    assert (
        _main(["export", "--op", "rms_norm", "--cases", "3", "--format", "bin", "--out", str(tmp_path)]) == 0
    )
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert [line.split(",")[0] for line in lines] == [f"opconform export: {i}/3 cases" for i in (1, 2, 3)]
    assert captured.out.strip() == f"wrote 3 case(s) of rms_norm under {tmp_path}"
