"""Per-parameter gradient statistics (`minigpt.model.gradstats`): the flags every gradient table
shares, their precedence, and the norms of `grad_table` and `grad_rows` against torch's own, on a
model with a tied head, a frozen layer, a layer the loss never reaches and a non-finite gradient."""

from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn as nn

from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.model.gradstats import grad_flags, grad_rows, grad_table, row_params, tensor_norms, total_norm


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.frozen = nn.Linear(4, 4)
        self.frozen.requires_grad_(False)
        self.unused = nn.Linear(4, 4)  # in the model, never in the forward
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight  # tied, as GPT heads are

    def forward(self, x):
        return self.head(self.frozen(self.emb(x)))


@pytest.mark.parametrize(
    ("requires_grad", "norm", "flags"),
    [
        (False, None, ["frozen"]),
        (False, math.nan, ["frozen"]),  # frozen first: a frozen weight's gradient is not the point
        (True, None, ["no_grad"]),
        (True, math.nan, ["nonfinite"]),
        (True, math.inf, ["nonfinite"]),
        (True, 0.0, ["zero"]),
        (True, 1e-30, []),
        (True, 2.5, []),
    ],
)
def test_flags_and_their_precedence(requires_grad, norm, flags):
    assert grad_flags(requires_grad, norm) == flags


def backwarded() -> Tied:
    torch.manual_seed(0)
    model = Tied()
    model(torch.randint(0, 10, (2, 5))).square().mean().backward()
    return model


def test_grad_table_norms_are_torchs_and_the_tied_weight_is_one_row_naming_its_alias():
    model = backwarded()
    rows, total = grad_table(model)
    by_name = {r["name"]: r for r in rows}
    assert list(by_name) == ["emb.weight", "frozen.weight", "frozen.bias", "unused.weight", "unused.bias"]
    assert by_name["emb.weight"]["tied_with"] == ["head.weight"]
    assert by_name["emb.weight"]["grad_norm"] == pytest.approx(torch.linalg.vector_norm(model.emb.weight.grad).item())
    assert by_name["emb.weight"]["weight_norm"] == pytest.approx(torch.linalg.vector_norm(model.emb.weight).item())
    assert by_name["frozen.weight"]["flags"] == ["frozen"] and by_name["frozen.weight"]["grad_norm"] is None
    assert by_name["unused.weight"]["flags"] == ["no_grad"] and by_name["unused.bias"]["grad_norm"] is None
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert total == pytest.approx(torch.nn.utils.get_total_norm(grads).item())
    json.dumps(rows)  # plain values: what a check's report and the pane carry


def test_a_nonfinite_gradient_is_flagged_and_left_out_of_the_total():
    model = backwarded()
    clean = grad_table(model)[1]
    model.unused.weight.grad = torch.full_like(model.unused.weight, math.nan)
    rows, total = grad_table(model)
    row = next(r for r in rows if r["name"] == "unused.weight")
    assert row["flags"] == ["nonfinite"] and math.isnan(row["grad_norm"])
    assert total == pytest.approx(clean)


def test_grad_table_of_minigpt_matches_clip_grad_norm():
    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=20, block_size=8, embedding_dim=16, num_heads=2, num_layers=1))
    x = torch.randint(0, 20, (2, 8))
    model(x, x)[1].backward()
    rows, total = grad_table(model)
    clipped = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item()
    assert total == pytest.approx(clipped, rel=1e-5)
    assert all(r["flags"] == [] for r in rows), [r for r in rows if r["flags"]]


def test_tensor_norms_match_vector_norm():
    ts = [torch.randn(3, 4), torch.zeros(5), torch.randn(())]
    assert [n.item() for n in tensor_norms(ts)] == pytest.approx([torch.linalg.vector_norm(t).item() for t in ts])
    assert tensor_norms([]) == []


def test_total_norm_is_clip_grad_norms_bit_for_bit():
    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=20, block_size=8, embedding_dim=16, num_heads=2, num_layers=2))
    x = torch.randint(0, 20, (2, 8))
    model(x, x)[1].backward()
    grads = [p.grad for p in model.parameters()]
    ours = total_norm(grads)
    assert torch.equal(ours, torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9))
    assert torch.equal(ours, torch.nn.utils.get_total_norm(grads))
    half = [g.half() for g in grads]  # another dtype: still one norm of all of them
    assert total_norm(half).item() == pytest.approx(ours.item(), rel=1e-3)


def test_grad_rows_write_nonfinite_norms_as_strings_for_json():
    model = backwarded()
    named = list(model.named_parameters())
    norms = {id(model.emb.weight): 1.5, id(model.unused.weight): math.inf}
    rows = grad_rows(row_params(named), [norms.get(id(p)) for _, p in named], [1.0] * len(named))
    by_name = {r["name"]: r for r in rows}
    assert by_name["emb.weight"]["grad_norm"] == 1.5 and by_name["emb.weight"]["flags"] == []
    assert by_name["unused.weight"] == {
        "name": "unused.weight",
        "shape": [4, 4],
        "numel": 16,
        "grad_norm": "inf",
        "weight_norm": 1.0,
        "flags": ["nonfinite"],
    }
    assert by_name["frozen.weight"]["flags"] == ["frozen"] and by_name["unused.bias"]["flags"] == ["no_grad"]
    json.loads(json.dumps(rows, allow_nan=False))  # strict JSON: no NaN or Infinity tokens
