"""`minigpt import nanogpt`: a run written the way nanoGPT writes it opens as a workspace that every
command uses with nanoGPT's own GPT, and nothing in the run's files gets to run code."""

from __future__ import annotations

import argparse
import json
import pathlib
import pickle
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.cli import main
from minigpt.data.batches import load_ids
from minigpt.data.corpus import demo_text
from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import CheckpointError, ConfigError, DataError
from minigpt.importers.nanogpt import import_nanogpt
from minigpt.importers.nanogpt_pickles import UnsafePickleError
from minigpt.io.workspace import Workspace
from minigpt.model.checkpoint import load_checkpoint, read_checkpoint
from minigpt.model.factory import default_model_factory
from minigpt.model.nanogpt import GPT, MODEL_CLASS
from minigpt.train.resume import require_resumable

sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
import nanogpt_writer  # noqa: E402  (a fixture module, imported from its folder like nanoGPT's scripts)


def write_run(root: Path, text: str, **train_args) -> tuple[Path, Path]:
    data_dir, out_dir = root / "data" / "demo_char", root / "out"
    nanogpt_writer.prepare_char(text, data_dir)
    nanogpt_writer.train(data_dir, out_dir, **train_args)
    return out_dir, data_dir


@pytest.fixture(scope="session")
def _trained_run(tmp_path_factory) -> Path:
    """nanoGPT trained 40 iterations on the whole demo corpus (checkpoints at iterations 20 and 40)."""
    root = tmp_path_factory.mktemp("nanogpt_trained")
    write_run(root, demo_text(), max_iters=40, eval_interval=20)
    return root


@pytest.fixture(scope="session")
def _tiny_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("nanogpt_tiny")
    write_run(root, demo_text()[:30_000], max_iters=2, eval_interval=1, block_size=16, n_embd=32)
    return root


