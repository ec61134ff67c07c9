"""The loss weights of a full reading's backwards, computed when the watch writes, not in the backward.

A loss weight is about twenty kernels (`probes.loss_weight_batch`); run in the user's backward they
run cold, between the loop's own kernels, at several times their cost. So the backward hook keeps a
copy of the sampled rows' gradient and the write computes a second's backwards in batches. The copies
are bounded (`DEFER_BYTES`): past that (a large vocabulary) a weight is computed in the backward, as
before."""

from __future__ import annotations

import torch

from minigpt.loopwatch import probes

DEFER_BYTES = 32 << 20  # sampled logits rows and their gradients held for the write, at most
BATCH_BYTES = 512 << 10  # a batch's tensors at most this large: past about 1 MB each new one costs page faults


class DeferredLossWeights:
    def __init__(self) -> None:
        self._items: list[tuple[list, torch.Tensor, torch.Tensor]] = []  # (entry, gradient rows, logits rows)
        self._bytes = 0

    def __bool__(self) -> bool:
        return bool(self._items)

    def take(self, grad: torch.Tensor, rows: torch.Tensor) -> list:
        """The backward's `[sums, n_rows, n_total]` for `runlog.loss_weight_of`; `sums` is filled in by
        `settle` (or now, past DEFER_BYTES)."""
        if self._bytes + 2 * rows.nbytes > DEFER_BYTES:
            return probes.loss_weight_sums(grad, rows)
        g, n_total = probes.grad_rows(grad, rows.shape[0])
        entry: list = [None, rows.shape[0], n_total]
        self._items.append((entry, g, rows))
        self._bytes += g.nbytes + rows.nbytes
        return entry

    def settle(self) -> None:
        """Fill in every entry taken since the last settle: a batch per shape and device."""
        items, self._items, self._bytes = self._items, [], 0
        by_shape: dict[tuple, list] = {}
        for item in items:
            by_shape.setdefault((item[1].shape, item[1].device), []).append(item)
        for same in by_shape.values():
            k = max(1, BATCH_BYTES // same[0][1].nbytes)
            for at in range(0, len(same), k):
                batch = same[at : at + k]
                grads, rows = torch.stack([b[1] for b in batch]), torch.stack([b[2] for b in batch])
                for (entry, _, _), sums in zip(batch, probes.loss_weight_batch(grads, rows).tolist(), strict=True):
                    entry[0] = sums

    def drop(self) -> None:
        """Let go of the copies (the watch turned itself off: no write will come)."""
        self._items, self._bytes = [], 0
