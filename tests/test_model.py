"""MiniGPT: shapes, initial loss, causality, KV cache equivalence, config validation."""

from __future__ import annotations

import math

import pytest
import torch

from minigpt.errors import ConfigError
from minigpt.model.gpt import MiniGPT, MiniGPTConfig

V, T = 37, 16


def tiny_model(**overrides) -> MiniGPT:
    cfg = dict(vocab_size=V, block_size=T, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)
    cfg.update(overrides)
    return MiniGPT(MiniGPTConfig(**cfg)).eval()


def test_logits_shape_is_batch_time_vocab():
    model = tiny_model()
    idx = torch.randint(V, (3, 10))
    logits, loss = model(idx)
    assert logits.shape == (3, 10, V)
    assert loss is None


def test_loss_is_a_finite_scalar():
    model = tiny_model()
    idx = torch.randint(V, (2, T))
    _, loss = model(idx, torch.randint(V, (2, T)))
    assert loss.dim() == 0
    assert torch.isfinite(loss)


def test_initial_loss_is_near_log_vocab_size():
    model = tiny_model(num_layers=4)
    idx, targets = torch.randint(V, (8, T)), torch.randint(V, (8, T))
    _, loss = model(idx, targets)
    assert abs(loss.item() - math.log(V)) < 0.3


def test_lm_head_is_tied_to_token_embedding():
    model = tiny_model()
    assert model.lm_head.weight is model.token_embedding.weight


def test_positions_are_created_on_the_inputs_device():
    # GIVEN a model and input on the meta device (no memory, no compute), a position index made
    # with a bare `torch.arange(T)` would land on the CPU: a real GPU run would then fail or sync
    with torch.device("meta"):
        model = tiny_model()
    seen = []
    model.position_embedding.register_forward_hook(lambda mod, args, out: seen.append(args[0].device))
    idx = torch.zeros((2, 5), dtype=torch.long, device="meta")
    logits, _ = model(idx)
    assert seen == [torch.device("meta")]
    assert logits.shape == (2, 5, V)


def test_future_tokens_do_not_change_earlier_logits():
    model = tiny_model()
    idx = torch.randint(V, (2, T))
    t = 7
    changed = idx.clone()
    changed[:, t + 1 :] = (changed[:, t + 1 :] + 1) % V
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, : t + 1], b[:, : t + 1], rtol=0, atol=1e-6)
    assert not torch.allclose(a[:, t + 1 :], b[:, t + 1 :])  # the change did reach later positions


def test_forward_rejects_sequences_longer_than_block_size():
    model = tiny_model()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros((1, T + 1), dtype=torch.long))


def test_kv_cache_matches_full_forward():
    # GIVEN a prompt fed as two chunks, then the rest one token at a time
    model = tiny_model()
    idx = torch.randint(V, (2, T))
    full, _ = model(idx)
    cache = model.make_cache(batch_size=2)
    pieces = [model(idx[:, :5], cache=cache)[0], model(idx[:, 5:9], cache=cache)[0]]
    pieces += [model(idx[:, i : i + 1], cache=cache)[0] for i in range(9, T)]
    assert cache.length == T
    torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_kv_cache_never_reads_a_slot_before_writing_it():
    # GIVEN a cache whose every slot holds NaN (torch.empty may hold anything), after a reset too
    model = tiny_model()
    idx = torch.randint(V, (1, T))
    full, _ = model(idx)
    cache = model.make_cache(batch_size=1)
    for _ in range(2):
        for t in cache.keys + cache.values:
            t.fill_(math.nan)
        cache.reset()
        # WHEN the prompt is prefilled, then fed one token at a time
        pieces = [model(idx[:, :3], cache=cache)[0]] + [model(idx[:, i : i + 1], cache=cache)[0] for i in range(3, T)]
        # THEN no NaN reached the logits: only written positions were attended to
        torch.testing.assert_close(torch.cat(pieces, dim=1), full, rtol=1e-5, atol=1e-5)


