"""Hugging Face causal LMs as --model: called with input_ids= (the targets never reach
attention_mask or the cache), judged with labels=input_ids, loaded from a save_pretrained folder."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

transformers = pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")

import torch  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.cli import main  # noqa: E402
from minigpt.data.tokenizer import CharTokenizer  # noqa: E402
from minigpt.errors import ModelSpecError  # noqa: E402
from minigpt.model.contract import call, forward_plan  # noqa: E402
from minigpt.model.user import load_model_spec  # noqa: E402

FIXTURE = Path(__file__).parent / "fixtures" / "hf_models.py"
GPT2 = {"n_positions": 32, "n_embd": 32, "n_head": 2, "n_layer": 1}
LLAMA = {
    "max_position_embeddings": 32,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "num_hidden_layers": 1,
}
MODEL_CHECKS = ["forward_shapes", "loss_matches_logits", "initial_loss", "causal_independence", "eval_determinism"]


def vocab(ws) -> int:
    return CharTokenizer.from_file(ws.tokenizer).vocab_size


def config_file(ws, tmp_path: Path, shape: dict) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"vocab_size": vocab(ws), **shape}))
    return path


def run(ws, spec: str, config: Path | None, only=None, **kw):
    opts = CheckOptions(workspace=ws.root, model_spec=spec, config_path=config, device="cpu", skip_overfit=True, **kw)
    return run_checks(CheckContext(opts), only=only)


def alarms(report) -> dict[str, str]:
    return {r.id: r.summary for r in report.results if r.status in (Status.FAIL, Status.ERROR)}


@pytest.mark.parametrize(
    "spec, shape",
    [("transformers:GPT2LMHeadModel:GPT2Config", GPT2), ("transformers:LlamaForCausalLM:LlamaConfig", LLAMA)],
    ids=["gpt2", "llama"],
)
def test_transformers_model_is_called_with_input_ids_and_passes(tiny_workspace, tmp_path, spec, shape):
    # WHEN a stock GPT-2 / Llama runs the model checks from a --config
    report = run(tiny_workspace, spec, config_file(tiny_workspace, tmp_path, shape), only=MODEL_CHECKS)
    # THEN nothing fails, it was called by keyword, and its own labels= loss was judged with the shift inside
    assert alarms(report) == {}
    by_id = report.by_id()
    assert any("input_ids=idx" in n for n in by_id["forward_shapes"].values["notes"])
    assert by_id["loss_matches_logits"].status is Status.PASS
    assert "shifts labels inside" in by_id["loss_matches_logits"].summary
    assert by_id["loss_matches_logits"].values["called_with"] == "labels=input_ids"


def test_llama_logits_do_not_depend_on_the_targets(tiny_workspace):
    # the old bug: targets went in as attention_mask, and a target ID 0 changed the logits
    cfg = transformers.LlamaConfig(vocab_size=vocab(tiny_workspace), **LLAMA)
    model = transformers.LlamaForCausalLM(cfg).eval()
    x = torch.randint(1, cfg.vocab_size, (2, 16))
    with torch.no_grad():
        a, loss = call(model, x, torch.zeros_like(x))
        b, _ = call(model, x, torch.ones_like(x))
        plain = model(input_ids=x).logits
    assert torch.equal(a, b) and torch.equal(a, plain)
    assert loss is not None and loss.ndim == 0
    assert forward_plan(type(model)).style == "hf"


def test_wrapper_passing_targets_as_labels_is_a_double_shift_with_hf_advice(tiny_workspace):
    report = run(tiny_workspace, f"{FIXTURE}:LabelsAreTargets:WrapperConfig", None, only=["loss_matches_logits"])
    result = report.by_id()["loss_matches_logits"]
    assert result.status is Status.FAIL
    assert "double shift" in result.summary
    assert any("labels=input_ids" in f for f in result.fixes)


def test_wrapper_passing_inputs_as_labels_is_healthy(tiny_workspace):
    report = run(tiny_workspace, f"{FIXTURE}:LabelsAreInputs:WrapperConfig", None, only=MODEL_CHECKS)
    assert alarms(report) == {}


def test_forward_with_a_required_mask_is_refused_with_what_to_write():
    with pytest.raises(ModelSpecError) as err:
        load_model_spec(f"{FIXTURE}:MaskRequired:WrapperConfig")
    assert "needs mask" in err.value.message
    assert any("forward(idx, targets=None)" in c for c in err.value.causes)


def test_forward_with_an_optional_mask_never_gets_the_targets_as_mask(tiny_workspace):
    spec = load_model_spec(f"{FIXTURE}:OptionalMask:WrapperConfig")
    assert forward_plan(spec.model_cls).style == "inputs"
    model = spec.factory({"vocab_size": vocab(tiny_workspace)}).eval()
    x = torch.randint(0, 10, (2, 8))
    with torch.no_grad():
        a, _ = call(model, x, torch.zeros_like(x))
        b, _ = call(model, x, torch.ones_like(x))
    assert torch.equal(a, b)


@pytest.mark.slow
def test_cli_refuses_an_unmatched_signature_with_exit_2(tiny_workspace, capsys):
    code = main(["check", "--workspace", str(tiny_workspace.root), "--model", f"{FIXTURE}:MaskRequired:WrapperConfig"])
    out = capsys.readouterr()
    assert code == 2
    assert "needs mask" in out.out + out.err


def test_save_pretrained_folder_is_the_run(tiny_workspace, tmp_path):
    # GIVEN a tiny GPT-2 trained nowhere, saved with save_pretrained (config.json + model.safetensors)
    cfg = transformers.GPT2Config(vocab_size=vocab(tiny_workspace), **GPT2)
    torch.manual_seed(0)
    model = transformers.GPT2LMHeadModel(cfg)
    folder = tmp_path / "hf_run"
    model.save_pretrained(folder)
    assert (folder / "model.safetensors").is_file()
    # WHEN the checks run on hf:PATH with no --checkpoint and no --config
    report = run(tiny_workspace, f"hf:{folder}", None, only=[*MODEL_CHECKS, "checkpoint_load"])
    by_id = report.by_id()
    # THEN the fresh-model checks use the folder's config, and the inspected checkpoint is its weights
    assert by_id["forward_shapes"].status is Status.PASS
    assert by_id["causal_independence"].status is Status.PASS
    assert by_id["checkpoint_load"].values["path"] == str(folder)
    assert by_id["checkpoint_load"].values["parameters"] == sum(p.numel() for p in model.parameters())
    # an untrained model is named as such, not as a loading failure
    assert "model contract" not in by_id["checkpoint_load"].summary


def test_hf_folder_without_config_is_refused(tmp_path):
    with pytest.raises(ModelSpecError, match="no config.json"):
        load_model_spec(f"hf:{tmp_path}")


@pytest.mark.parametrize(
    "spec, heads_field", [("transformers:LlamaForCausalLM:LlamaConfig", "num_attention_heads"),
                          ("transformers:GPT2LMHeadModel:GPT2Config", "n_head")],
    ids=["llama", "gpt2"],
)  # fmt: skip
def test_without_config_the_debug_shape_is_spelled_with_hf_field_names(tiny_workspace, spec, heads_field):
    ctx = CheckContext(CheckOptions(workspace=tiny_workspace.root, model_spec=spec, device="cpu", skip_overfit=True))
    config = ctx.base_config()
    assert config[heads_field] == 4 and config["vocab_size"] == vocab(tiny_workspace)
    report = run_checks(ctx, only=MODEL_CHECKS)
    assert alarms(report) == {}
    assert report.by_id()["forward_shapes"].values["batch_shape"][1] == 32


def test_stock_models_decode_through_their_cache_as_the_full_sequence_scores(tiny_workspace, tmp_path):
    report = run(
        tiny_workspace,
        "transformers:GPT2LMHeadModel:GPT2Config",
        config_file(tiny_workspace, tmp_path, GPT2),
        only=["causal_independence"],
    )
    result = report.by_id()["causal_independence"]
    assert result.status is Status.PASS, result.summary
    assert result.values["cache_probe"].startswith("decoding with its own cache"), result.values["cache_probe"]
    assert "cached decoding agrees" in result.summary


def test_positions_restarted_under_the_cache_fail_causal_independence_on_that_path(tiny_workspace, tmp_path):
    # GIVEN a GPT-2 whose wrapper passes position_ids = arange(len(input_ids)) on every call
    spec = f"{FIXTURE}:RestartingPositionsGPT2:GPT2Config"
    report = run(tiny_workspace, spec, config_file(tiny_workspace, tmp_path, GPT2), only=MODEL_CHECKS)
    # THEN only the cached path is wrong, and the check says so with where it first differs
    result = report.by_id()["causal_independence"]
    assert result.status is Status.FAIL, result.summary
    # transformers calls the cache past_key_values, or cache in newer versions
    assert re.search(r"own cache \((cache|past_key_values)=\) gives other logits", result.summary), result.summary
    assert "positions restarted" in result.causes[0] and result.causes[0].startswith("measured:")
    assert set(alarms(report)) == {"causal_independence"}, alarms(report)
