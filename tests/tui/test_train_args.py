"""`t` trains the workspace's own settings (its checkpoint's train_config), not always `--preset debug`."""

from __future__ import annotations

from dataclasses import asdict

import pytest

from minigpt.train.config import TrainConfig
from minigpt.train.presets import PRESETS
from minigpt_tui.panes.loss import LossPane
from minigpt_tui.screens.confirm import ConfirmScreen
from minigpt_tui.train_args import archived_files, plan_training, train_args
from tests.waiting import stays, wait_until

from ._pane_harness import PaneHarness

DEFAULTS = {name: asdict(TrainConfig.from_preset(name)) for name in PRESETS}


def test_a_small_run_is_retrained_as_small_with_its_changed_settings():
    config = dict(DEFAULTS["small"], learning_rate=0.01, batch_size=4)
    args, origin = train_args(config, DEFAULTS)
    assert args == ["--preset", "small", "--lr", "0.01", "--batch-size", "4"]
    assert origin == "the checkpoint's own settings: preset small with 2 settings changed"


def test_a_debug_run_with_preset_settings_gets_just_the_preset():
    assert train_args(dict(DEFAULTS["debug"]), DEFAULTS)[0] == ["--preset", "debug"]


def test_a_model_shape_no_preset_has_is_named():
    args, origin = train_args(dict(DEFAULTS["debug"], embedding_dim=96), DEFAULTS)
    assert args == ["--preset", "debug"] and "matches no preset" in origin and "embedding_dim 96" in origin


def test_no_train_config_falls_back_to_debug():
    args, origin = train_args(None, DEFAULTS)
    assert args == ["--preset", "debug"] and "no training settings" in origin


def test_plan_reads_the_checkpoint_and_lists_what_moves_aside(trained_workspace):
    plan = plan_training(trained_workspace.root, trained_workspace.best_checkpoint)
    assert plan.args[:2] == ["--preset", "debug"]
    assert "checkpoints/mini_gpt_best.pt" in plan.archived and "logs/metrics.jsonl" in plan.archived
    assert archived_files(trained_workspace.root / "nowhere") == []


@pytest.mark.parametrize("unreadable", [b"", b"an earlier run"])
def test_an_unreadable_checkpoint_plans_the_default(tmp_path, unreadable):
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "mini_gpt_best.pt").write_bytes(unreadable)
    plan = plan_training(tmp_path, tmp_path / "checkpoints" / "mini_gpt_best.pt")
    assert plan.args == ["--preset", "debug"] and "unreadable" in plan.origin
    # as the trainer does: an empty file is not moved aside
    assert plan.archived == (["checkpoints/mini_gpt_best.pt"] if unreadable else [])


async def test_s_asks_naming_the_command_and_the_files_it_moves(trained_workspace):
    app = PaneHarness(LossPane, trained_workspace)
    async with app.run_test(size=(80, 24)) as pilot:
        pane = app.query_one(LossPane)
        pane.focus()
        await pilot.press("s")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        question = app.screen.question
        assert "minigpt train --preset debug" in question
        assert "checkpoints/mini_gpt_best.pt" in question and "previous/<time>/" in question
        await pilot.press("escape")
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen), what="the question to close")
        await stays(pilot, lambda: not pane.controls.training, 1.0, what="no training run")
        assert not pane.controls.training
