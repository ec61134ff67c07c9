"""`--model hf:PATH` with a config.json nested too deeply for any JSON reader: a typed error naming
the file, never a RecursionError traceback (transformers' own reader would raise one)."""

from __future__ import annotations

import pytest

from minigpt.errors import ModelSpecError
from minigpt.model.user import load_model_spec


def test_a_deeply_nested_hf_config_is_a_typed_error_naming_the_file(tmp_path):
    (tmp_path / "config.json").write_text("[" * 200_000)
    with pytest.raises(ModelSpecError, match="too deeply nested") as info:
        load_model_spec(f"hf:{tmp_path}")
    assert str(tmp_path / "config.json") in info.value.message
