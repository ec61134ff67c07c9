"""An output path that is not a regular file (a device, a FIFO, a socket, a link to one) is never
renamed over: a character device or a FIFO is written in place (`--json /dev/null`,
`--json >(jq .)`), anything else is refused naming it."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from minigpt.cli import main
from minigpt.errors import FileSystemError, UnsafePathError
from minigpt.io import atomic
from minigpt.io.atomic import atomic_open, atomic_torch_save, atomic_write_text


def read_fifo_in_background(path: Path) -> tuple[threading.Thread, list[bytes]]:
    got: list[bytes] = []

    def reader() -> None:
        with open(path, "rb") as fh:
            got.append(fh.read())

    thread = threading.Thread(target=reader, daemon=True)
    thread.start()
    return thread, got


def test_a_link_to_dev_null_is_written_through_and_stays_a_link(tmp_path):
    link = tmp_path / "report.json"
    link.symlink_to("/dev/null")
    atomic_write_text("{}\n", link)
    assert link.is_symlink() and os.readlink(link) == "/dev/null"
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert not [p for p in tmp_path.iterdir() if p.name != "report.json"]  # no temp file left


def test_a_fifo_is_written_in_place_and_stays_a_fifo(tmp_path):
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    thread, got = read_fifo_in_background(fifo)
    atomic_write_text('{"a": 1}\n', fifo)
    thread.join(5)
    assert got == [b'{"a": 1}\n']
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_binary_writes_go_in_place_too(tmp_path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    thread, got = read_fifo_in_background(fifo)
    with atomic_open(fifo, "wb") as fh:
        fh.write(b"\x00\x01")
    thread.join(5)
    assert got == [b"\x00\x01"] and stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_fifo_nobody_reads_is_refused_after_a_bounded_wait_naming_it(tmp_path, monkeypatch):
    monkeypatch.setattr(atomic, "FIFO_READER_WAIT_S", 0.2)
    fifo = tmp_path / "out.json"
    os.mkfifo(fifo)
    with pytest.raises(FileSystemError, match="nothing read in") as info:
        atomic_write_text("{}\n", fifo)
    assert str(fifo) in str(info.value)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)


def test_a_socket_is_refused_naming_it_and_kept(tmp_path):
    path = tmp_path / "s"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(path))
        with pytest.raises(UnsafePathError, match="socket") as info:
            atomic_torch_save({"x": 1}, path)
        assert str(path) in str(info.value)
        assert stat.S_ISSOCK(os.lstat(path).st_mode)
        assert [p.name for p in tmp_path.iterdir()] == ["s"]
    finally:
        server.close()


def test_check_json_onto_a_fifo_writes_the_report_into_it(tiny_workspace, tmp_path, capsys):
    fifo = tmp_path / "report.json"
    os.mkfifo(fifo)
    thread, got = read_fifo_in_background(fifo)
    code = main(["check", "--workspace", str(tiny_workspace.root), "--only", "files", "--json", str(fifo)])
    thread.join(5)
    assert code == 0, capsys.readouterr().err
    assert got and b'"checks"' in got[0]
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
