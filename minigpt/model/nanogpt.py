"""nanoGPT's model under nanoGPT's own parameter names (`transformer.wte/wpe/h.N.ln_1/attn.c_attn/
attn.c_proj/ln_2/mlp.c_fc/mlp.c_proj/ln_f`, `lm_head` tied to `wte`, optional biases), so a nanoGPT
checkpoint loads strictly with no renaming. Importing a nanoGPT run as a workspace is
`minigpt.importers.nanogpt` (`minigpt import nanogpt`)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import cast

import torch
import torch.nn as nn
import torch.nn.functional as F

from minigpt.errors import ConfigError
from minigpt.model.gpt import MiniGPT, MiniGPTConfig

MODEL_CLASS = "minigpt.model.nanogpt.GPT"  # what an imported checkpoint's config names (see model/factory.py)


# --- nanoGPT's model, parameter for parameter --------------------------------------------------


@dataclass
class GPTConfig:
    block_size: int = 1024  # longest context
    vocab_size: int = 50304  # nanoGPT's default: GPT-2's 50257 padded to a multiple of 64
    n_layer: int = 12  # transformer blocks
    n_head: int = 12  # attention heads; must divide n_embd
    n_embd: int = 768  # width of the residual stream
    dropout: float = 0.0  # on embeddings, attention weights and residual branches
    bias: bool = True  # biases in Linears and LayerNorms, like GPT-2

    def __post_init__(self) -> None:
        for name in ("block_size", "vocab_size", "n_layer", "n_head", "n_embd"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"GPTConfig.{name} must be a positive integer; found {value!r}")
        if self.n_embd % self.n_head:
            raise ConfigError(f"n_embd ({self.n_embd}) must be divisible by n_head ({self.n_head})")
        if not isinstance(self.bias, bool):
            raise ConfigError(f"GPTConfig.bias must be true or false; found {self.bias!r}")
        if isinstance(self.dropout, bool) or not isinstance(self.dropout, (int, float)) or not 0 <= self.dropout < 1:
            raise ConfigError(f"GPTConfig.dropout must be in [0, 1); found {self.dropout!r}")

    @classmethod
    def from_dict(cls, data: dict) -> GPTConfig:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(
                f"unknown nanoGPT model_args field(s): {unknown}; nanoGPT's GPTConfig has {sorted(known)}",
                causes=["the run used a modified model.py: pass it with --model FILE.py:GPT instead"],
            )
        return cls(**data)

    def to_dict(self) -> dict:
        return asdict(self)

    def sizing(self) -> MiniGPTConfig:
        """The MiniGPT of the same shape, for minigpt's memory estimate (same blocks, 4x MLP)."""
        return MiniGPTConfig(self.vocab_size, self.block_size, self.n_embd, self.n_head, self.n_layer, 4, 0.0)


class LayerNorm(nn.Module):
    """LayerNorm with an optional bias (nanoGPT's: `bias=False` leaves no `.bias` in the state dict)."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)  # kept for nanoGPT's module tree; SDPA applies dropout_p
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head, self.n_embd, self.dropout = config.n_head, config.n_embd, config.dropout
        self.causal = True  # False only when a check injects the no_causal_mask fault

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(
            q, k, v, dropout_p=self.dropout if self.training else 0.0, is_causal=self.causal
        )
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # (B, T, C): heads side by side again
        return self.resid_dropout(self.c_proj(y))


class MLP(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.c_proj(self.gelu(self.c_fc(x))))


class Block(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """nanoGPT's GPT: tied `transformer.wte` / `lm_head`, pre-LN blocks, GELU MLP, learned positions.

    Without targets `forward` returns only the last position's logits, `(B, 1, V)`, as nanoGPT does."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = config
        self.transformer = nn.ModuleDict(
            dict(
                wte=nn.Embedding(config.vocab_size, config.n_embd),
                wpe=nn.Embedding(config.block_size, config.n_embd),
                drop=nn.Dropout(config.dropout),
                h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
                ln_f=LayerNorm(config.n_embd, bias=config.bias),
            )
        )
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        cast(nn.Embedding, self.transformer["wte"]).weight = self.lm_head.weight  # weight tying
        self.apply(self._init_weights)
        for name, p in self.named_parameters():  # GPT-2's scaled init of the residual projections
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    _init_weights = staticmethod(MiniGPT._init_weights)  # GPT-2's init, as nanoGPT and our MiniGPT use

    def forward(
        self, idx: torch.Tensor, targets: torch.Tensor | None = None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        b, t = idx.size()
        if t > self.config.block_size:
            raise ValueError(f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}")
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        tr = self.transformer
        x = tr["drop"](tr["wte"](idx) + tr["wpe"](pos))  # (B, T, C)
        for block in cast(nn.ModuleList, tr["h"]):
            x = block(x)
        x = tr["ln_f"](x)
        if targets is not None:
            logits = self.lm_head(x)  # (B, T, V)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
            return logits, loss
        return self.lm_head(x[:, [-1], :]), None  # (B, 1, V): nanoGPT's inference shortcut