def test_kv_cache_refuses_to_overflow_block_size():
    model = tiny_model()
    cache = model.make_cache(batch_size=1)
    model(torch.zeros((1, T), dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros((1, 1), dtype=torch.long), cache=cache)


def decode(model: MiniGPT, idx: torch.Tensor, cache) -> torch.Tensor:
    """The prompt's first 3 tokens prefilled, then one token a step, as generation feeds them."""
    pieces = [model(idx[:, :3], cache=cache)[0]]
    pieces += [model(idx[:, i : i + 1], cache=cache)[0] for i in range(3, idx.shape[1])]
    return torch.cat(pieces, dim=1)


@torch.no_grad()
def test_one_token_steps_use_transposed_weights_and_match_the_full_forward():
    # GIVEN generation's setting: no autograd, one sequence, one token a step
    model = tiny_model()
    idx = torch.randint(V, (1, T))
    cache = model.make_cache(batch_size=1)
    # THEN the one-row products ran against the cache's copies, and the logits are the full forward's
    torch.testing.assert_close(decode(model, idx, cache), model(idx)[0], rtol=1e-5, atol=1e-5)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert set(cache.transposed) == set(linears)


@torch.no_grad()
def test_a_weight_changed_in_place_after_its_copy_is_copied_again():
    # GIVEN a layer whose transposed copy was made, then its weight edited in place (a check, an
    # optimizer step between two generations that share a cache)
    model = tiny_model()
    cache, fc, x = model.make_cache(batch_size=1), model.blocks[0].mlp.fc, torch.randn(1, 1, 32)
    torch.testing.assert_close(cache.linear(fc, x), fc(x))
    fc.weight.mul_(3.0)
    # THEN the next one-row product uses the edited weight
    torch.testing.assert_close(cache.linear(fc, x), fc(x))


@torch.no_grad()
def test_a_hooked_or_patched_layer_is_called_itself_in_one_token_steps():
    # GIVEN a forward hook on one layer and another layer's forward replaced (what the checks and a
    # user's instrumentation do), and a global forward hook counted separately
    model = tiny_model()
    idx = torch.randint(V, (1, T))
    seen = []
    model.blocks[0].attn.qkv.register_forward_hook(lambda m, args, out: seen.append(args[0].shape[1]))
    proj = model.blocks[1].mlp.proj
    proj.forward = lambda x: torch.nn.functional.linear(x, proj.weight, proj.bias) * 0.0  # zeroes the branch
    cache = model.make_cache(batch_size=1)
    # THEN the hook saw the prefill and every one-token step, and the patched layer was the one used
    torch.testing.assert_close(decode(model, idx, cache), model(idx)[0], rtol=1e-5, atol=1e-5)
    assert seen == [3] + [1] * (T - 3) + [T]
    assert model.blocks[0].attn.qkv not in cache.transposed and proj not in cache.transposed
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(lambda m, args, out: calls.append(type(m)))
    try:
        cache.reset()
        decode(model, idx, cache)
    finally:
        handle.remove()
    linears = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    assert calls.count(torch.nn.Linear) == linears * (T - 2)  # every Linear, every call


def test_with_autograd_on_the_layer_is_called_itself():
    # GIVEN autograd on (a training step that decodes through a cache): a detached copy would cut the graph
    model = tiny_model()
    cache, fc = model.make_cache(batch_size=1), model.blocks[0].mlp.fc
    cache.linear(fc, torch.randn(1, 1, 32)).sum().backward()
    assert fc.weight.grad is not None and not cache.transposed


@pytest.mark.parametrize(
    "overrides",
    [
        dict(vocab_size=0),
        dict(block_size=-1),
        dict(num_layers=1.5),
        dict(num_heads=True),
        dict(embedding_dim=30, num_heads=4),  # not divisible
        dict(dropout=1.0),
        dict(dropout=-0.1),
    ],
)
def test_invalid_config_raises_config_error(overrides):
    with pytest.raises(ConfigError):
        MiniGPTConfig(**overrides)


def test_from_dict_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="n_embd"):
        MiniGPTConfig.from_dict({"vocab_size": 10, "n_embd": 64})


def test_from_dict_rejects_non_dict():
    with pytest.raises(ConfigError, match="dict"):
        MiniGPTConfig.from_dict([("vocab_size", 10)])


def test_config_dict_round_trip():
    cfg = MiniGPTConfig(vocab_size=11, block_size=8, embedding_dim=16, num_heads=2)
    assert MiniGPTConfig.from_dict(cfg.to_dict()) == cfg
