"""causal_independence decodes through the model's own cache, one token at a time after a prompt,
and holds each step's logits against the full sequence's: minigpt's own cache here (the Hugging Face
cache is in test_hf_models.py)."""

from __future__ import annotations

import json
from pathlib import Path

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.data.tokenizer import CharTokenizer

FIXTURE = Path(__file__).parent / "fixtures" / "own_cache_bug.py"
SHAPE = {"block_size": 32, "embedding_dim": 32, "num_heads": 2, "num_layers": 2, "dropout": 0.0}


def _run(ws, tmp_path, spec: str | None):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": CharTokenizer.from_file(ws.tokenizer).vocab_size, **SHAPE}))
    opts = CheckOptions(
        workspace=ws.root, checkpoint="none", model_spec=spec, config_path=config, device="cpu", skip_overfit=True
    )
    return run_checks(CheckContext(opts), only=["causal_independence"]).by_id()["causal_independence"]


def test_the_own_model_decodes_through_its_cache_as_the_full_sequence_scores(tiny_workspace, tmp_path):
    result = _run(tiny_workspace, tmp_path, f"{FIXTURE}:MiniGPT:MiniGPTConfig")
    assert result.status is Status.PASS, result.summary
    assert result.values["cache_probe"].startswith("decoding with its own cache (make_cache()")
    assert "cached decoding agrees" in result.summary


def test_a_cache_that_is_not_advanced_fails_on_the_cached_path_naming_the_position(tiny_workspace, tmp_path):
    result = _run(tiny_workspace, tmp_path, f"{FIXTURE}:StaleCacheGPT")
    assert result.status is Status.FAIL, result.summary
    assert "decoding with the model's own cache (make_cache() and forward(idx, cache=))" in result.summary
    assert result.values["cache_first_mismatch"] == 17  # the second decoded token: the first one's step was lost
    assert result.values["prefix_probe"].startswith("prefixes of 1, ")  # the uncached path is right
