"""`--model hf:FOLDER` in a workspace that already holds a checkpoint: the folder's own weights are
judged, the workspace's MiniGPT is left aside and named, and an explicit --checkpoint is honoured
when it fits the folder's class and refused (exit 2) when it holds one of minigpt's own models."""

from __future__ import annotations

from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")

import torch  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.cli import main  # noqa: E402
from minigpt.data.batches import load_ids  # noqa: E402
from minigpt.data.tokenizer import CharTokenizer  # noqa: E402
from minigpt.io.workspace import Workspace  # noqa: E402

GPT2 = {"n_positions": 32, "n_embd": 32, "n_head": 2, "n_layer": 1}
TRAIN_STEPS = 30  # enough for a 1-layer GPT-2 to fall far below log(V) on the workspace's text


def trained_gpt2(ws: Workspace) -> transformers.GPT2LMHeadModel:
    """A tiny GPT-2 trained briefly on the workspace's own IDs, so checkpoint_load can pass on it."""
    vocab = CharTokenizer.from_file(ws.tokenizer).vocab_size
    model = transformers.GPT2LMHeadModel(
        transformers.GPT2Config(vocab_size=vocab, bos_token_id=0, eos_token_id=0, **GPT2)
    )
    ids = load_ids(ws.ids("train")).long()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)
    for _ in range(TRAIN_STEPS):
        starts = torch.randint(len(ids) - GPT2["n_positions"], (16,), generator=gen)
        x = torch.stack([ids[s : s + GPT2["n_positions"]] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


@pytest.fixture
def hf_folder(trained_workspace, tmp_path) -> Path:
    folder = tmp_path / "my-tiny-gpt2"
    trained_gpt2(trained_workspace).save_pretrained(folder)
    return folder


def checkpoint_load(ws: Workspace, spec: str, checkpoint: Path | None = None):
    opts = CheckOptions(workspace=ws.root, model_spec=spec, checkpoint=checkpoint, device="cpu", skip_overfit=True)
    report = run_checks(CheckContext(opts), only=["checkpoint_load"])
    return report, report.by_id()["checkpoint_load"]


def test_hf_folder_weights_are_judged_not_the_workspace_checkpoint(trained_workspace, hf_folder):
    # GIVEN a workspace with its own MiniGPT checkpoint, and a trained GPT-2 save_pretrained folder
    assert trained_workspace.best_checkpoint.is_file()
    # WHEN the checks run with --model hf:FOLDER and no --checkpoint
    report, result = checkpoint_load(trained_workspace, f"hf:{hf_folder}")
    # THEN the folder's weights are the ones judged, and they load and predict the data
    assert result.status is Status.PASS, result.summary
    assert result.values["path"] == str(hf_folder)
    assert str(hf_folder / "model.safetensors") in result.summary
    assert [j.path for j in report.judged if j.role == "checkpoint"] == [str(hf_folder / "model.safetensors")]
    # and the workspace's checkpoint is named as left aside, with the class it holds
    assert result.values["set_aside"] == str(trained_workspace.best_checkpoint)
    assert f"{trained_workspace.best_checkpoint} (minigpt.model.gpt.MiniGPT, step 120) left aside" in result.summary
    assert "GPT2LMHeadModel" in result.summary


def test_hf_folder_without_weights_never_judges_the_workspace_checkpoint(trained_workspace, hf_folder):
    # GIVEN a folder with the config alone (no model.safetensors)
    (hf_folder / "model.safetensors").unlink()
    report, result = checkpoint_load(trained_workspace, f"hf:{hf_folder}")
    # THEN the checks run on a fresh model of the folder's config: no false load failure
    assert result.status is Status.SKIP, result.summary
    assert f"no checkpoint at {hf_folder / 'model.safetensors'}" in result.summary
    assert "left aside" in result.summary
    assert not [j for j in report.judged if j.role == "checkpoint"]


def test_an_explicit_checkpoint_of_the_folder_class_is_honoured(trained_workspace, hf_folder, tmp_path):
    # GIVEN a checkpoint file holding a GPT-2 of the folder's class, in minigpt's dict layout
    model = transformers.GPT2LMHeadModel.from_pretrained(hf_folder)
    config = {"vocab_size": model.config.vocab_size, **GPT2}
    path = tmp_path / "gpt2.pt"
    torch.save({"model_state_dict": model.state_dict(), "config": config, "step": 30}, path)
    # WHEN --checkpoint names it beside --model hf:FOLDER
    _, result = checkpoint_load(trained_workspace, f"hf:{hf_folder}", checkpoint=path)
    # THEN that file is the one judged, and nothing is said to be left aside
    assert result.status is Status.PASS, result.summary
    assert result.values["path"] == str(path)
    assert result.values["set_aside"] is None and "left aside" not in result.summary


def test_an_explicit_minigpt_checkpoint_with_an_hf_folder_is_refused_with_exit_2(trained_workspace, hf_folder, capsys):
    # WHEN --checkpoint names the workspace's MiniGPT beside --model hf:FOLDER
    code = main(
        [
            "check",
            "--workspace",
            str(trained_workspace.root),
            "--model",
            f"hf:{hf_folder}",
            "--checkpoint",
            str(trained_workspace.best_checkpoint),
            "--only",
            "checkpoint_load",
            "--device",
            "cpu",
            "--no-isolate",
        ]
    )
    out = capsys.readouterr().out
    # THEN it is bad usage, said in the arguments' words, not a state-dict mismatch
    assert code == 2
    assert "holds a minigpt.model.gpt.MiniGPT, not the GPT2LMHeadModel" in out
    assert "leave out --checkpoint" in out
    assert "size mismatch" not in out
