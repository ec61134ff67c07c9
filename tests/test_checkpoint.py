"""Checkpoints: round trip, every kind of bad file refused with a typed error, atomic saves."""

from __future__ import annotations

import os
import shlex
import threading

import pytest
import torch

from minigpt.data.tokenizer import CharTokenizer
from minigpt.errors import CheckpointError, ConfigError
from minigpt.model.checkpoint import load_checkpoint, read_checkpoint, save_checkpoint
from minigpt.model.gpt import MiniGPT, MiniGPTConfig
from minigpt.model.nanogpt import GPT, GPTConfig

TOKENIZER = CharTokenizer.from_text("abcdefghijklmnopqrstuvwxyz .,")
CONFIG = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, embedding_dim=32, num_heads=4, num_layers=2, dropout=0.0)


def make_payload(**config_overrides) -> dict:
    model = MiniGPT(MiniGPTConfig(**CONFIG))
    return {
        "model_state_dict": model.state_dict(),
        "config": {**CONFIG, **config_overrides},
        "step": 42,
        "best_val_loss": 1.5,
        "tokenizer_fingerprint": TOKENIZER.fingerprint,
    }


@pytest.fixture
def ckpt_path(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_payload())
    return path


def test_round_trip_gives_the_same_outputs(tmp_path):
    model = MiniGPT(MiniGPTConfig(**CONFIG)).eval()
    path = tmp_path / "ckpt.pt"
    save_checkpoint(
        path,
        {
            "model_state_dict": model.state_dict(),
            "config": CONFIG,
            "step": 7,
            "best_val_loss": 2.0,
            "tokenizer_fingerprint": TOKENIZER.fingerprint,
        },
    )
    loaded = load_checkpoint(path, tokenizer=TOKENIZER)
    idx = torch.randint(CONFIG["vocab_size"], (2, 16))
    assert torch.equal(loaded.model(idx)[0], model(idx)[0])
    assert not loaded.model.training
    assert (loaded.step, loaded.best_val_loss, loaded.config) == (7, 2.0, CONFIG)
    assert loaded.fingerprint_mismatch is None and loaded.notices == []
    assert loaded.model.lm_head.weight is loaded.model.token_embedding.weight  # still tied after loading


@pytest.mark.parametrize("former", ["minigpt.model.MiniGPT", "minigpt.nanogpt.GPT"])
def test_a_checkpoint_naming_its_class_by_the_former_module_path_loads(tmp_path, former):
    """minigpt 0.1.0 wrote `minigpt.model.MiniGPT` / `minigpt.nanogpt.GPT` before the modules moved
    into folders: such a checkpoint still loads, as the same class."""
    if former.endswith("GPT") and not former.endswith("MiniGPT"):
        shape = dict(vocab_size=TOKENIZER.vocab_size, block_size=16, n_layer=1, n_head=2, n_embd=16, bias=False)
        model, config = GPT(GPTConfig(**shape)), {**shape, "dropout": 0.0}
    else:
        model, config = MiniGPT(MiniGPTConfig(**CONFIG)), dict(CONFIG)
    path = tmp_path / "ckpt.pt"
    payload = make_payload()
    payload.update(model_state_dict=model.state_dict(), config={**config, "model_class": former})
    save_checkpoint(path, payload)
    loaded = load_checkpoint(path, tokenizer=TOKENIZER)
    assert type(loaded.model) is type(model)
    idx = torch.randint(TOKENIZER.vocab_size, (1, 8))
    assert torch.equal(loaded.model(idx)[0], model.eval()(idx)[0])


def test_a_checkpoint_naming_an_unknown_class_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_payload(model_class="minigpt.models.Mystery"))
    with pytest.raises((ConfigError, CheckpointError), match="minigpt.models.Mystery"):
        load_checkpoint(path, tokenizer=TOKENIZER)


def test_missing_file(tmp_path):
    with pytest.raises(CheckpointError, match="not found") as info:
        read_checkpoint(tmp_path / "nope.pt")
    assert info.value.path == str(tmp_path / "nope.pt")


def test_folder_is_refused(tmp_path):
    with pytest.raises(CheckpointError, match="is a folder"):
        read_checkpoint(tmp_path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_fifo_is_refused_without_hanging(tmp_path):
    fifo = tmp_path / "ckpt.pt"
    os.mkfifo(fifo)
    outcome = []

    def load():
        try:
            read_checkpoint(fifo)
        except CheckpointError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=load, daemon=True)
    thread.start()
    thread.join(timeout=5)
    if thread.is_alive():
        # unblock the reader stuck in open() so the thread can finish, then fail
        fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)
        os.close(fd)
        thread.join(timeout=5)
        pytest.fail("read_checkpoint blocked on a FIFO")
    assert len(outcome) == 1 and "FIFO" in str(outcome[0])


