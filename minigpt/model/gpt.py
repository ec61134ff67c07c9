"""A small character-level GPT (nanoGPT-shaped) with an optional KV cache for generation."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.modules.module as module_hooks

from minigpt.errors import ConfigError


@dataclass
class MiniGPTConfig:
    vocab_size: int = 65  # number of distinct characters
    block_size: int = 128  # longest context the model sees
    embedding_dim: int = 128  # width of the residual stream
    num_heads: int = 4  # attention heads; must divide embedding_dim
    num_layers: int = 4  # transformer blocks
    expansion_factor: int = 4  # MLP hidden width = expansion_factor * embedding_dim
    dropout: float = 0.1  # on attention weights, residual branches and embeddings

    def __post_init__(self) -> None:
        for name in ("vocab_size", "block_size", "embedding_dim", "num_heads", "num_layers", "expansion_factor"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"MiniGPTConfig.{name} must be a positive integer; found {value!r}")
        if self.embedding_dim % self.num_heads:
            raise ConfigError(f"embedding_dim ({self.embedding_dim}) must be divisible by num_heads ({self.num_heads})")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ConfigError(f"MiniGPTConfig.dropout must be in [0, 1); found {self.dropout!r}")

    @classmethod
    def from_dict(cls, data: dict) -> MiniGPTConfig:
        if not isinstance(data, dict):
            raise ConfigError(f"model config must be a dict; found {type(data).__name__}")
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown MiniGPTConfig field(s): {unknown}; expected a subset of {sorted(known)}")
        try:
            return cls(**data)
        except TypeError as exc:
            raise ConfigError(f"invalid MiniGPTConfig: {exc}") from None

    def to_dict(self) -> dict:
        return asdict(self)


class KVCache:
    """Preallocated keys/values per layer, `[B, H, block_size, head_dim]`, filled left to right.

    Left uninitialised (`torch.empty`): attention reads only the first `length` positions, each
    written before it is read, and zero-filling every layer cost more than a short generation."""

    def __init__(
        self, config: MiniGPTConfig, batch_size: int, device: str | torch.device, dtype: torch.dtype = torch.float32
    ) -> None:
        head_dim = config.embedding_dim // config.num_heads
        shape = (batch_size, config.num_heads, config.block_size, head_dim)
        self.keys = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.values = [torch.empty(shape, device=device, dtype=dtype) for _ in range(config.num_layers)]
        self.length = 0  # positions filled
        self.capacity = config.block_size
        # one-row products on the CPU run against a transposed copy of each weight, made on first
        # use: MKL's matrix-vector product is slower over an (out, in) weight than an (in, out) one,
        # and a cached generation step is mostly such products (docs/performance.md). Keyed by
        # layer, with the weight's version at the copy.
        self.transposed: dict[nn.Linear, tuple[int, torch.Tensor]] = {}
        self.transposes = device is None or torch.device(device).type == "cpu"

    def reset(self) -> None:
        self.length = 0

    def linear(self, layer: nn.Linear, x: torch.Tensor) -> torch.Tensor:
        """`layer(x)`, computed for one row against the transposed copy where nothing can tell the
        difference: a plain `nn.Linear` with no hooks on it or on every module, its weight not
        changed since the copy. Anything else (a hook, a replaced or patched layer, a batch of
        rows, another device) is the layer's own call."""
        if not self.transposes or x.numel() != x.shape[-1] or not _plain_linear(layer):
            return layer(x)
        weight = layer.weight
        version, transposed = self.transposed.get(layer, (-1, None))
        if transposed is None or version != weight._version:
            transposed = weight.detach().t().contiguous()  # (in, out)
            self.transposed[layer] = (weight._version, transposed)
        y = x.reshape(1, -1) @ transposed
        if layer.bias is not None:
            y = y + layer.bias
        return y.view(*x.shape[:-1], -1)


