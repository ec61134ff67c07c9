"""`minigpt.logs.record`: one schema and one encoding for every metrics.jsonl writer."""

from __future__ import annotations

import json

import pytest

from minigpt.io.workspace import Workspace
from minigpt.logs.record import FIELDS, json_line, line_template
from tests.fixtures import loops


def keys_of(ws: Workspace) -> set[str]:
    return {key for line in ws.metrics.read_text().splitlines() for key in json.loads(line)}


def test_a_line_is_compact_json_with_non_finite_numbers_as_strings():
    line = json_line({"step": 3, "train_loss": float("nan"), "grad_norm": float("inf"), "lrs": [1e-3, float("-inf")]})
    assert line == '{"step":3,"train_loss":"nan","grad_norm":"inf","lrs":[0.001,"-inf"]}'


def test_a_template_takes_only_the_schemas_fields_and_writes_what_the_encoder_writes():
    with pytest.raises(ValueError, match="val_los"):
        line_template("step", "val_los")
    record = {"step": 41, "train_loss": 2.123456789012345, "lr": 3.0000000000000004e-05, "time": 1796377129.0319278}
    assert line_template(*record) % tuple(map(str, record.values())) == json_line(record)


def test_every_field_the_trainer_writes_is_in_the_schema(trained_workspace):
    assert keys_of(trained_workspace) <= set(FIELDS)


def test_every_field_the_watch_writes_of_a_nanogpt_loop_is_in_the_schema(tmp_path):
    loops.nanogpt_loop(tmp_path / "run", max_iters=25)
    assert keys_of(Workspace(tmp_path / "run")) <= set(FIELDS)