def copy_of(template: Path, tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "nanogpt"
    shutil.copytree(template, root)
    return root / "out", root / "data" / "demo_char"


@pytest.fixture
def trained_run(tmp_path, _trained_run) -> tuple[Path, Path]:
    return copy_of(_trained_run, tmp_path)


@pytest.fixture
def tiny_run(tmp_path, _tiny_run) -> tuple[Path, Path]:
    return copy_of(_tiny_run, tmp_path)


def rewrite_checkpoint(out_dir: Path, edit) -> None:
    path = out_dir / "ckpt.pt"
    ckpt = torch.load(path, weights_only=True)  # our own fixture's file
    edit(ckpt)
    torch.save(ckpt, path)


# -- the import and what the other commands make of it -------------------------------------------


@pytest.mark.slow
def test_imported_run_passes_every_check_that_applies(trained_run, tmp_path, capsys):
    # GIVEN a nanoGPT run trained 40 iterations on the demo corpus, imported from the command line
    out_dir, data_dir = trained_run
    ws = tmp_path / "ws"
    assert (
        main(["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir), "--workspace", str(ws)]) == 0
    )
    assert "iter 40" in capsys.readouterr().out
    # WHEN every check runs with no --model
    code = main(["check", "--workspace", str(ws), "--json", str(tmp_path / "report.json")])
    printed = capsys.readouterr().out
    report = json.loads((tmp_path / "report.json").read_text())
    by_id = {c["id"]: c for c in report["checks"]}
    # THEN the checkpoint loads strictly into nanoGPT's GPT and nothing fails
    assert code == 0, printed
    assert not [c["id"] for c in report["checks"] if c["status"] in ("fail", "error")], printed
    assert by_id["checkpoint_load"]["status"] == "pass"
    assert by_id["checkpoint_load"]["values"]["config"]["model_class"] == MODEL_CLASS
    assert by_id["checkpoint_load"]["values"]["step"] == 40
    assert by_id["tokenizer_fingerprint"]["status"] == "pass"
    assert by_id["single_batch_overfit"]["status"] == "pass"
    # nanoGPT writes no metrics.jsonl and no samples: the curve and the samples have nothing to look
    # at; the learning-rate probe is opt-in
    skipped = [c for c in report["checks"] if c["status"] == "skip"]
    # the loop checks read a watched training loop's log (minigpt.watch): an import has none
    assert [c["id"] for c in skipped if not c["id"].startswith("loop_")] == [
        "lr_probe",
        "training_curve",
        "sample_structure",
    ]
    assert all("no watched loop" in c["summary"] for c in skipped if c["id"].startswith("loop_"))
    # honest findings on this run, not import faults: the demo text repeats passages across the
    # 90/10 cut, and 40 iterations generate near-random characters
    assert {c["id"] for c in report["checks"] if c["status"] == "warn"} <= {"split_overlap", "generation_repetition"}


def test_imported_model_computes_nanogpts_logits(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    ws = Workspace(tmp_path / "ws")
    import_nanogpt(out_dir, data_dir, ws.root)
    ckpt = torch.load(out_dir / "ckpt.pt", weights_only=True)
    theirs = nanogpt_writer.GPT(nanogpt_writer.GPTConfig(**ckpt["model_args"]))
    theirs.load_state_dict(ckpt["model"])
    loaded = load_checkpoint(ws.best_checkpoint)  # the default factory, no --model
    assert type(loaded.model) is GPT
    theirs.eval()
    x = torch.randint(0, loaded.config["vocab_size"], (2, 16))
    with torch.no_grad():
        ours_full, ours_loss = loaded.model(x, x)
        their_full, their_loss = theirs(x, x)
        ours_last, no_loss = loaded.model(x)
        their_last, _ = theirs(x)
    assert torch.allclose(ours_full, their_full, atol=1e-6) and torch.allclose(ours_loss, their_loss, atol=1e-6)
    assert ours_last.shape == (2, 1, loaded.config["vocab_size"]) and no_loss is None  # nanoGPT's shortcut kept
    assert torch.allclose(ours_last, their_last, atol=1e-6)


def test_ids_tokenizer_and_fingerprint_come_from_the_bins_and_meta(tiny_run, tmp_path, monkeypatch):
    # GIVEN chunks far smaller than a split, so every chunk boundary is crossed
    monkeypatch.setattr("minigpt.importers.nanogpt.CHUNK_TOKENS", 997)
    out_dir, data_dir = tiny_run
    ws = Workspace(tmp_path / "ws")
    summary = import_nanogpt(out_dir, data_dir, ws.root)
    for split in ("train", "val"):
        ids = load_ids(ws.ids(split))
        expected = torch.from_numpy(np.fromfile(data_dir / f"{split}.bin", dtype=np.uint16).astype(np.int64))
        assert ids.dtype == torch.uint8 and torch.equal(ids.long(), expected)
    assert not ws.ids("test").exists()  # nanoGPT has no test split
    with open(data_dir / "meta.pkl", "rb") as f:
        itos = pickle.load(f)["itos"]  # our own fixture's file
    tokenizer = CharTokenizer.from_file(ws.tokenizer)
    assert tokenizer.chars == [itos[i] for i in range(len(itos))]
    assert read_checkpoint(ws.best_checkpoint)["tokenizer_fingerprint"] == tokenizer.fingerprint == summary.fingerprint
    assert not list(ws.ids("train").parent.glob(".*"))  # no scratch or staged file left behind


def test_compiled_run_with_biases_imports_and_says_what_it_stripped(tmp_path):
    out_dir, data_dir = write_run(
        tmp_path, demo_text()[:20_000], max_iters=1, eval_interval=1, block_size=16, n_embd=32, compiled=True, bias=True
    )
    summary = import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    assert any("_orig_mod." in n for n in summary.notices)
    loaded = load_checkpoint(Workspace(tmp_path / "ws").best_checkpoint)
    assert loaded.model.transformer.h[0].ln_1.bias is not None


def test_run_from_torch_before_2_drops_the_mask_buffers(tmp_path):
    out_dir, data_dir = write_run(
        tmp_path, demo_text()[:20_000], max_iters=1, eval_interval=1, block_size=16, n_embd=32, flash=False
    )
    assert any(k.endswith(".attn.bias") for k in torch.load(out_dir / "ckpt.pt", weights_only=True)["model"])
    summary = import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    assert any("causal-mask buffers" in n for n in summary.notices)


@pytest.mark.parametrize(("fault", "expected"), [(None, Status.PASS), ("no_causal_mask", Status.FAIL)])
def test_the_causal_mask_fault_reaches_nanogpts_attention(tiny_run, tmp_path, fault, expected):
    out_dir, data_dir = tiny_run
    import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    ctx = CheckContext(CheckOptions(workspace=tmp_path / "ws", fault=fault, device="cpu"))
    report = run_checks(ctx, only=["causal_independence"])
    assert report.by_id()["causal_independence"].status is expected


def test_sample_uses_nanogpts_class_without_model_flag(tiny_run, tmp_path, capsys):
    out_dir, data_dir = tiny_run
    import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    assert main(["sample", "--workspace", str(tmp_path / "ws"), "--max-new-tokens", "30", "--seed", "0"]) == 0
    assert len(capsys.readouterr().out) >= 30


def test_train_resume_refuses_the_imported_run(tiny_run, tmp_path, capsys):
    out_dir, data_dir = tiny_run
    ws = Workspace(tmp_path / "ws")
    import_nanogpt(out_dir, data_dir, ws.root)
    assert main(["train", "--resume", "--workspace", str(ws.root)]) == 2
    assert "cannot resume from" in capsys.readouterr().err
    with pytest.raises(CheckpointError, match="trains MiniGPT only"):
        require_resumable(read_checkpoint(ws.latest_checkpoint), ws.latest_checkpoint)


# -- nothing in the files runs code ----------------------------------------------------------------


class _Payload:
    """Unpickling this runs `exec`, which creates the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (exec, (f"open({str(self.marker)!r}, 'w').close()",))


def malicious_meta(marker: Path) -> bytes:
    chars = sorted(set(demo_text()[:30_000]))
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)), "stoi": {c: i for i, c in enumerate(chars)}}
    return pickle.dumps({**meta, "note": _Payload(marker)})


def test_malicious_meta_pickle_is_refused_and_never_runs(tiny_run, tmp_path):
    # GIVEN a meta.pkl whose payload really runs code under pickle.load (shown on a control copy)
    out_dir, data_dir = tiny_run
    control = tmp_path / "control-marker"
    pickle.loads(malicious_meta(control))
    assert control.exists()
    marker = tmp_path / "marker"
    (data_dir / "meta.pkl").write_bytes(malicious_meta(marker))
    # WHEN it is imported
    with pytest.raises(UnsafePickleError) as caught:
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    # THEN it is refused by name, the payload never ran, and nothing was written
    assert caught.value.global_name == "builtins.exec"
    assert str(data_dir / "meta.pkl") in caught.value.message
    assert not marker.exists()
    assert not Workspace(tmp_path / "ws").tokenizer.exists()


def test_malicious_meta_pickle_exits_2_from_the_cli(tiny_run, tmp_path, capsys):
    out_dir, data_dir = tiny_run
    (data_dir / "meta.pkl").write_bytes(malicious_meta(tmp_path / "marker"))
    args = ["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir), "--workspace", str(tmp_path)]
    assert main(args) == 2
    assert "builtins.exec" in capsys.readouterr().err
    assert not (tmp_path / "marker").exists()


@pytest.mark.parametrize(
    ("config", "named"),
    [
        (argparse.Namespace(batch_size=12), "'config' (argparse.Namespace)"),  # a fork saving its argparse args
        ({"batch_size": 12, "out_dir": pathlib.PurePosixPath("out")}, "'config'['out_dir'] (pathlib.PurePosixPath)"),
    ],
)
def test_an_object_in_the_checkpoint_is_refused_naming_its_key(tiny_run, tmp_path, config, named):
    out_dir, data_dir = tiny_run
    rewrite_checkpoint(out_dir, lambda ckpt: ckpt.update(config=config))
    with pytest.raises(CheckpointError, match="outside torch's weights-only allow-list") as caught:
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")
    assert named in caught.value.message


def test_default_factory_never_imports_a_class_a_file_names():
    with pytest.raises(ConfigError, match="not a model class of minigpt"):
        default_model_factory({"model_class": "antigravity.fly", "vocab_size": 10})
    assert "antigravity" not in sys.modules


# -- bad runs are refused with the reason ----------------------------------------------------------


def test_modified_model_args_are_refused(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    rewrite_checkpoint(out_dir, lambda ckpt: ckpt["model_args"].update(use_rmsnorm=True))
    with pytest.raises(CheckpointError, match="use_rmsnorm"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")


def test_untied_head_is_refused(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run

    def untie(ckpt):
        ckpt["model"]["lm_head.weight"] = ckpt["model"]["lm_head.weight"].clone() + 1.0

    rewrite_checkpoint(out_dir, untie)
    with pytest.raises(CheckpointError, match="lm_head.weight differs from transformer.wte.weight"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")


def test_meta_of_another_dataset_is_refused(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    with open(data_dir / "meta.pkl", "rb") as f:
        meta = pickle.load(f)  # our own fixture's file
    meta["itos"][len(meta["itos"])] = "\u2603"
    meta.update(vocab_size=len(meta["itos"]), stoi={c: i for i, c in meta["itos"].items()})
    (data_dir / "meta.pkl").write_bytes(pickle.dumps(meta))
    with pytest.raises(DataError, match="characters but the checkpoint's vocab_size is"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")


def test_id_outside_the_vocabulary_is_refused_and_nothing_is_written(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    with open(data_dir / "val.bin", "ab") as f:
        f.write(np.array([500], dtype=np.uint16).tobytes())
    ws = Workspace(tmp_path / "ws")
    with pytest.raises(DataError, match="holds ID 500"):
        import_nanogpt(out_dir, data_dir, ws.root)
    assert not ws.ids("train").exists() and not ws.best_checkpoint.exists()
    assert not list(ws.ids("train").parent.glob(".*"))


def test_a_workspace_holding_a_run_is_refused(tiny_run, tiny_workspace):
    out_dir, data_dir = tiny_run
    before = tiny_workspace.tokenizer.read_bytes()
    with pytest.raises(DataError, match="already holds a run"):
        import_nanogpt(out_dir, data_dir, tiny_workspace.root)
    assert tiny_workspace.tokenizer.read_bytes() == before


def test_a_minigpt_checkpoint_is_not_taken_for_a_nanogpt_one(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    torch.save({"model_state_dict": {}, "config": {"vocab_size": 3}}, out_dir / "ckpt.pt")
    with pytest.raises(CheckpointError, match="Not a nanoGPT checkpoint"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")


def test_missing_meta_names_the_data_dir(tiny_run, tmp_path):
    out_dir, data_dir = tiny_run
    (data_dir / "meta.pkl").unlink()
    with pytest.raises(DataError, match="meta.pkl not found"):
        import_nanogpt(out_dir, data_dir, tmp_path / "ws")
