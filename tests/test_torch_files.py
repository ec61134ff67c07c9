"""Every torch file minigpt reads (checkpoints, token files, nanoGPT imports) goes through one bounded
loader: a zip bomb, a pickle too long or too deep to unpickle, values shared so often that walking
them never ends, and torch's legacy format are refused, naming the file, before they cost memory."""

from __future__ import annotations

import pickle
import struct
import subprocess
import sys
import zipfile
import zlib
from pathlib import Path

import pytest
import torch

from minigpt.cli import main
from minigpt.data.batches import load_ids
from minigpt.errors import CheckpointError, DataError
from minigpt.importers.nanogpt import read_nanogpt_checkpoint
from minigpt.io import torch_files
from minigpt.model.checkpoint import read_checkpoint

ZEROS_2GIB = 2**31
ZEROS_2GIB_CRC32 = 0x4DBDF21C  # zlib.crc32(bytes(2**31))


def deflated_zeros(mib: int) -> bytes:
    """A raw deflate stream of `mib` MiB of zeros, built from one compressed MiB repeated: a full
    flush makes each block independent of the one before, so nothing that large is ever held."""
    compressor = zlib.compressobj(9, zlib.DEFLATED, -15)
    first = compressor.compress(bytes(2**20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    again = compressor.compress(bytes(2**20)) + compressor.flush(zlib.Z_FULL_FLUSH)
    return first + again * (mib - 1) + compressor.flush()


def write_zip(path: Path, records: list[tuple[str, bytes, int, int, int]]) -> None:
    """A zip of (name, stored bytes, method, crc32, inflated size) records, written as given."""
    body, directory = b"", b""
    for name, data, method, crc, size in records:
        encoded, offset = name.encode(), len(body)
        sizes = (method, 0, 0, crc, len(data), size, len(encoded))
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 20, 0, *sizes, 0) + encoded + data
        directory += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 20, 20, 0, *sizes, 0, 0, 0, 0, 0, offset) + encoded
    end = struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, len(records), len(records), len(directory), len(body), 0)
    path.write_bytes(body + directory + end)


