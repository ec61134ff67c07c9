"""A new user's first hour: the numbers the commands print agree with each other and with the docs.

A short run evaluates several times (`minigpt.train.eval_plan`); a check that measures on its own
learning rate or batches says so beside the run's figure; `import` prints the whole command's time;
the docs state what the code does and does."""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.cli import main
from minigpt.io.atomic import atomic_torch_save
from minigpt.logs.metrics import read_metrics
from minigpt.model.checkpoint import read_checkpoint
from minigpt.train.config import TrainConfig
from minigpt.train.eval_plan import FEW_EVALS, eval_steps_cost, evaluations, plan_evals
from minigpt.train.time_budget import TimePlan
from minigpt.train.trainer import Trainer

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"


def run(ws, only, **kw):
    kw.setdefault("device", "cpu")
    return run_checks(CheckContext(CheckOptions(workspace=ws.root, **kw)), only=only).by_id()


# -- A: a short run evaluates several times ---------------------------------------------------------


def test_a_short_steps_run_of_the_small_preset_gets_several_evaluations():
    # GIVEN the small preset (every 250 steps, 20 batches) asked for 135 steps: one evaluation, at the end
    small = TrainConfig.from_preset("small")
    cost = eval_steps_cost(small.eval_batches, small.grad_accum)
    plan = plan_evals(
        135, small.eval_interval, small.eval_batches, log_interval=10, step_cost=1.0, eval_cost=cost,
        choose=True, cap=False, share_of="the run's compute",
    )  # fmt: skip
    # THEN the interval is chosen for 5-10 evaluations, on fewer batches to keep them about a fifth of the run
    assert plan.chosen and 5 <= plan.evaluations <= 10 and plan.evaluations == evaluations(135, plan.interval)
    assert plan.batches < small.eval_batches and plan.share <= 0.21
    assert "chosen for a short run; --eval-interval N to set it" in plan.describe()


def test_a_run_long_enough_for_its_interval_keeps_the_presets_schedule():
    for name in ("debug", "small"):  # the presets' own step counts: 4 and 10 evaluations
        cfg = TrainConfig.from_preset(name)
        cost = eval_steps_cost(cfg.eval_batches, cfg.grad_accum)
        plan = plan_evals(
            cfg.max_steps, cfg.eval_interval, cfg.eval_batches, log_interval=cfg.log_interval, step_cost=1.0,
            eval_cost=cost, choose=True, cap=False, share_of="the run's compute",
        )  # fmt: skip
        assert not plan.chosen and (plan.interval, plan.batches) == (cfg.eval_interval, cfg.eval_batches)
        assert plan.evaluations >= FEW_EVALS


def calibrated(step_s: float, eval_steps: float) -> tuple[TimePlan, float]:
    """A 2-minute budget after 20 calibration steps and the timed evaluation (eval_steps steps' time)."""
    plan = TimePlan(budget_s=120.0, start_step=0)
    plan.measured_eval(eval_steps * step_s)
    elapsed = 20 * step_s + eval_steps * step_s
    plan.measured_step(20, elapsed)
    return plan, elapsed


def test_a_short_time_budget_plans_several_evaluations_in_a_modest_share_of_the_time():
    # GIVEN `--preset small --time 2m` on a busy machine: 0.6 s a step, an evaluation costing 43 steps'
    # time; the preset's interval of 250 would fit one evaluation, at the end
    preset, elapsed = calibrated(0.6, 43)
    assert evaluations(preset.plan(20, elapsed, 250, warmup_steps=100), 250, 20) == 1
    plan, elapsed = calibrated(0.6, 43)
    # WHEN the first plan is made with the interval ours to choose
    chosen = plan.choose_evals(20, elapsed, eval_interval=250, eval_batches=20, log_interval=10, choose=True)
    steps = plan.plan(20, elapsed, chosen.interval, warmup_steps=100)
    # THEN several evaluations fall inside the planned steps, on fewer batches, and the plan line says so
    assert chosen.chosen and 5 <= evaluations(steps, chosen.interval, 20) <= 10
    assert chosen.batches < 20 and plan.eval_s is not None and plan.eval_s < 43 * 0.6
    assert evaluations(steps, chosen.interval, 20) * plan.eval_s < 0.35 * (120.0 - elapsed)
    assert "chosen for a short run" in plan.describe() and f"every {chosen.interval} steps" in plan.describe()


