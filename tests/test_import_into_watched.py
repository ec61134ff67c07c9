"""`minigpt import nanogpt` into the folder a nanoGPT loop was watched into: the checkpoint, tokenizer
and data go beside the loop's logs, which stay as they were, and one `minigpt check` report holds the
loop checks and the model checks of that run."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import minigpt
from minigpt.cli import main
from minigpt.data.corpus import demo_text
from minigpt.io.workspace import Workspace

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import nanogpt_writer  # noqa: E402  (a fixture module, imported from its folder like nanoGPT's scripts)

STEPS = 30


def watched_nanogpt_run(root: Path, *, n_embd: int = 32) -> tuple[Path, Path]:
    """nanoGPT's loop on its GPT (the fixture's), watched into out_dir as docs/your-loop.md shows, and its
    ckpt.pt saved there at the end: what train.py leaves in out_dir with the watch's lines added."""
    data_dir, out_dir = root / "data" / "demo_char", root / "out"
    meta = nanogpt_writer.prepare_char(demo_text()[:30_000], data_dir)
    torch.manual_seed(1337)
    model_args = dict(n_layer=1, n_head=2, n_embd=n_embd, block_size=16, bias=False, dropout=0.0)
    model_args["vocab_size"] = meta["vocab_size"]
    model = nanogpt_writer.GPT(nanogpt_writer.GPTConfig(**model_args))
    optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.99), "cpu")
    watch = minigpt.watch(model, optimizer, workspace=out_dir)
    data = np.memmap(data_dir / "train.bin", dtype=np.uint16, mode="r")
    for _ in range(STEPS):
        ix = torch.randint(len(data) - 16, (4,))
        x = torch.stack([torch.from_numpy(data[i : i + 16].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1 : i + 17].astype(np.int64)) for i in ix])
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "model_args": model_args,
        "iter_num": STEPS,
        "best_val_loss": torch.tensor(3.5),
        "config": {"learning_rate": 1e-2, "max_iters": STEPS, "grad_clip": 1.0},
    }
    torch.save(checkpoint, out_dir / "ckpt.pt")
    watch.close()
    return out_dir, data_dir


def logs_of(run: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((run / "logs").iterdir()) if p.is_file()}


@pytest.mark.slow
def test_a_watched_nanogpt_out_dir_takes_the_import_and_one_check_judges_loop_and_model(tmp_path, capsys):
    # GIVEN nanoGPT's out_dir with the watch's logs and ckpt.pt
    out_dir, data_dir = watched_nanogpt_run(tmp_path)
    logs = logs_of(out_dir)
    # WHEN the run is imported into that same folder
    code = main(
        ["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir), "--workspace", str(out_dir)]
    )
    printed = capsys.readouterr().out
    # THEN the import goes beside the loop's logs and leaves them as they were
    assert code == 0, printed
    assert "kept the watched loop's logs" in printed
    assert logs_of(out_dir) == logs
    assert Workspace(out_dir).best_checkpoint.is_file()
    # AND one report holds the loop's checks and the model's
    report = tmp_path / "report.json"
    only = "loop_grads_cleared,loop_train_mode,checkpoint_load,tokenizer_fingerprint"
    main(["check", "--workspace", str(out_dir), "--only", only, "--json", str(report)])
    verdicts = {r["id"]: r["status"] for r in json.loads(report.read_text())["checks"]}
    assert verdicts["loop_grads_cleared"] == "pass" and verdicts["loop_train_mode"] == "pass", verdicts
    assert verdicts["checkpoint_load"] == "pass" and verdicts["tokenizer_fingerprint"] == "pass", verdicts


def test_a_checkpoint_of_another_model_is_refused_beside_a_watched_loop(tmp_path, capsys):
    # GIVEN a folder a loop of one model was watched into, and the ckpt.pt of a wider model
    out_dir, data_dir = watched_nanogpt_run(tmp_path / "watched")
    other_out, _ = watched_nanogpt_run(tmp_path / "other", n_embd=64)
    logs = logs_of(out_dir)
    # WHEN the other checkpoint is imported into the watched folder
    code = main(
        ["import", "nanogpt", "--out-dir", str(other_out), "--data-dir", str(data_dir), "--workspace", str(out_dir)]
    )
    # THEN it is refused with both parameter counts, and nothing is written
    err = capsys.readouterr().err
    assert code == 2 and "is not the model of the loop watched into" in err
    assert logs_of(out_dir) == logs and not Workspace(out_dir).best_checkpoint.exists()


@pytest.mark.parametrize("extra", ["checkpoint", "log"])
def test_a_watched_folder_with_more_than_the_loops_logs_or_a_log_given_is_refused(tmp_path, capsys, extra):
    out_dir, data_dir = watched_nanogpt_run(tmp_path)
    args = ["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir), "--workspace", str(out_dir)]
    if extra == "checkpoint":  # a run's checkpoint already there: the import would replace it
        Workspace(out_dir).best_checkpoint.parent.mkdir(parents=True)
        Workspace(out_dir).best_checkpoint.write_bytes(b"x")
    else:  # nanoGPT's stdout would replace the metrics log the watch wrote
        (tmp_path / "train.log").write_text("iter 0: loss 4.1900, time 10.00ms, mfu -100.00%\n")
        args += ["--log", str(tmp_path / "train.log")]
    logs = logs_of(out_dir)
    assert main(args) == 2
    err = capsys.readouterr().err
    assert ("already holds a run" if extra == "checkpoint" else "Refusing --log") in err
    assert logs_of(out_dir) == logs