def test_empty_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"")
    with pytest.raises(CheckpointError, match="0 bytes"):
        read_checkpoint(path)


@pytest.mark.parametrize("keep", [0.5, 0.1])
def test_truncated_file_is_reported_as_truncated(ckpt_path, keep):
    data = ckpt_path.read_bytes()
    ckpt_path.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match="looks truncated"):
        read_checkpoint(ckpt_path)


def test_garbage_file_is_reported_as_corrupt(tmp_path):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(b"definitely not a checkpoint\n" * 10)
    with pytest.raises(CheckpointError, match="Not a readable checkpoint"):
        read_checkpoint(path)


def test_top_level_not_a_dict(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save([torch.zeros(3)], path)
    with pytest.raises(CheckpointError, match="holds a list"):
        read_checkpoint(path)


def test_bare_state_dict_is_named_as_such(tmp_path):
    path = tmp_path / "ckpt.pt"
    torch.save(MiniGPT(MiniGPTConfig(**CONFIG)).state_dict(), path)
    with pytest.raises(CheckpointError, match="no 'model_state_dict'") as info:
        read_checkpoint(path)
    assert any("bare state_dict" in cause for cause in info.value.causes)


def test_missing_config(tmp_path):
    path = tmp_path / "ckpt.pt"
    payload = make_payload()
    del payload["config"]
    torch.save(payload, path)
    with pytest.raises(CheckpointError, match="no 'config'"):
        read_checkpoint(path)


def test_invalid_config_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_payload(num_heads=5))  # 5 does not divide 32
    with pytest.raises(CheckpointError, match="Invalid model config.*divisible"):
        load_checkpoint(path)


def test_unknown_config_key_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_payload(n_embd=32))
    with pytest.raises(CheckpointError, match="n_embd"):
        load_checkpoint(path)