def test_an_explicit_eval_interval_is_kept_by_the_time_plan():
    plan, elapsed = calibrated(0.6, 43)
    chosen = plan.choose_evals(20, elapsed, eval_interval=250, eval_batches=20, log_interval=10, choose=False)
    plan.plan(20, elapsed, chosen.interval, warmup_steps=100)
    assert chosen.interval == 250 and not chosen.chosen
    assert "every 250 steps" in plan.describe() and "chosen for a short run" not in plan.describe()


def test_the_cli_chooses_the_interval_of_a_short_run_and_says_so(tiny_workspace, capsys):
    # GIVEN the debug preset (every 50 steps) asked for 30 steps, no --eval-interval
    assert main(["train", "--workspace", str(tiny_workspace.root), "--steps", "30", "--device", "cpu"]) == 0
    # THEN its start-up line names the chosen schedule, and the run evaluated at each interval
    err = " ".join(capsys.readouterr().err.split())  # as printed, broken to the terminal's width
    assert "evaluating every 10 steps (3 evaluations, chosen for a short run" in err, err
    evals = [p.step for p in read_metrics(tiny_workspace.metrics).points if p.val_loss is not None]
    assert evals == [10, 20, 30]
    saved = read_checkpoint(tiny_workspace.latest_checkpoint)["train_config"]
    assert saved["eval_interval"] == 10  # what ran is what --resume and the UI's `t` reproduce


def test_the_cli_keeps_an_explicit_eval_interval(tiny_workspace, capsys):
    argv = ["train", "--workspace", str(tiny_workspace.root), "--steps", "30", "--eval-interval", "30"]
    assert main([*argv, "--device", "cpu"]) == 0
    assert "chosen for a short run" not in capsys.readouterr().err
    evals = [p.step for p in read_metrics(tiny_workspace.metrics).points if p.val_loss is not None]
    assert evals == [30]
    assert read_checkpoint(tiny_workspace.latest_checkpoint)["train_config"]["eval_interval"] == 30


@pytest.mark.slow
def test_a_time_boxed_run_whose_interval_fits_once_evaluates_several_times(tiny_workspace):
    # GIVEN an interval far past what 3 s of training reaches, not given by the user
    cfg = TrainConfig.from_preset("debug", device="cpu", eval_interval=100_000)
    trainer = Trainer(tiny_workspace.root, cfg, time_budget_s=3.0, choose_eval_interval=True)
    trainer.run()
    # THEN the time plan chose an interval that evaluates several times over the steps it planned,
    # and the evaluations came at that interval (a machine that slows after the plan ends the run
    # early and says so: fewer of them happen then, and the plan records where it was cut)
    plan, chosen = trainer.time_plan, trainer.eval_plan
    assert chosen is not None and chosen.chosen and plan is not None and plan.first_planned_steps is not None
    assert plan.first_planned_steps // chosen.interval >= FEW_EVALS, (plan.first_planned_steps, chosen.interval)
    evals = [p.step for p in read_metrics(tiny_workspace.metrics).points if p.val_loss is not None]
    assert evals[:-1] == [chosen.interval * k for k in range(1, len(evals))], (evals, chosen.interval)
    if plan.cut_at is None:
        assert len(evals) >= FEW_EVALS, evals


# -- B: a check's own figure says where it came from -------------------------------------------------


def test_optimizer_update_steps_at_the_runs_learning_rate_and_says_where_it_read_it(trained_workspace):
    # GIVEN a checkpoint whose run trained at 3e-3 (the check's own rate is 1e-3)
    ckpt = read_checkpoint(trained_workspace.best_checkpoint)
    ckpt["train_config"]["learning_rate"] = 3e-3
    atomic_torch_save(ckpt, trained_workspace.best_checkpoint)
    result = run(trained_workspace, ["optimizer_update"])["optimizer_update"]
    assert result.values["learning_rate"] == 3e-3
    assert "at lr 0.003 (the run's, from the checkpoint's train_config)" in result.summary, result.summary