def zip_bomb(path: Path, payload: object, bombed: str) -> Path:
    """`torch.save(payload)` with its record ending in `bombed` replaced by 2 GiB of deflated zeros
    (a ~2 MB file)."""
    torch.save(payload, path)
    bomb = (deflated_zeros(ZEROS_2GIB // 2**20), zipfile.ZIP_DEFLATED, ZEROS_2GIB_CRC32, ZEROS_2GIB)
    with zipfile.ZipFile(path) as archive:
        records = [
            (i.filename, *bomb) if i.filename.endswith(bombed) else (i.filename, archive.read(i), 0, i.CRC, i.file_size)
            for i in archive.infolist()
        ]
    write_zip(path, records)
    return path


def replace_pickle(path: Path, pickle_bytes: bytes) -> Path:
    """The torch file at `path` with its data.pkl replaced by `pickle_bytes` (stored, as torch writes)."""
    with zipfile.ZipFile(path) as archive:
        records = {i.filename: archive.read(i) for i in archive.infolist()}
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in records.items():
            archive.writestr(name, pickle_bytes if name.endswith("/data.pkl") else data)
    return path


def nested_lists(depth: int) -> bytes:
    """Pickle opcodes for a dict {'config': [[[...]]]} nested `depth` lists deep (no recursion to build)."""
    return b"\x80\x02}X\x06\x00\x00\x00config" + b"]" * depth + b"a" * (depth - 1) + b"s."


# -- zip bombs -------------------------------------------------------------------------------------


@pytest.mark.parametrize("bombed", ["/data.pkl", "/data/0"])
def test_a_zip_bomb_checkpoint_is_refused_before_it_is_unpacked(tmp_path, bombed):
    # GIVEN a 2 MB checkpoint whose pickle or tensor record inflates to 2 GiB
    path = zip_bomb(tmp_path / "ckpt.pt", {"model_state_dict": {"w": torch.ones(4)}, "config": {}}, bombed)
    assert path.stat().st_size < 4_000_000
    # WHEN it is read THEN it is refused as a zip bomb, naming the file and the record
    with pytest.raises(CheckpointError, match="would unpack to 2,147,48") as caught:
        read_checkpoint(path)
    assert str(path) in caught.value.message and bombed.lstrip("/") in caught.value.message
    assert any("zip bomb" in cause for cause in caught.value.causes)


@pytest.mark.parametrize(
    ("reader", "error"),
    [(load_ids, DataError), (read_nanogpt_checkpoint, CheckpointError), (read_checkpoint, CheckpointError)],
)
def test_every_reader_of_torch_files_refuses_a_zip_bomb(tmp_path, reader, error):
    path = zip_bomb(tmp_path / "file.pt", torch.arange(10), "/data/0")
    with pytest.raises(error, match="would unpack to"):
        reader(path)


@pytest.mark.parametrize(
    ("command", "where"),
    [
        (["sample", "--max-new-tokens", "5"], "best"),
        (["check", "--device", "cpu", "--only", "checkpoint_load"], "best"),
        (["train", "--device", "cpu", "--resume"], "latest"),
    ],
)
def test_sample_check_and_resume_refuse_a_zip_bomb_with_exit_2(trained_workspace, capsys, command, where):
    ws = trained_workspace
    target = ws.best_checkpoint if where == "best" else ws.latest_checkpoint
    zip_bomb(target, torch.load(target, weights_only=True), "/data.pkl")
    code = main([command[0], "--workspace", str(ws.root), *command[1:]])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if command[0] == "check":  # the check that loads the checkpoint fails and names why
        assert code == 1 and "would unpack to" in captured.out + captured.err
    else:
        assert code == 2 and "would unpack to" in captured.err and str(target) in captured.err


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads the process's peak from /proc (Linux)")
def test_a_refused_zip_bomb_never_costs_its_inflated_size_in_memory(trained_workspace):
    # GIVEN a workspace whose best checkpoint inflates to 2 GiB
    path = trained_workspace.best_checkpoint
    zip_bomb(path, torch.load(path, weights_only=True), "/data/0")
    # WHEN `minigpt sample` reads it in a fresh process THEN it exits 2 and its peak RSS stays far below 2 GiB
    # the peak is the process's own (VmHWM, reset by exec): ru_maxrss keeps the forking parent's peak
    # across exec on Linux, so a pytest that grew past 1 GiB would read as this command's
    code = (
        "import sys\n"
        "from minigpt.cli import main\n"
        f"code = main(['sample', '--workspace', {str(trained_workspace.root)!r}, '--max-new-tokens', '5'])\n"
        "hwm = [line.split()[1] for line in open('/proc/self/status') if line.startswith('VmHWM:')]\n"
        "print('maxrss_kib', hwm[0])\n"
        "sys.exit(code)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 2, result.stderr
    assert "would unpack to" in result.stderr and "Traceback" not in result.stderr
    peak_kib = int(result.stdout.split("maxrss_kib")[1])
    assert peak_kib < 1024 * 1024, f"peak RSS {peak_kib / 1024:.0f} MiB"


def test_a_rezipped_checkpoint_still_loads(trained_workspace, tmp_path):
    # a checkpoint compressed by a zip tool inflates a little: not a bomb
    path = tmp_path / "rezipped.pt"
    with (
        zipfile.ZipFile(trained_workspace.best_checkpoint) as src,
        zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        for info in src.infolist():
            out.writestr(info.filename, src.read(info))
    assert read_checkpoint(path)["model_state_dict"]


# -- pickles too large, too long or too deep ---------------------------------------------------


def test_a_deeply_nested_pickle_is_refused_naming_where(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"a": 1}, path)
    replace_pickle(path, nested_lists(5_000))
    with pytest.raises(CheckpointError, match=r"config\.0\.0\..* nests more than 32 levels deep"):
        read_checkpoint(path)


def test_a_deeply_nested_token_file_is_refused(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.arange(3), path)
    replace_pickle(path, nested_lists(5_000))
    with pytest.raises(DataError, match="nests more than 32 levels deep"):
        load_ids(path)


def test_a_list_that_contains_itself_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"a": 1}, path)
    # {'config': L} where L = [L]: EMPTY_LIST, BINPUT 0, BINGET 0, APPEND, SETITEM
    replace_pickle(path, b"\x80\x02}X\x06\x00\x00\x00config]q\x00h\x00as.")
    with pytest.raises(CheckpointError, match="contains itself"):
        read_checkpoint(path)


def test_values_shared_so_often_that_walking_them_never_ends_are_refused(tmp_path, monkeypatch):
    # GIVEN a checkpoint holding one list referenced 8**6 times (a few hundred bytes on disk)
    monkeypatch.setattr(torch_files, "MAX_VALUES", 100_000)
    shared: list = [0]
    for _ in range(6):
        shared = [shared] * 8
    path = tmp_path / "ckpt.pt"
    torch.save({"model_state_dict": {}, "config": {}, "extra": shared}, path)
    # WHEN it is read THEN it is refused before anything walks it as a tree
    with pytest.raises(CheckpointError, match="visits more than 100,000 values"):
        read_checkpoint(path)


def test_a_pickle_with_too_many_operations_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(torch_files, "MAX_PICKLE_OPS", 1000)
    path = tmp_path / "ckpt.pt"
    torch.save({"model_state_dict": {}, "config": {"steps": list(range(2000))}}, path)
    with pytest.raises(CheckpointError, match="more than 1,000 operations"):
        read_checkpoint(path)


def test_a_pickle_larger_than_the_limit_is_refused(trained_workspace, monkeypatch):
    monkeypatch.setattr(torch_files, "MAX_PICKLE_BYTES", 1000)
    with pytest.raises(CheckpointError, match=r"its pickle \(.*data\.pkl\) is [\d,]+ bytes, more than the 1,000"):
        read_checkpoint(trained_workspace.best_checkpoint)


def test_a_zip_listing_more_records_than_the_limit_is_refused(trained_workspace, monkeypatch):
    monkeypatch.setattr(torch_files, "MAX_RECORDS", 3)
    with pytest.raises(CheckpointError, match="records, more than the 3"):
        read_checkpoint(trained_workspace.best_checkpoint)


# -- formats -------------------------------------------------------------------------------------


def test_torchs_legacy_format_is_refused_with_how_to_resave_it(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.arange(10), path, _use_new_zipfile_serialization=False)
    with pytest.raises(DataError, match="legacy format") as caught:
        load_ids(path)
    assert any("torch.save(torch.load(" in cause for cause in caught.value.causes)


def test_a_bare_pickle_is_refused_as_not_read(tmp_path):
    path = tmp_path / "train_ids.pt"
    path.write_bytes(pickle.dumps(list(range(10))))
    with pytest.raises(DataError, match="is a bare pickle"):
        load_ids(path)


def test_a_record_compressed_in_a_way_torch_cannot_read_is_named(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"a": 1}, path)
    with zipfile.ZipFile(path) as archive:
        records = {i.filename: archive.read(i) for i in archive.infolist()}
    with zipfile.ZipFile(path, "w", zipfile.ZIP_BZIP2) as archive:
        for name, data in records.items():
            archive.writestr(name, data)
    with pytest.raises(CheckpointError, match="is corrupt: .*uses zip compression method 12"):
        read_checkpoint(path)