def _plain_linear(layer: nn.Module) -> bool:
    """An `nn.Linear` whose call is exactly `F.linear(x, weight, bias)`: its own class, its own
    forward, no hooks of its own and no global ones."""
    if type(layer) is not nn.Linear or "forward" in vars(layer) or torch.is_grad_enabled():
        return False
    if layer._forward_hooks or layer._forward_pre_hooks:
        return False
    return not (module_hooks._global_forward_hooks or module_hooks._global_forward_pre_hooks)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.num_heads = config.num_heads
        self.qkv = nn.Linear(config.embedding_dim, 3 * config.embedding_dim)
        self.proj = nn.Linear(config.embedding_dim, config.embedding_dim)
        self.dropout = config.dropout
        self.causal = True  # False only when a check injects the no_causal_mask fault
        self.resid_dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        B, T, C = x.shape
        # (B, T, 3C) -> (3, B, H, T, head_dim) in one view and one permute: at one token per step
        # (generation with the cache) the ops' dispatch, not their arithmetic, is the cost
        qkv = self.qkv(x) if cache is None else cache.linear(self.qkv, x)
        q, k, v = qkv.view(B, T, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4).unbind(0)
        mask, is_causal = None, self.causal
        if cache is not None:
            start = cache.length
            cache.keys[layer][:, :, start : start + T] = k
            cache.values[layer][:, :, start : start + T] = v
            k = cache.keys[layer][:, :, : start + T]
            v = cache.values[layer][:, :, : start + T]
            if start > 0:
                # new queries sit at positions start..start+T-1 and may see every key up to themselves
                is_causal = False
                if T > 1 and self.causal:
                    q_pos = torch.arange(start, start + T, device=x.device)[:, None]
                    mask = torch.arange(start + T, device=x.device)[None, :] <= q_pos
        dropout = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout, is_causal=is_causal)
        y = y.transpose(1, 2).reshape(B, T, C)  # (B, T, C)
        y = self.proj(y) if cache is None else cache.linear(self.proj, y)
        return self.resid_dropout(y)  # called in eval too: a hook or a replaced module must see it


class MLP(nn.Module):
    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        hidden = config.expansion_factor * config.embedding_dim
        self.fc = nn.Linear(config.embedding_dim, hidden)
        self.act = nn.GELU(approximate="tanh")  # GPT-2's GELU; cheaper backward than erf
        self.proj = nn.Linear(hidden, config.embedding_dim)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        if cache is None:
            return self.dropout(self.proj(self.act(self.fc(x))))
        return self.dropout(cache.linear(self.proj, self.act(cache.linear(self.fc, x))))


class Block(nn.Module):
    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(config.embedding_dim)
        self.attn = CausalSelfAttention(config)
        self.ln2 = nn.LayerNorm(config.embedding_dim)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor, cache: KVCache | None = None, layer: int = 0) -> torch.Tensor:
        x = x + self.attn(self.ln1(x), cache, layer)
        return x + (self.mlp(self.ln2(x)) if cache is None else self.mlp(self.ln2(x), cache))


class MiniGPT(nn.Module):
    supports_kv_cache = True

    def __init__(self, config: MiniGPTConfig):
        super().__init__()
        self.config = config
        self.token_embedding = nn.Embedding(config.vocab_size, config.embedding_dim)
        self.position_embedding = nn.Embedding(config.block_size, config.embedding_dim)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.ln_f = nn.LayerNorm(config.embedding_dim)
        self.lm_head = nn.Linear(config.embedding_dim, config.vocab_size, bias=False)
        self.lm_head.weight = self.token_embedding.weight  # weight tying, as in GPT-2 and nanoGPT
        self.apply(self._init_weights)
        # scaled init of the residual projections (GPT-2): keeps the residual stream's variance
        # from growing with depth, so the first loss sits near log(vocab_size)
        for name, p in self.named_parameters():
            if name.endswith("proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.num_layers))

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def make_cache(self, batch_size: int, device: str | torch.device | None = None) -> KVCache:
        device = device or self.token_embedding.weight.device
        return KVCache(self.config, batch_size, device, self.token_embedding.weight.dtype)

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None, cache: KVCache | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T = idx.shape
        start = cache.length if cache is not None else 0
        if start + T > self.config.block_size:
            raise ValueError(
                f"sequence of {start + T} tokens exceeds block_size {self.config.block_size}; crop the context"
            )
        pos = torch.arange(start, start + T, device=idx.device)  # on the input's device
        x = self.drop(self.token_embedding(idx) + self.position_embedding(pos))  # (B, T, C)
        for i, block in enumerate(self.blocks):
            x = block(x, cache, i)
        if cache is not None:
            cache.length += T
        x = self.ln_f(x)
        logits = self.lm_head(x) if cache is None else cache.linear(self.lm_head, x)  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(B * T, -1), targets.reshape(B * T))
        return logits, loss

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
