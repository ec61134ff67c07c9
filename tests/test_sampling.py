"""Sampler settings, filter stages and generation (KV cache vs full recomputation)."""

from __future__ import annotations

import math

import pytest
import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import SamplerSettingsError, UnknownCharactersError
from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.sample.generate import (
    SamplerSettings,
    apply_repetition_penalty,
    apply_temperature,
    apply_top_k,
    apply_top_p,
    encode_prompt,
    filter_stages,
    generate,
    unusual_settings,
    validate,
)

V = 16


def kept(logits: torch.Tensor) -> int:
    return int(torch.isfinite(logits).sum().item())


@pytest.fixture(scope="module")
def model() -> MiniGPT:
    torch.manual_seed(0)
    config = MiniGPTConfig(vocab_size=V, block_size=32, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)
    return MiniGPT(config).eval()


# --- settings ---------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [-0.1, float("nan"), float("inf")])
def test_invalid_temperature_raises(temperature):
    with pytest.raises(SamplerSettingsError, match="temperature"):
        validate(SamplerSettings(temperature=temperature), V)


@pytest.mark.parametrize(
    "field, value",
    [
        ("top_k", -1),
        ("top_p", 0.0),
        ("top_p", 1.01),
        ("top_p", -0.5),
        ("repetition_penalty", 0.0),
        ("repetition_penalty", -1.0),
        ("max_new_tokens", -1),
        ("seed", 1.5),
    ],
)
def test_invalid_values_raise_naming_the_setting(field, value):
    with pytest.raises(SamplerSettingsError, match=field):
        validate(SamplerSettings(**{field: value}), V)


def test_defaults_are_valid_and_unremarkable():
    assert validate(SamplerSettings(), V) == []
    assert unusual_settings(SamplerSettings()) == []


def test_top_k_above_vocab_is_clamped_with_notice():
    notices = validate(SamplerSettings(top_k=V + 10), V)
    assert len(notices) == 1 and str(V) in notices[0]
    logits = torch.randn(V)
    assert torch.equal(apply_top_k(logits, V + 10), logits)


@pytest.mark.parametrize("top_k", [0, None])
def test_top_k_zero_or_none_is_off(top_k):
    logits = torch.randn(V)
    assert torch.equal(apply_top_k(logits, top_k), logits)


def test_top_k_keeps_k_largest():
    logits = torch.tensor([0.1, 3.0, -1.0, 2.0, 0.5])
    out = apply_top_k(logits, 2)
    assert torch.isfinite(out).tolist() == [False, True, False, True, False]


@pytest.mark.parametrize(
    "settings, phrase",
    [
        (SamplerSettings(repetition_penalty=1.5), "spelling"),
        (SamplerSettings(temperature=2.5), "temperature"),
        (SamplerSettings(top_p=0.3), "top_p"),
        (SamplerSettings(top_k=1), "greedy"),
    ],
)
def test_unusual_but_valid_settings_warn(settings, phrase):
    assert validate(settings, V) == []
    warnings = unusual_settings(settings)
    assert any(phrase in w for w in warnings), warnings


# --- filters ----------------------------------------------------------------------------


def test_temperature_zero_keeps_only_argmax():
    logits = torch.tensor([0.1, 3.0, -1.0, 2.0])
    out = apply_temperature(logits, 0)
    assert kept(out) == 1 and int(out.argmax()) == 1


def test_temperature_scales_logits():
    logits = torch.tensor([1.0, -2.0])
    assert torch.allclose(apply_temperature(logits, 0.5), torch.tensor([2.0, -4.0]))


PROBS = torch.tensor([0.5, 0.3, 0.2])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("top_p, expected", [(0.6, 2), (0.5, 1), (0.8, 2), (0.81, 3), (1.0, 3)])
def test_top_p_keeps_the_token_that_crosses_it(dtype, top_p, expected):
    assert kept(apply_top_p(PROBS.log().to(dtype), top_p)) == expected


def test_top_p_boundary_survives_float32_rounding_below():
    # GIVEN a first probability that rounds just below 0.5 in float32
    logits = torch.tensor([0.5 - 3e-8, 0.3, 0.2 + 3e-8], dtype=torch.float64).log().float()
    # THEN top_p 0.5 still counts it as reaching 0.5
    assert kept(apply_top_p(logits, 0.5)) == 1


def test_top_p_always_keeps_one_token():
    logits = torch.randn(V)
    out = apply_top_p(logits, 1e-9)
    assert kept(out) == 1 and int(out.argmax()) == int(logits.argmax())