@pytest.mark.parametrize(
    "damaged",
    [
        b"\x80\x02K\x01Q.",  # a persistent id that is an int, not torch's tuple
        b"\x80\x02}cos\nsystem\na.",  # a refused global appended to a dict
    ],
)
def test_a_damaged_pickle_is_a_typed_refusal_whatever_the_unpickler_raises(tmp_path, damaged):
    path = tmp_path / "ckpt.pt"
    torch.save({"a": 1}, path)
    replace_pickle(path, damaged)
    with pytest.raises(CheckpointError, match=str(path)):
        read_checkpoint(path)


def test_a_zip_directory_naming_a_record_in_bytes_that_are_not_utf8_is_named_corrupt(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save({"a": 1}, path)
    data = bytearray(path.read_bytes())
    entry = data.index(b"PK\x01\x02")  # the first record's directory entry
    data[entry + 8 : entry + 10] = struct.pack("<H", 0x0800)  # its name is flagged UTF-8
    data[entry + 46] = 0xFF  # and starts with a byte UTF-8 never uses
    path.write_bytes(data)
    with pytest.raises(CheckpointError, match="is corrupt: .*utf-8"):
        read_checkpoint(path)


def test_a_zip_that_is_no_torch_file_is_named_corrupt(tmp_path):
    path = tmp_path / "ckpt.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("notes.txt", "hello")
    with pytest.raises(CheckpointError, match="is corrupt: .*without the data.pkl"):
        read_checkpoint(path)


def test_real_checkpoints_and_token_files_still_load(trained_workspace):
    assert read_checkpoint(trained_workspace.latest_checkpoint)["optimizer_state_dict"]
    assert load_ids(trained_workspace.ids("train")).dim() == 1
