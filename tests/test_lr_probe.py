"""The learning-rate probe (lr_probe): short runs of the run's own model LR/10..3xLR, and further while an end wins."""

from __future__ import annotations

import json
import math

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.checks.lr_probe_checks import ProbeRun, _verdict, run_learning_rate
from minigpt.checks.result import Outcome
from minigpt.data.tokenizer import CharTokenizer
from minigpt.train.config import TrainConfig
from minigpt.train.trainer import Trainer


@pytest.fixture
def config(tiny_workspace, tmp_path):
    """A --config JSON for our own model at the debug shape."""
    vocab = CharTokenizer.from_file(tiny_workspace.tokenizer).vocab_size
    shape = {"block_size": 32, "embedding_dim": 64, "num_heads": 4, "num_layers": 2, "dropout": 0.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"vocab_size": vocab, **shape}))
    return path


def run(ws, only=None, **kw):
    kw.setdefault("device", "cpu")
    return run_checks(CheckContext(CheckOptions(workspace=ws.root, **kw)), only=only).by_id()


@pytest.mark.slow
def test_a_run_trained_at_too_high_a_rate_fails_the_probe_and_no_other_check(tiny_workspace):
    # a real run of our trainer at lr 0.1: it does not diverge, it plateaus, and the curve looks healthy enough
    Trainer(tiny_workspace.root, TrainConfig.from_preset("debug", learning_rate=0.1, device="cpu")).run()
    results = run(tiny_workspace, lr_probe=True)
    probe = results["lr_probe"]
    assert probe.status is Status.FAIL, probe.summary
    assert "lr 0.1 (the checkpoint's train_config) is too high" in probe.summary
    # lr 0.1 is about 100x the debug preset's 1e-3: the probe goes on below LR/10 while lower rates win
    assert probe.values["best"] in ("LR/100", "LR/30", "LR/10") and probe.fixes[0].startswith("train at lr 0.00")
    names = [r["factor"] for r in probe.values["probe"]]
    assert names[-4:] == ["LR/10", "LR/3", "LR", "3xLR"] and set(names[:-4]) <= {"LR/100", "LR/30"}
    assert probe.values["batch_size"] == 8 and probe.values["grad_clip"] == 1.0  # the run's own settings
    failed = sorted(cid for cid, r in results.items() if r.status is Status.FAIL)
    # optimizer_update steps at the run's own rate (the checkpoint's), as the lr_too_high fault's 0.1
    assert failed == ["lr_probe", "optimizer_update"]
    assert "at lr 0.1 (the run's, from the checkpoint's train_config)" in results["optimizer_update"].summary


@pytest.mark.slow
def test_a_run_at_its_usual_rate_passes(trained_workspace):
    probe = run(trained_workspace, ["lr_probe"], lr_probe=True)["lr_probe"]
    assert probe.status is Status.PASS, probe.summary
    assert "lr 0.001 (the checkpoint's train_config) is near the best" in probe.summary
    curves = probe.values["curves"]
    assert set(curves) == {"LR/10", "LR/3", "LR", "3xLR"} and all(len(s) == len(v) == 5 for s, v in curves.values())


@pytest.mark.slow
def test_the_rate_given_with_lr_is_probed_on_a_fresh_model_from_config(tiny_workspace, config):
    # lr 1.0 is far past the edge, so LR/10 wins by tens of nats in 60 steps whatever the float
    # order; at 0.3 the gap is 0.1-0.4 nats and moves with the machine's summation order
    probe = run(
        tiny_workspace,
        ["lr_probe"],
        checkpoint="none",
        config_path=config,
        lr_probe=True,
        lr_probe_steps=60,
        run_learning_rate=1.0,
    )["lr_probe"]
    assert probe.status is Status.FAIL and "lr 1 (--lr) is too high" in probe.summary, probe.summary
    assert probe.values["config_source"] == f"--config {config}"


def test_the_probe_is_opt_in(trained_workspace):
    probe = run(trained_workspace, ["lr_probe"])["lr_probe"]
    assert probe.status is Status.SKIP and "--lr-probe" in probe.summary


def test_without_a_known_rate_it_skips_asking_for_lr(tiny_workspace, config):
    probe = run(tiny_workspace, ["lr_probe"], checkpoint="none", config_path=config, lr_probe=True)["lr_probe"]
    assert probe.status is Status.SKIP and "pass --lr" in probe.summary


def test_without_the_runs_config_it_skips_rather_than_probe_another_model(tiny_workspace):
    probe = run(tiny_workspace, ["lr_probe"], checkpoint="none", lr_probe=True, run_learning_rate=1e-3)["lr_probe"]
    assert probe.status is Status.SKIP
    assert "its config is unknown (the debug preset" in probe.summary and "--config" in probe.summary