def test_optimizer_update_without_a_run_says_the_rate_is_its_own(tiny_workspace):
    result = run(tiny_workspace, ["optimizer_update"], checkpoint="none")["optimizer_update"]
    assert result.values["learning_rate"] == 1e-3
    assert "at lr 0.001 (the check's own lr 0.001, not the run's" in result.summary, result.summary


def test_optimizer_update_names_the_fault_that_set_its_rate(trained_workspace):
    result = run(trained_workspace, ["optimizer_update"], fault="lr_too_high")["optimizer_update"]
    assert result.status is Status.FAIL and "set by the lr_too_high fault" in result.summary


def test_checkpoint_load_names_its_batches_and_the_trainers_figure_from_other_batches(trained_workspace):
    result = run(trained_workspace, ["checkpoint_load"])["checkpoint_load"]
    best = read_checkpoint(trained_workspace.best_checkpoint)["best_val_loss"]
    # the debug preset: block 32; the trainer evaluates 20 batches of 8 windows
    assert "on 4 batches of 8x32 (1,024 tokens)" in result.summary, result.summary
    assert (
        f"the trainer's best_val_loss {best:.4f}, stored in the checkpoint, came from other batches "
        "(20 batches of 8x32, 5,120 tokens)" in result.summary
    ), result.summary
    assert result.values["measured_tokens"] == 1024


def test_import_prints_the_whole_commands_time(tmp_path, capsys, monkeypatch):
    sys.path.insert(0, str(Path(__file__).parent / "fixtures"))
    import nanogpt_writer

    from minigpt.cli import startup
    from minigpt.data.corpus import demo_text

    data_dir, out_dir = tmp_path / "data", tmp_path / "out"
    nanogpt_writer.prepare_char(demo_text()[:30_000], data_dir)
    nanogpt_writer.train(data_dir, out_dir, max_iters=2, eval_interval=1, block_size=16, n_embd=32)
    # GIVEN a command that started 100 s ago (a first run loading torch on a busy machine)
    monkeypatch.setattr(startup, "STARTED", time.perf_counter() - 100.0)
    argv = ["import", "nanogpt", "--out-dir", str(out_dir), "--data-dir", str(data_dir)]
    assert main([*argv, "--workspace", str(tmp_path / "ws")]) == 0
    # THEN the time printed counts from the command's start, and says what the import itself took
    printed = capsys.readouterr().out
    done = re.search(r"done in ([\d.]+) s \(starting and loading torch ([\d.]+) s, importing ([\d.]+) s\)", printed)
    assert done is not None
    total, loading, importing = (float(g) for g in done.groups())
    assert total >= 100.0 and loading >= 100.0 and importing < total


# -- B and C: the docs say what the code does ----------------------------------------------------------


def test_the_docs_split_overlap_figure_for_the_demo_corpus_is_what_the_check_measures(tmp_path):
    from minigpt.data.prepare import prepare_workspace

    stated = re.search(
        r"on Python (3\.\d+) the demo corpus's test split has (\d+) of its (\d+) probed windows in train",
        (DOCS / "checks.md").read_text(encoding="utf-8"),
    )
    assert stated is not None
    version, found, probed = stated.group(1), int(stated.group(2)), int(stated.group(3))
    if f"{sys.version_info.major}.{sys.version_info.minor}" != version:
        pytest.skip(f"the demo corpus is Python {version}'s documentation; this is Python {sys.version}")
    prepare_workspace("demo", tmp_path / "demo")
    result = run_checks(CheckContext(CheckOptions(workspace=tmp_path / "demo", device="cpu")), only=["split_overlap"])
    test = result.by_id()["split_overlap"].values["splits"]["test"]
    assert (test["windows_found_in_train"], test["windows_probed"]) == (found, probed)


def test_the_ui_docs_usage_names_every_option_of_minigpt_tui():
    from minigpt_tui.__main__ import build_parser

    options = set(re.findall(r"\[(--[a-z][a-z-]*)", build_parser().format_usage()))
    usage = (DOCS / "ui.md").read_text(encoding="utf-8").split("```", 2)[1]
    assert options and not sorted(o for o in options if o not in usage)


def test_the_own_loop_docs_say_what_threads_a_watched_loop_runs_at():
    text = (DOCS / "your-loop.md").read_text(encoding="utf-8")
    assert "**Threads**" in text and "OMP_NUM_THREADS=1" in text and "torch.set_num_threads(1)" in text