def test_top_p_works_on_batches():
    logits = torch.stack([PROBS.log(), PROBS.flip(0).log()])
    out = apply_top_p(logits, 0.6)
    assert torch.isfinite(out).tolist() == [[True, True, False], [False, True, True]]


def test_repetition_penalty_hf_semantics_counts_repeats_once():
    logits = torch.tensor([2.0, -2.0, 1.0, -1.0])
    # token 0 appears three times, token 1 twice: each is penalised once
    out = apply_repetition_penalty(logits, [0, 1, 0, 1, 0], 2.0)
    assert out.tolist() == [1.0, -4.0, 1.0, -1.0]


def test_repetition_penalty_batched_and_off():
    logits = torch.tensor([[2.0, -2.0], [2.0, -2.0]])
    out = apply_repetition_penalty(logits, torch.tensor([[0], [1]]), 2.0)
    assert out.tolist() == [[1.0, -2.0], [2.0, -4.0]]
    assert torch.equal(apply_repetition_penalty(logits[0], [0], 1.0), logits[0])


def test_filter_stages_reports_each_stage_in_order():
    logits = PROBS.log()
    stages = filter_stages(logits, [0], SamplerSettings(repetition_penalty=1.2, top_k=2, top_p=0.5))
    assert [s.name for s in stages] == ["model", "repetition penalty", "temperature", "top-k", "top-p"]
    assert [s.survivors for s in stages] == [3, 3, 3, 2, 1]
    assert all(s.probs.dtype == torch.float32 and s.probs.shape == (3,) for s in stages)
    assert all(math.isclose(s.probs.sum().item(), 1.0, rel_tol=1e-5) for s in stages)
    assert stages[1].probs[0] < stages[0].probs[0]  # the penalty moved mass away from token 0


# --- generation ---------------------------------------------------------------------------


def test_kv_cache_greedy_equals_full_recomputation_within_and_past_block(model):
    prompt = [1, 2, 3, 4, 5]
    settings = SamplerSettings(temperature=0, max_new_tokens=60)  # 65 tokens > block_size 32
    cached = generate(model, prompt, settings, use_cache=True)
    full = generate(model, prompt, settings, use_cache=False)
    within = 32 - len(prompt)
    assert len(cached) == 60
    assert cached[:within] == full[:within]
    assert cached == full


def test_cache_is_prefilled_then_fed_one_token_until_block_is_full(model, monkeypatch):
    calls = []
    forward = model.forward

    def spy(idx, targets=None, cache=None):
        calls.append((idx.shape[1], cache is not None))
        return forward(idx, targets, cache)

    monkeypatch.setattr(model, "forward", spy)
    generate(model, [1] * 30, SamplerSettings(temperature=0, max_new_tokens=5))
    # 30-token prefill, then single tokens up to 32 filled, then windows of 32 without the cache
    assert calls == [(30, True), (1, True), (1, True), (32, False), (32, False)]


def test_temperature_zero_generation_is_argmax(model):
    prompt = [3, 1, 4]
    new = generate(model, prompt, SamplerSettings(temperature=0, max_new_tokens=1))
    logits, _ = model(torch.tensor([prompt]))
    assert new == [int(logits[0, -1].argmax())]


def test_seed_reproduces_samples(model):
    settings = SamplerSettings(temperature=1.5, max_new_tokens=40, seed=123)
    first = generate(model, [1, 2], settings)
    assert generate(model, [1, 2], settings) == first
    assert generate(model, [1, 2], SamplerSettings(temperature=1.5, max_new_tokens=40, seed=7)) != first


def test_generation_restores_training_mode(model):
    model.train()
    try:
        generate(model, [1], SamplerSettings(max_new_tokens=2, seed=0))
        assert model.training
    finally:
        model.eval()


def test_on_token_streams_and_can_stop_early(model):
    seen = []
    new = generate(
        model, [1], SamplerSettings(max_new_tokens=20, seed=0), on_token=lambda t: seen.append(t) or len(seen) < 5
    )
    assert new == seen and len(new) == 5


def test_empty_prompt_raises(model):
    with pytest.raises(SamplerSettingsError, match="empty prompt"):
        generate(model, [], SamplerSettings())


def test_invalid_settings_raise_before_generating(model):
    with pytest.raises(SamplerSettingsError):
        generate(model, [1], SamplerSettings(temperature=-1))


