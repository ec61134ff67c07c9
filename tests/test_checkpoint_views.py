"""A checkpoint tensor whose shape claims more than its file stores (a stride-0 expanded view: 1
element stored, terabytes claimed) is refused by name before anything allocates its shape."""

from __future__ import annotations

import torch

from minigpt.cli import main


def craft(ws, name: str, tensor: torch.Tensor) -> None:
    data = torch.load(ws.best_checkpoint, weights_only=True)
    data["model_state_dict"][name] = tensor
    torch.save(data, ws.best_checkpoint)


def test_an_expanded_view_claiming_terabytes_is_refused_by_sample(trained_workspace, capsys):
    name = next(iter(torch.load(trained_workspace.best_checkpoint, weights_only=True)["model_state_dict"]))
    craft(trained_workspace, name, torch.zeros(1).expand(1_000_000, 1_000_000))  # 4 TB claimed, 4 bytes stored
    assert trained_workspace.best_checkpoint.stat().st_size < 10_000_000
    code = main(["sample", "--workspace", str(trained_workspace.root), "--max-new-tokens", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err
    assert name in err and "expanded view" in err