def test_the_rate_comes_from_the_log_when_the_checkpoint_has_no_settings(trained_workspace, config):
    ctx = CheckContext(CheckOptions(workspace=trained_workspace.root, checkpoint="none", config_path=config))
    lr, source = run_learning_rate(ctx)
    assert lr == pytest.approx(1e-3) and source == f"the peak lr in {trained_workspace.metrics}"
    ctx = CheckContext(CheckOptions(workspace=trained_workspace.root, run_learning_rate=0.02))
    assert run_learning_rate(ctx) == (0.02, "--lr")
    ctx = CheckContext(CheckOptions(workspace=trained_workspace.root))
    assert run_learning_rate(ctx) == (pytest.approx(1e-3), "the checkpoint's train_config")


def _runs(*scores, diverged=None):
    factors = (0.1, 1 / 3, 1.0, 3.0)
    return [
        ProbeRun(f, 1e-3 * f, [30, 60], [s, s], s, diverged if not math.isfinite(s) else None)
        for f, s in zip(factors, scores)
    ]


def _judge(*scores, diverged=None):
    try:
        summary, values = _verdict(_runs(*scores, diverged=diverged), 1e-3, "--lr", 60, math.log(65), {})
        return Status.PASS, summary
    except Outcome as out:
        return out.status, out.summary


def test_verdicts_from_the_losses_side_by_side():
    assert _judge(2.6, 2.4, 2.3, 2.29)[0] is Status.PASS  # the run's rate within the margin of the best
    status, summary = _judge(2.2, 2.25, 2.3, 2.6)
    assert status is Status.WARN and "too high: LR/10" in summary  # 0.1 nats: a warning
    status, summary = _judge(2.2, 2.5, 3.1, 3.3)
    assert status is Status.FAIL and "too high" in summary and "0.900 nats lower" in summary
    status, summary = _judge(2.4, 2.3, math.inf, math.inf, diverged=40)
    assert status is Status.FAIL and "diverged at step 40" in summary
    status, summary = _judge(3.0, 2.8, 2.6, 2.3)
    assert status is Status.WARN and "may be too low" in summary  # short runs favour larger rates: only a warning
    assert _judge(3.0, 2.8, 2.6, 2.55)[0] is Status.PASS  # a larger rate a little better is no finding
    status, summary = _judge(4.1, 4.0, 3.95, 3.9)
    assert status is Status.WARN and summary.startswith("unsure: no rate learned much")
    status, summary = _judge(math.inf, math.inf, math.inf, math.inf, diverged=10)
    assert status is Status.FAIL and summary.startswith("every probe rate diverged")


def test_a_probe_whose_best_rate_is_at_an_end_goes_on_past_it():
    from minigpt.checks.lr_probe_checks import next_factor

    # GIVEN the four rates, 3xLR clearly best (a run 100x too low): the probe goes on to 10xLR, 30xLR...
    runs = _runs(4.5, 4.45, 4.4, 4.2)
    assert next_factor(runs) == 10.0
    runs.append(ProbeRun(10.0, 1e-2, [30, 60], [3.5, 3.5], 3.5, None))
    assert next_factor(runs) == 30.0
    # ... and stops where a larger rate no longer wins, or at the ladder's end
    runs.append(ProbeRun(30.0, 3e-2, [30, 60], [3.6, 3.6], 3.6, None))
    assert next_factor(runs) is None
    # a run too high goes down past LR/10; one near its best goes nowhere
    assert next_factor(_runs(2.2, 2.5, 3.1, 3.3)) == 0.03
    assert next_factor(_runs(2.6, 2.4, 2.3, 2.29)) is None


def test_a_rate_off_by_ten_times_or_more_fails_and_the_advice_moves_by_the_measured_factor():
    # GIVEN the probe of a run 100x too low: 30xLR ends best, far ahead of the run's own rate
    runs = _runs(4.5, 4.45, 4.4, 4.2) + [
        ProbeRun(f, 1e-3 * f, [30, 60], [s, s], s, None) for f, s in ((10.0, 3.5), (30.0, 3.1), (100.0, 3.3))
    ]
    with pytest.raises(Outcome) as out:
        _verdict(runs, 1e-3, "--lr", 60, math.log(65), {})
    # THEN it fails (not a warning), naming the factor measured, and the advice is that rate
    assert out.value.status is Status.FAIL and "too low" in out.value.summary and "30xLR" in out.value.summary
    assert out.value.fixes[0].startswith("train at lr 0.03 (30x the run's")
    # AND a rate 10x too high fails the same way, its advice 10x lower
    with pytest.raises(Outcome) as out:
        _verdict(_runs(2.2, 2.3, 2.4, 2.6) + [ProbeRun(0.03, 3e-5, [30], [2.4], 2.4, None)], 1e-3, "--lr", 60, None, {})
    assert out.value.status is Status.FAIL and out.value.fixes[0].startswith("train at lr 0.0001 (1/10 of the run's")