class LastPositionOnly(torch.nn.Module):
    """A model that, without targets, returns logits for the last position only: (B, 1, V)."""

    def __init__(self, inner: MiniGPT):
        super().__init__()
        self.inner = inner
        self.config = inner.config

    def forward(self, idx, targets=None):
        logits, loss = self.inner(idx, targets)
        return (logits if targets is not None else logits[:, -1:, :]), loss


def test_models_returning_only_last_position_logits_work(model):
    settings = SamplerSettings(temperature=0, max_new_tokens=40)
    assert generate(LastPositionOnly(model), [1, 2, 3], settings) == generate(model, [1, 2, 3], settings)


def test_prompt_with_unknown_chars_is_reported_before_generating():
    tokenizer = CharTokenizer.from_text("abc \n")
    assert encode_prompt(tokenizer, "cab") == [4, 2, 3]  # vocab "\n", " ", a, b, c
    with pytest.raises(UnknownCharactersError) as info:
        encode_prompt(tokenizer, "abxyx")
    assert set(info.value.unknown) == {"x", "y"} and info.value.unknown["x"] == [2, 4]
    assert "'x'" in str(info.value) and "'y'" in str(info.value)


def test_empty_prompt_is_reported_by_encode_prompt():
    with pytest.raises(SamplerSettingsError, match="empty prompt"):
        encode_prompt(CharTokenizer.from_text("ab"), "")


# --- CLI ----------------------------------------------------------------------------------


def test_sample_cli_streams_reproducible_text(tmp_path, capsys):
    import argparse

    from minigpt.cli import sample
    from minigpt.io.workspace import Workspace
    from minigpt.model.checkpoint import save_checkpoint

    # GIVEN a workspace with a tokenizer and an untrained checkpoint
    ws = Workspace(tmp_path)
    tokenizer = CharTokenizer.from_text("hello world\n")
    ws.tokenizer.parent.mkdir(parents=True)
    tokenizer.save(ws.tokenizer)
    config = MiniGPTConfig(
        vocab_size=tokenizer.vocab_size, block_size=8, embedding_dim=16, num_heads=2, num_layers=1, dropout=0.0
    )
    ws.checkpoints.mkdir()
    save_checkpoint(
        ws.latest_checkpoint,
        {
            "model_state_dict": MiniGPT(config).state_dict(),
            "config": config.to_dict(),
            "step": 1,
            "tokenizer_fingerprint": tokenizer.fingerprint,
        },
    )
    parser = argparse.ArgumentParser()
    parser.add_argument("--workspace")
    sample.add_arguments(parser)
    argv = [
        "--workspace",
        str(tmp_path),
        "--prompt",
        "he",
        "--max-new-tokens",
        "20",
        "--seed",
        "3",
        "--top-k",
        "50",
        "--device",
        "cpu",
    ]
    # WHEN sampling twice with the same seed, with and without the cache
    assert sample.run(parser.parse_args(argv)) == 0
    first = capsys.readouterr()
    assert sample.run(parser.parse_args(argv + ["--no-cache"])) == 0
    # THEN the prompt plus 20 characters and a newline reach stdout, notices reach stderr
    assert first.out.startswith("he") and first.out.endswith("\n") and len(first.out) == 2 + 20 + 1
    assert "top_k 50" in first.err
    assert capsys.readouterr().out == first.out


class LazyScaleLM(torch.nn.Module):
    """A user's model that builds a buffer the first time it sees a longer input (as rotary caches
    do), then uses it in the computation autograd saves."""

    def __init__(self, vocab: int = 8, width: int = 4) -> None:
        super().__init__()
        self.config = {"block_size": 16, "vocab_size": vocab}
        self.emb = torch.nn.Embedding(vocab, width)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("scale", None, persistent=False)

    def forward(self, idx, targets=None):
        T = idx.shape[1]
        if self.scale is None or self.scale.shape[0] < T:
            self.scale = torch.linspace(1.0, 2.0, 16)
        logits = self.head(self.emb(idx) * self.scale[:T, None])
        return logits, None


def test_sampling_leaves_a_lazily_built_buffer_usable_by_the_next_training_step():
    """The watch samples from the user's model mid-run: a buffer built during generation must not be
    an inference tensor, or the next backward raises inside the user's loop."""
    model = LazyScaleLM()
    generate(model, [1, 2, 3], SamplerSettings(max_new_tokens=4, temperature=1.0), use_cache=False)
    assert model.scale is not None
    logits, _ = model(torch.tensor([[1, 2, 3, 4]]))
    logits.sum().backward()  # raised "Inference tensors cannot be saved for backward" under inference_mode
    assert model.emb.weight.grad is not None
