"""TensorBoard logs as people write them: any loss-like tag, add_scalars subfolders, a parent
`runs/` folder; the tags found are named when none matches; the LR-3 verdict quotes the right step
and drops clipping advice for a run that clipped."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

pytest.importorskip("tensorboard", reason="the optional extra minigpt-tui[tensorboard]")

from torch.utils.tensorboard import SummaryWriter  # noqa: E402

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks  # noqa: E402
from minigpt.errors import DataError  # noqa: E402
from minigpt.logs.curve_advice import RunSettings
from minigpt.logs.curve_rules import diagnose
from minigpt.logs.tensorboard import is_tensorboard_path, read_tensorboard, tag_field  # noqa: E402

CURVES = Path(__file__).parent / "fixtures" / "curves"
LR3 = [json.loads(line) for line in (CURVES / "lr_3_noclip.jsonl").read_text().splitlines() if line.strip()]


def write(folder: Path, scalars: dict[str, list[tuple[int, float]]]) -> Path:
    writer = SummaryWriter(str(folder))
    for tag, points in scalars.items():
        for step, value in points:
            writer.add_scalar(tag, value, step)
    writer.close()
    return folder


def falling(n: int = 12, start: float = 4.2) -> list[tuple[int, float]]:
    return [(10 * i, start * math.exp(-0.05 * i)) for i in range(n)]


@pytest.mark.parametrize(
    "tag, field",
    [
        ("loss", "train_loss"), ("Loss/train_step", "train_loss"), ("training_loss", "train_loss"),
        ("TRAIN_LOSS", "train_loss"), ("validation_loss", "val_loss"), ("eval/loss", "val_loss"),
        ("Loss/Valid", "val_loss"), ("test_loss", None), ("accuracy", None), ("learning_rate", "lr"),
        ("lr-AdamW", "lr"), ("train/grad_norm", "grad_norm"),
    ],
)  # fmt: skip
def test_tags_are_read_by_their_words(tag, field):
    assert tag_field(tag) == field


def test_styles_people_write_are_read(tmp_path):
    folder = write(
        tmp_path / "run", {"Loss/train_step": falling(), "validation_loss": falling(4, 4.3), "acc": [(0, 1)]}
    )
    log = read_tensorboard(folder)
    assert log.tags == {"train_loss": "Loss/train_step", "val_loss": "validation_loss"}  # type: ignore[attr-defined]
    assert len(log.points) == 12 and log.points[0].val_loss is not None


def test_lightning_prefers_the_per_step_loss(tmp_path):
    folder = write(tmp_path / "run", {"train_loss_epoch": falling(3), "train_loss_step": falling()})
    assert read_tensorboard(folder).tags["train_loss"] == "train_loss_step"  # type: ignore[attr-defined]


def test_add_scalars_subfolders_are_read(tmp_path):
    writer = SummaryWriter(str(tmp_path / "run"))
    for step, value in falling():
        writer.add_scalars("Loss", {"train": value, "val": value + 0.1}, step)
    writer.close()
    log = read_tensorboard(tmp_path / "run")
    assert log.tags == {"train_loss": "Loss_train", "val_loss": "Loss_val"}  # type: ignore[attr-defined]
    assert log.points[3].val_loss == pytest.approx(log.points[3].train_loss + 0.1, abs=1e-5)


def test_a_parent_folder_reads_its_newest_run_and_names_it(tmp_path):
    write(tmp_path / "runs" / "old", {"loss": [(s, 9.0) for s, _ in falling()]})
    new = write(tmp_path / "runs" / "new", {"loss": falling()})
    # "old" is older by its files' times, set here rather than left to the clock between two writes
    for f in (tmp_path / "runs" / "old").glob("events*"):
        os.utime(f, (1, 1))
    assert is_tensorboard_path(tmp_path / "runs")
    log = read_tensorboard(tmp_path / "runs")
    assert log.path == str(new)
    assert log.notes == [f"2 runs in {tmp_path / 'runs'}; read the newest, new (1 other(s))"]  # type: ignore[attr-defined]


def test_a_parent_folder_with_one_run(tmp_path):
    run = write(tmp_path / "runs" / "Dec02_host", {"training_loss": falling()})
    log = read_tensorboard(tmp_path / "runs")
    assert log.path == str(run) and "read the one run" in log.notes[0]  # type: ignore[attr-defined]


def test_no_loss_tag_lists_the_tags_found(tmp_path):
    folder = write(tmp_path / "run", {"accuracy": falling(), "perplexity/train": falling()})
    with pytest.raises(DataError, match="scalar tags found: accuracy, perplexity/train"):
        read_tensorboard(folder)


def test_the_check_fails_naming_the_tags_instead_of_too_short(tiny_workspace, tmp_path):
    folder = write(tmp_path / "run", {"accuracy": falling(), "lr": falling()})
    opts = CheckOptions(workspace=tiny_workspace.root, metrics=folder, device="cpu", skip_overfit=True)
    result = run_checks(CheckContext(opts), only=["training_curve"]).by_id()["training_curve"]
    assert result.status is Status.FAIL and "scalar tags found: accuracy, lr" in result.summary


def lr3_with_step0() -> list:
    """The real lr=3 run as its TensorBoard showed it: step 0 at 4.82, the blow-up at step 10."""
    return [{"step": 0, "train_loss": 4.82, "lr": 0.0}] + LR3


def test_lr3_explosion_quotes_step_10_not_step_0(tmp_path):
    rows = lr3_with_step0()
    folder = write(
        tmp_path / "run",
        {
            "train_loss": [(r["step"], r["train_loss"]) for r in rows if isinstance(r.get("train_loss"), float)],
            "lr": [(r["step"], r["lr"]) for r in rows],
        },
    )
    d = diagnose(list(read_tensorboard(folder).points), baseline=math.log(103))
    assert d.shape == "unstable"
    assert "at step 10" in d.summary and "at step 0;" not in d.summary and "at step 0 " not in d.summary


def test_clipping_is_not_suggested_to_a_run_that_clipped(tmp_path):
    from minigpt.logs.metrics import MetricPoint

    points = [MetricPoint(r["step"], train_loss=r.get("train_loss"), lr=r.get("lr")) for r in lr3_with_step0()]
    plain = diagnose(points, baseline=math.log(103))
    assert any("clip" in f for f in plain.fixes)
    clipped = diagnose(points, baseline=math.log(103), settings=RunSettings("the checkpoint's train_config", 3.0, 1.0))
    assert not any("clip gradients" in f for f in clipped.fixes)
    assert not any(c == "no gradient clipping" for c in clipped.causes)
    assert any("clipped gradients at 1" in c for c in clipped.causes)


def test_training_curve_takes_the_clip_from_the_checkpoint(trained_workspace, tmp_path):
    # GIVEN a minigpt checkpoint (trained with grad_clip 1.0) and the lr=3 blow-up as its TensorBoard log
    rows = lr3_with_step0()
    folder = write(tmp_path / "tb", {"train/loss": [(r["step"], r["train_loss"]) for r in rows if "train_loss" in r]})
    opts = CheckOptions(workspace=trained_workspace.root, metrics=folder, device="cpu", skip_overfit=True)
    result = run_checks(CheckContext(opts), only=["training_curve"]).by_id()["training_curve"]
    assert result.status is Status.FAIL
    assert not any("clip gradients" in f for f in result.fixes)
    assert any("the checkpoint's train_config" in c for c in result.causes)


def test_the_follower_gives_new_points_as_the_writer_adds_them(tmp_path):
    from minigpt.logs.sources import run_follower
    from minigpt.logs.tensorboard import TensorBoardFollower

    # GIVEN a run being written: 5 steps flushed, then 5 more
    writer = SummaryWriter(str(tmp_path / "run"))
    for s in range(5):
        writer.add_scalar("loss", 4.0 - s * 0.1, s)
    writer.flush()
    follower = run_follower(tmp_path / "run")
    assert isinstance(follower, TensorBoardFollower)
    first = follower.poll()
    assert [p.step for p in first] == [0, 1, 2, 3, 4] and follower.poll() == []
    for s in range(5, 10):
        writer.add_scalar("loss", 4.0 - s * 0.1, s)
    writer.close()
    # THEN the next poll gives only the new steps, without a reset
    assert [p.step for p in follower.poll()] == [5, 6, 7, 8, 9] and not follower.reset


def overfitting() -> tuple[list[tuple[int, float]], list[tuple[int, float]]]:
    """Train falls steadily; val falls to step 50, then rises well above its best."""
    train = [(s, 4.0 * math.exp(-s / 60)) for s in range(0, 201, 5)]
    val = [(s, 4.0 * math.exp(-s / 60) + 0.1 if s <= 50 else 1.8 + 0.01 * (s - 50)) for s in range(0, 201, 25)]
    return train, val


def test_one_writer_per_split_is_one_run_with_its_val_loss(tmp_path):
    # GIVEN one SummaryWriter per split, both writing the tag `loss` (run/train, run/val)
    train, val = overfitting()
    write(tmp_path / "run" / "train", {"loss": train})
    write(tmp_path / "run" / "val", {"loss": val})
    log = read_tensorboard(tmp_path / "run")
    # THEN the folders are one run, joined by their split names, and judged as overfitting
    assert log.tags == {"train_loss": "train/loss", "val_loss": "val/loss"}
    assert log.path == str(tmp_path / "run") and not any("runs in" in n for n in log.notes)
    assert diagnose(list(log.points), baseline=math.log(103)).shape == "overfitting"
    # AND the same from the parent of such runs
    assert read_tensorboard(tmp_path).tags == log.tags


def test_a_test_split_is_read_as_the_validation_loss_and_says_so(tmp_path):
    # GIVEN PyTorch's TensorBoard recipe: Loss/train and Loss/test
    train, val = overfitting()
    log = read_tensorboard(write(tmp_path / "run", {"Loss/train": train, "Loss/test": val}))
    assert log.tags == {"train_loss": "Loss/train", "val_loss": "Loss/test"}
    assert any("Loss/test" in n and "validation" in n for n in log.notes)
    assert diagnose(list(log.points), baseline=math.log(103)).shape == "overfitting"


def test_a_loss_tag_left_unread_is_named(tmp_path):
    train, val = overfitting()
    log = read_tensorboard(write(tmp_path / "run", {"train/loss": train, "val/loss": val, "aux_loss": train}))
    assert any("aux_loss" in n and "not judged" in n for n in log.notes)
    # a run whose tags were all read carries no such note
    assert read_tensorboard(write(tmp_path / "plain", {"train/loss": train, "val/loss": val})).notes == []


def test_the_check_names_what_it_read_for_a_split_writer_run(tiny_workspace, tmp_path):
    train, val = overfitting()
    write(tmp_path / "run" / "train", {"loss": train})
    write(tmp_path / "run" / "test", {"loss": val})
    opts = CheckOptions(workspace=tiny_workspace.root, metrics=tmp_path / "run", device="cpu", skip_overfit=True)
    result = run_checks(CheckContext(opts), only=["training_curve"]).by_id()["training_curve"]
    assert result.values["shape"] == "overfitting", result.summary
    assert "test/loss" in result.summary and "validation" in result.summary


def test_a_file_is_read_a_chunk_at_a_time_not_held_whole(tmp_path, monkeypatch):
    # GIVEN a run of 400 steps, read in chunks of 1 KB, each chunk counted
    from minigpt.logs import tensorboard_scalars

    run = write(tmp_path / "run", {"train/loss": falling(400)})
    real, read_sizes = tensorboard_scalars.read_records, []

    def counted(*args):
        chunk = real(*args)
        read_sizes.append(len(chunk.data))
        return chunk

    monkeypatch.setattr(tensorboard_scalars, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(tensorboard_scalars, "read_records", counted)
    # WHEN it is read
    log = read_tensorboard(run)
    # THEN every point is there, and no read held more than a chunk: a file that also holds images
    # or histograms is never in memory whole
    assert len(log.points) == 400
    assert len(read_sizes) > 5 and max(read_sizes) <= 1024


def test_a_read_error_partway_through_an_event_file_names_the_file(tmp_path, monkeypatch):
    from minigpt.logs import tensorboard_scalars

    run = write(tmp_path / "run", {"train/loss": falling(100)})
    real, calls = tensorboard_scalars.read_records, [0]

    def fails_partway(*args):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError("Input/output error")
        return real(*args)

    monkeypatch.setattr(tensorboard_scalars, "CHUNK_BYTES", 1024)
    monkeypatch.setattr(tensorboard_scalars, "read_records", fails_partway)
    with pytest.raises(DataError) as err:
        read_tensorboard(run)
    assert "Unreadable TensorBoard event file" in err.value.message and "events.out.tfevents" in err.value.message
    assert "OSError: Input/output error" in err.value.message
