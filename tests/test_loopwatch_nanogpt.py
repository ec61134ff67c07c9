"""nanoGPT's own train.py, watched with the three lines docs/your-loop.md adds, on the demo corpus.

nanoGPT is not vendored: set NANOGPT_DIR to a checkout of https://github.com/karpathy/nanoGPT (its
train.py, model.py, configurator.py) to run these; they skip otherwise. The healthy run must be
clean; each bug, made by editing one line of nanoGPT's loop, must fail its own check.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import english_prose

NANOGPT = os.environ.get("NANOGPT_DIR")
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not NANOGPT or not Path(NANOGPT, "train.py").is_file(), reason="NANOGPT_DIR not set"),
]

WATCH_LINES = {
    # after the model is wrapped (compile, DDP) and the optimizer exists
    "    model = DDP(model, device_ids=[ddp_local_rank])\n": (
        "    model = DDP(model, device_ids=[ddp_local_rank])\n"
        "import minigpt; watch = minigpt.watch(model, optimizer, workspace=out_dir, scaler=scaler)\n"
    ),
    "        print(f\"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}\")\n": (
        "        print(f\"step {iter_num}: train loss {losses['train']:.4f}, val loss {losses['val']:.4f}\")\n"
        "        watch.log(step=iter_num, val_loss=float(losses['val']), eval_train_loss=float(losses['train']))\n"
    ),
    "if ddp:\n    destroy_process_group()": "watch.close()\nif ddp:\n    destroy_process_group()",
}
BUGS = {
    "accum_not_divided": (
        "            loss = loss / gradient_accumulation_steps",
        "            loss = loss",
        "loop_accumulation",
    ),
    "never_zero_grad": ("    optimizer.zero_grad(set_to_none=True)\n", "    pass\n", "loop_grads_cleared"),
    "no_train_after_eval": (
        "        out[split] = losses.mean()\n    model.train()",
        "        out[split] = losses.mean()",
        "loop_train_mode",
    ),
    "zero_grad_before_step": (
        "    # clip the gradient\n",
        "    optimizer.zero_grad(set_to_none=True)\n    # clip the gradient\n",
        "loop_grads_reach_step",
    ),
}
ARGS = [
    "config/train_shakespeare_char.py", "--device=cpu", "--compile=False", "--eval_iters=5", "--log_interval=10",
    "--eval_interval=25", "--block_size=64", "--batch_size=12", "--n_layer=2", "--n_head=4", "--n_embd=64",
    "--max_iters=50", "--lr_decay_iters=50", "--warmup_iters=10", "--dropout=0.1", "--gradient_accumulation_steps=4",
]  # fmt: skip


def _nanogpt(tmp_path: Path, bug: str | None) -> Path:
    root = tmp_path / "nanoGPT"
    shutil.copytree(NANOGPT, root, ignore=shutil.ignore_patterns(".git", "out*", "*.bin"))
    data = root / "data" / "shakespeare_char"
    data.mkdir(parents=True, exist_ok=True)
    text = english_prose(300_000)
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    n = int(0.9 * len(ids))
    ids[:n].tofile(data / "train.bin")
    ids[n:].tofile(data / "val.bin")
    with open(data / "meta.pkl", "wb") as fh:
        pickle.dump({"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": stoi}, fh)
    source = (root / "train.py").read_text()
    for old, new in WATCH_LINES.items():
        assert old in source, f"nanoGPT's train.py changed: {old!r} not found"
        source = source.replace(old, new, 1)
    if bug:
        old, new, _ = BUGS[bug]
        assert old in source, bug
        source = source.replace(old, new, 1)
    (root / "train_watched.py").write_text(source)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    subprocess.run(
        [sys.executable, "train_watched.py", *ARGS, "--out_dir=out"], cwd=root, env=env, check=True, capture_output=True
    )
    return root / "out"


def _verdicts(run: Path) -> dict[str, str]:
    report = run / "report.json"
    subprocess.run([sys.executable, "-m", "minigpt", "check", "--workspace", str(run), "--json", str(report)])
    return {r["id"]: r["status"] for r in json.loads(report.read_text())["checks"]}


def test_nanogpt_train_py_watched_is_clean(tmp_path):
    verdicts = _verdicts(_nanogpt(tmp_path, None))
    loop = {k: v for k, v in verdicts.items() if k.startswith("loop_")}
    assert all(v in ("pass", "skip") for v in loop.values()), loop
    assert verdicts["loop_accumulation"] == "pass"
    assert verdicts["training_curve"] == "pass"


@pytest.mark.parametrize("bug", BUGS)
def test_nanogpt_train_py_bug_fails_its_check(tmp_path, bug):
    verdicts = _verdicts(_nanogpt(tmp_path, bug))
    assert verdicts[BUGS[bug][2]] == "fail", verdicts


def test_nanogpt_train_py_watched_and_imported_is_judged_in_one_report(tmp_path):
    # GIVEN nanoGPT's out_dir after a watched run: the watch's logs beside ckpt.pt
    out = _nanogpt(tmp_path, None)
    data = out.parent / "data" / "shakespeare_char"
    # WHEN the run is imported into that folder
    imported = subprocess.run(
        [sys.executable, "-m", "minigpt", "import", "nanogpt", "--out-dir", str(out), "--data-dir", str(data)],
        cwd=out,
        capture_output=True,
        text=True,
    )
    assert imported.returncode == 0, imported.stderr
    # THEN one check judges the loop and the model
    verdicts = _verdicts(out)
    assert verdicts["loop_accumulation"] == "pass" and verdicts["loop_grads_cleared"] == "pass", verdicts
    assert verdicts["checkpoint_load"] == "pass" and verdicts["tokenizer_fingerprint"] == "pass", verdicts