def test_size_mismatch_names_the_tensors(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint(path, make_payload(vocab_size=CONFIG["vocab_size"] + 3))
    with pytest.raises(CheckpointError, match="size mismatch") as info:
        load_checkpoint(path)
    assert "token_embedding.weight" in str(info.value)
    assert f"[{CONFIG['vocab_size']}, 32]" in str(info.value)


def test_missing_and_unexpected_keys_are_listed(tmp_path):
    path = tmp_path / "ckpt.pt"
    payload = make_payload()
    sd = payload["model_state_dict"]
    sd["blocks.0.attn.c_attn.weight"] = sd.pop("blocks.0.attn.qkv.weight")
    save_checkpoint(path, payload)
    with pytest.raises(CheckpointError) as info:
        load_checkpoint(path)
    message = str(info.value)
    assert "missing 1: ['blocks.0.attn.qkv.weight']" in message
    assert "unexpected 1: ['blocks.0.attn.c_attn.weight']" in message


@pytest.mark.parametrize("prefix", ["_orig_mod.", "module."])
def test_wrapper_prefixes_are_stripped_with_a_notice(tmp_path, prefix):
    path = tmp_path / "ckpt.pt"
    payload = make_payload()
    original = dict(payload["model_state_dict"])
    payload["model_state_dict"] = {prefix + k: v for k, v in original.items()}
    save_checkpoint(path, payload)
    loaded = load_checkpoint(path)
    assert any(prefix in notice for notice in loaded.notices)
    for name, tensor in loaded.model.state_dict().items():
        assert torch.equal(tensor, original[name])


def test_fingerprint_mismatch_is_reported(ckpt_path):
    other = CharTokenizer(list(reversed(TOKENIZER.chars)))  # same size, other order
    loaded = load_checkpoint(ckpt_path, tokenizer=other)
    assert loaded.fingerprint_mismatch is not None
    assert "another vocabulary" in loaded.fingerprint_mismatch


def test_vocab_size_mismatch_without_fingerprint_is_reported(tmp_path):
    path = tmp_path / "ckpt.pt"
    payload = make_payload()
    del payload["tokenizer_fingerprint"]
    save_checkpoint(path, payload)
    loaded = load_checkpoint(path, tokenizer=CharTokenizer.from_text("abc"))
    assert "vocab_size" in loaded.fingerprint_mismatch
    assert any("no tokenizer_fingerprint" in n for n in loaded.notices)


class RunsCode:
    """Unpickling this runs a shell command: what a malicious checkpoint does."""

    def __init__(self, sentinel):
        self.sentinel = sentinel

    def __reduce__(self):
        return (os.system, (f"touch {shlex.quote(str(self.sentinel))}",))


def test_pickle_that_runs_code_is_refused_and_never_runs(tmp_path):
    # GIVEN a checkpoint whose pickle calls os.system when loaded
    sentinel = tmp_path / "PWNED"
    path = tmp_path / "evil.pt"
    payload = make_payload()
    payload["extra"] = RunsCode(sentinel)
    torch.save(payload, path)
    # WHEN it is read THEN it is refused and the command never ran
    with pytest.raises(CheckpointError, match="Refused to load.*system"):
        load_checkpoint(path)
    assert not sentinel.exists()
    # control: the file really does run code under a full unpickler
    torch.load(path, weights_only=False)
    assert sentinel.exists()


def test_exception_mid_save_keeps_the_previous_file(ckpt_path, monkeypatch):
    before = ckpt_path.read_bytes()
    real_save = torch.save

    def save_then_fail(obj, fh, *args, **kwargs):
        fh.write(b"PK\x03\x04partial bytes")
        raise RuntimeError("disk full")

    monkeypatch.setattr(torch, "save", save_then_fail)
    with pytest.raises(RuntimeError, match="disk full"):
        save_checkpoint(ckpt_path, make_payload())
    monkeypatch.setattr(torch, "save", real_save)
    assert ckpt_path.read_bytes() == before
    assert sorted(p.name for p in ckpt_path.parent.iterdir()) == [ckpt_path.name]  # no temp file left
    load_checkpoint(ckpt_path)


def test_unpicklable_payload_mid_save_keeps_the_previous_file(ckpt_path):
    before = ckpt_path.read_bytes()
    payload = make_payload()
    payload["callback"] = lambda: None  # pickling fails after the tensors were written
    with pytest.raises(Exception):  # noqa: B017  (whatever pickle raises; the file must be intact)
        save_checkpoint(ckpt_path, payload)
    assert ckpt_path.read_bytes() == before
    assert sorted(p.name for p in ckpt_path.parent.iterdir()) == [ckpt_path.name]


def test_a_nanogpt_layout_checkpoint_loads_with_a_notice(tmp_path):
    import torch

    from minigpt.model.checkpoint import load_checkpoint
    from minigpt.model.gpt import MiniGPT, MiniGPTConfig

    cfg = MiniGPTConfig(vocab_size=20, block_size=8, embedding_dim=16, num_heads=2, num_layers=1, dropout=0.0)
    model = MiniGPT(cfg)
    path = tmp_path / "ckpt.pt"
    # nanoGPT's train.py saves these keys; its "config" is the training hyperparameters
    torch.save(
        {
            "model": model.state_dict(),
            "model_args": cfg.to_dict(),
            "iter_num": 42,
            "best_val_loss": torch.tensor(1.5),
            "optimizer": {},
            "config": {"learning_rate": 6e-4},
        },
        path,
    )
    loaded = load_checkpoint(path)
    assert loaded.step == 42 and loaded.best_val_loss == 1.5
    assert "nanoGPT" in loaded.notices[0]
    x = torch.randint(20, (1, 8))
    assert torch.equal(loaded.model(x)[0], model.eval()(x)[0])


def test_a_symlink_loop_is_named_as_one_not_as_missing(tmp_path):
    (tmp_path / "a.pt").symlink_to(tmp_path / "b.pt")
    (tmp_path / "b.pt").symlink_to(tmp_path / "a.pt")
    with pytest.raises(CheckpointError, match="symlink loop"):
        read_checkpoint(tmp_path / "a.pt")


def test_a_git_lfs_pointer_says_how_to_fetch_the_file(tmp_path):
    path = tmp_path / "ckpt.pt"
    path.write_text(
        "version https://git-lfs.github.com/spec/v1\noid sha256:" + "ab" * 32 + "\nsize 123456\n", encoding="utf-8"
    )
    with pytest.raises(CheckpointError, match="git lfs pull"):
        read_checkpoint(path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads files whatever their mode")
def test_permission_denied_is_said_as_such_not_as_corrupt(ckpt_path):
    from minigpt.errors import FileSystemError

    ckpt_path.chmod(0)
    try:
        with pytest.raises(FileSystemError, match="Permission denied"):
            read_checkpoint(ckpt_path)
    finally:
        ckpt_path.chmod(0o644)
