"""A nanoGPT `meta.pkl` that refers to one value many times: refused at once, never expanded (a
1.5 KB file holding a self-sharing tuple or list hung `import nanogpt`, its time doubling per level)."""

from __future__ import annotations

import pickle

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minigpt.errors import DataError
from minigpt.importers.nanogpt_pickles import EXPANDED_MAX, _expanded_size, read_meta

CHARS = [chr(c) for c in range(32, 127)]


def _meta(tmp_path, **extra) -> str:
    meta = {"vocab_size": len(CHARS), "itos": dict(enumerate(CHARS)), "stoi": {c: i for i, c in enumerate(CHARS)}}
    path = tmp_path / "meta.pkl"
    path.write_bytes(pickle.dumps({**meta, **extra}))
    return str(path)


def _doubling(kind: type, levels: int) -> object:
    value: object = kind(["x"]) if kind is not dict else {"k": "x"}
    for level in range(levels):
        value = kind([value, value]) if kind is not dict else {"a": value, "b": value, level: 0}
    return value


@pytest.mark.parametrize("kind", [list, tuple, dict])
@pytest.mark.parametrize("where", ["stoi", "itos_value", "extra"])
def test_a_self_sharing_value_is_refused_naming_the_file(tmp_path, kind, where):
    # GIVEN a small meta.pkl whose one value stands for 2**64 values once its references are followed
    deep = _doubling(kind, 64)
    if where == "itos_value":
        path = tmp_path / "meta.pkl"
        path.write_bytes(pickle.dumps({"vocab_size": 2, "itos": {0: deep, 1: "b"}}))
        path = str(path)
    else:
        path = _meta(tmp_path, **{where: deep})
    # WHEN it is read THEN it is refused, naming the file, without expanding it
    with pytest.raises(DataError) as caught:
        read_meta(path)
    assert "refers to the same values over and over" in caught.value.message and path in caught.value.message


def test_a_list_that_holds_itself_is_refused(tmp_path):
    loop: list = []
    loop.append(loop)
    with pytest.raises(DataError, match="over and over"):
        read_meta(_meta(tmp_path, stoi=loop))


def test_a_real_meta_pkl_reads_its_characters(tmp_path):
    assert read_meta(_meta(tmp_path)) == CHARS


plain = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=4) | st.tuples(inner, inner) | st.dictionaries(st.text(max_size=3), inner),
    max_leaves=30,
)


def _tree_size(value: object) -> int:
    """The count `_expanded_size` stands for, by plain recursion (a tree: every reference distinct)."""
    if isinstance(value, str):
        return 1 + len(value)
    if isinstance(value, dict):
        return 1 + sum(_tree_size(k) + _tree_size(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return 1 + sum(_tree_size(v) for v in value)
    return 1


@settings(max_examples=200, deadline=None)
@given(plain)
def test_the_expanded_size_counts_every_reference_as_a_traversal_would(value):
    assert _expanded_size(value, EXPANDED_MAX) == _tree_size(value)
    shared = [value, value, (value, value)]
    assert _expanded_size(shared, EXPANDED_MAX) == 1 + 2 * _tree_size(value) + 1 + 2 * _tree_size(value)
