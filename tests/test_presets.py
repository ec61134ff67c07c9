"""The named presets (`minigpt.train.presets`): plain data read without torch (for `--help`), each
a valid `TrainConfig` and model shape, and `debug` smaller than `small` in every size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from minigpt.train.config import MODEL_FIELDS, TRAIN_FIELDS, TrainConfig
from minigpt.train.presets import PRESETS


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_each_preset_names_only_training_settings_and_builds(name):
    assert set(PRESETS[name]) <= TRAIN_FIELDS
    cfg = TrainConfig.from_preset(name)
    assert {k: getattr(cfg, k) for k in PRESETS[name]} == PRESETS[name]
    shape = cfg.model_config(vocab_size=65)
    assert shape.embedding_dim % shape.num_heads == 0
    assert cfg.warmup_steps < cfg.max_steps and cfg.eval_interval <= cfg.max_steps


def test_debug_is_smaller_than_small_in_every_model_size():
    debug, small = PRESETS["debug"], PRESETS["small"]
    for key in sorted(MODEL_FIELDS - {"dropout"}):
        assert debug.get(key, 0) <= small.get(key, 0), key
    assert debug["max_steps"] < small["max_steps"]


def test_presets_import_without_torch():
    code = "import sys, minigpt.train.presets; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
