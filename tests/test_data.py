"""Batches (targets are inputs shifted by one) and typed errors for bad token files."""

from __future__ import annotations

import pytest
import torch

from minigpt.data.batches import get_batch, load_ids
from minigpt.errors import DataError


def test_targets_are_inputs_shifted_by_one():
    data = torch.arange(1000)
    x, y = get_batch(data, batch_size=6, block_size=12)
    assert torch.equal(x[:, 1:], y[:, :-1])
    # arange data: each row's value is its offset, so the windows can be checked exactly
    starts = x[:, 0]
    for row, start in enumerate(starts.tolist()):
        assert torch.equal(x[row], data[start : start + 12])
        assert torch.equal(y[row], data[start + 1 : start + 13])


def test_batch_shape_is_batch_by_block():
    x, y = get_batch(torch.arange(100), batch_size=4, block_size=9)
    assert x.shape == y.shape == (4, 9)


@pytest.mark.parametrize("dtype", [torch.int32, torch.uint8, torch.int16, torch.int64])
def test_batches_are_int64_whatever_the_stored_dtype(dtype):
    data = (torch.arange(200) % 50).to(dtype)
    x, y = get_batch(data, batch_size=3, block_size=8)
    assert x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])


def test_every_start_position_can_be_drawn():
    # the last valid window starts at n - block_size - 1 (its target ends at the last token)
    data = torch.arange(10)
    gen = torch.Generator().manual_seed(0)
    x, y = get_batch(data, batch_size=500, block_size=4, generator=gen)
    assert set(x[:, 0].tolist()) == set(range(6))
    assert y.max().item() == 9


def test_data_of_exactly_block_size_plus_one_works():
    x, y = get_batch(torch.arange(5), batch_size=2, block_size=4)
    assert torch.equal(x, torch.arange(4).expand(2, 4))
    assert torch.equal(y, torch.arange(1, 5).expand(2, 4))


def test_data_shorter_than_block_size_plus_one_raises():
    with pytest.raises(DataError, match="block_size"):
        get_batch(torch.arange(4), batch_size=2, block_size=4)


def test_same_generator_seed_gives_same_batches():
    data = torch.arange(5000)
    a = get_batch(data, 4, 16, generator=torch.Generator().manual_seed(7))
    b = get_batch(data, 4, 16, generator=torch.Generator().manual_seed(7))
    c = get_batch(data, 4, 16, generator=torch.Generator().manual_seed(8))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])


def test_load_ids_round_trip(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.arange(50, dtype=torch.int32), path)
    assert torch.equal(load_ids(path), torch.arange(50, dtype=torch.int32))


def test_load_ids_missing(tmp_path):
    with pytest.raises(DataError, match="not found") as info:
        load_ids(tmp_path / "train_ids.pt")
    assert info.value.path == str(tmp_path / "train_ids.pt")


def test_load_ids_folder(tmp_path):
    with pytest.raises(DataError, match="not a regular file"):
        load_ids(tmp_path)


def test_load_ids_zero_bytes(tmp_path):
    path = tmp_path / "train_ids.pt"
    path.write_bytes(b"")
    with pytest.raises(DataError, match="0 bytes"):
        load_ids(path)


def test_load_ids_garbage(tmp_path):
    path = tmp_path / "train_ids.pt"
    path.write_bytes(b"this is not a torch file")
    with pytest.raises(DataError, match="could not be read"):
        load_ids(path)


def test_load_ids_float_dtype(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.arange(10, dtype=torch.float32), path)
    with pytest.raises(DataError, match="float32"):
        load_ids(path)


def test_load_ids_two_dimensional(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save(torch.zeros((2, 5), dtype=torch.int64), path)
    with pytest.raises(DataError, match=r"shape \[2, 5\]"):
        load_ids(path)


def test_load_ids_not_a_tensor(tmp_path):
    path = tmp_path / "train_ids.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(DataError, match="holds a list"):
        load_ids(path)
