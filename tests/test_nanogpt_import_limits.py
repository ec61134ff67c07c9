"""`minigpt import nanogpt` at the edges: a ckpt.pt whose model_args claim gigabytes is refused
before the model is built, a meta.pkl nested 200,000 deep is a message, a full disk (a real tmpfs)
is the disk-full message with the path, leaves no scratch file and no lock behind, and a retry
says the same."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.cli import main
from minigpt.data.corpus import demo_text
from minigpt.errors import CheckpointError, DataError
from minigpt.importers.nanogpt import import_nanogpt
from minigpt.importers.nanogpt_pickles import read_meta

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import nanogpt_writer  # noqa: E402  (a fixture module, imported from its folder like nanoGPT's scripts)


@pytest.fixture(scope="module")
def _run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nanogpt_edge")
    data_dir, out_dir = root / "data", root / "out"
    nanogpt_writer.prepare_char(demo_text()[:30_000], data_dir)
    nanogpt_writer.train(data_dir, out_dir, max_iters=2, eval_interval=1, block_size=16, n_embd=32)
    return root


@pytest.fixture
def run_copy(_run, tmp_path) -> tuple[Path, Path]:
    root = tmp_path / "nanogpt"
    shutil.copytree(_run, root)
    return root / "out", root / "data"


def test_a_ckpt_whose_model_args_claim_gigabytes_is_refused_before_building(run_copy, tmp_path, monkeypatch):
    # GIVEN a small ckpt.pt whose model_args claim 16 layers of width 4096 (about 13 GB of float32)
    out_dir, data_dir = run_copy
    ckpt = torch.load(out_dir / "ckpt.pt", weights_only=True)
    ckpt["model_args"].update(n_layer=16, n_embd=4096)
    torch.save(ckpt, out_dir / "ckpt.pt")
    built = []
    monkeypatch.setattr("minigpt.importers.nanogpt.GPT", lambda cfg: built.append(cfg))
    # WHEN it is imported THEN the figure is named and nothing was built or written
    with pytest.raises(CheckpointError, match=r"describes [\d,]+ parameters \(1\d\.\d GiB\).*refused before building"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    assert built == []
    assert not (tmp_path / "ws").exists() or not any((tmp_path / "ws").iterdir())


def test_a_meta_pkl_nested_200000_deep_is_a_message_not_a_recursion_error(tmp_path):
    n = 200_000
    ops = bytearray(b"\x80\x02}q\x00(X\x04\x00\x00\x00itosq\x01}q\x02K\x00")
    ops += b"]" * n + b"a" * (n - 1) + b"s" + b"u."  # itos[0] = [[[...]]], 200,000 lists deep
    path = tmp_path / "meta.pkl"
    path.write_bytes(bytes(ops))
    with pytest.raises(DataError, match="nested too deeply"):
        read_meta(path)


def test_import_on_a_full_disk_says_so_and_leaves_no_scratch_and_no_lock(run_copy, tmpfs, capsys):
    # GIVEN a train.bin of 4 M tokens (8 MB) and a workspace on a 3 MB tmpfs
    out_dir, data_dir = run_copy
    vocab = len(read_meta(data_dir / "meta.pkl"))
    np.arange(4 << 20, dtype=np.uint16).__imod__(vocab).tofile(data_dir / "train.bin")
    ws = tmpfs("size=3m") / "ws"
    args = ["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir), "--workspace", str(ws)]
    for attempt in range(2):  # the retry gets the same message: nothing was left filling the disk
        # WHEN it is imported (in this process: a SIGBUS would kill the test run itself)
        code = main(args)
        err = capsys.readouterr().err
        # THEN exit 2 with the disk-full message naming the file, and nothing left behind
        assert code == 2, (attempt, err)
        assert "Disk full: could not write" in err and "train_ids.pt" in err, err
        assert "?" not in err.splitlines()[0]
        left = sorted(p.name for p in ws.rglob("*") if p.is_file()) if ws.exists() else []
        assert left == [], left
