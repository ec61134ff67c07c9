"""The curve rules (`minigpt.logs.curve_rules`): diagnosis of real (tests/fixtures/curves) and synthetic loss
curves, each rule seen firing on one curve and silent on another."""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from pathlib import Path

import pytest

from minigpt.logs.curve import SHAPE_SEVERITY, VALUE_KEYS
from minigpt.logs.curve_rules import RULES, diagnose
from minigpt.logs.curve_series import derive
from minigpt.logs.metrics import MetricPoint, read_metrics

LOG_V = math.log(65)


def points_from(losses, *, every=10, lr=1e-3, vals=None):
    """Train points at steps every, 2*every, ...; `vals` maps step -> val loss."""
    vals = vals or {}
    pts = []
    for i, loss in enumerate(losses):
        step = (i + 1) * every
        pts.append(MetricPoint(step=step, train_loss=loss, val_loss=vals.get(step), lr=lr))
    return pts


def decaying(n=500, *, noise=0.05, seed=0, floor=1.3, tau=None):
    rng = random.Random(seed)
    tau = tau or n / 2
    return [floor + (LOG_V - floor) * math.exp(-i / tau) + rng.gauss(0, noise) for i in range(n)]


# -- diagnosis on real curves (tests/fixtures/curves, made by tools/make_curve_fixtures.py) ---------

FIXTURES = Path(__file__).parent / "fixtures" / "curves"
EXPECTED = json.loads((FIXTURES / "expected.json").read_text())


def real(name):
    """A fixture's points and its baseline log V."""
    return read_metrics(FIXTURES / f"{name}.jsonl").points, math.log(EXPECTED[name]["vocab_size"])


def real_diagnosis(name):
    points, baseline = real(name)
    return diagnose(points, baseline=baseline)


def run_rule(rule, name):
    points, baseline = real(name)
    return dict(RULES)[rule](derive(points, baseline))


def shown(x):
    """A loss as summaries print it."""
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.4g}"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_curve_has_its_expected_shape(name):
    d = real_diagnosis(name)
    assert d.shape == EXPECTED[name]["shape"], d.summary
    assert d.values["rule"] is not None


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_real_curve_summary_quotes_the_last_logged_train_loss(name):
    d = real_diagnosis(name)
    if d.shape != "diverged":
        assert f"last {shown(d.values['last_train_loss'])}" in d.summary, d.summary
        assert f"median of the last {d.values['edge_points']}" in d.summary, d.summary


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_only_a_curve_that_never_rose_and_learned_little_is_told_to_raise_the_learning_rate(name):
    d = real_diagnosis(name)
    raise_lr = any("raise the learning rate" in f for f in d.fixes)
    assert raise_lr == (d.shape in ("flat", "barely_learned")), (d.shape, d.fixes)


def test_fixture_files_are_small_and_every_expected_shape_has_a_severity():
    for name, spec in EXPECTED.items():
        assert (FIXTURES / f"{name}.jsonl").stat().st_size < 8000, name
        assert SHAPE_SEVERITY[spec["shape"]] in ("pass", "warn", "fail", "skip")
    assert set(SHAPE_SEVERITY) == {
        "healthy",
        "still_improving",
        "too_short",
        "diverged",
        "unstable",
        "flat",
        "scaled_loss",
        "too_good",
        "oscillating",
        "spikes",
        "barely_learned",
        "plateau",
        "overfitting",
    }
    assert [s for s, sev in SHAPE_SEVERITY.items() if sev == "fail"] == ["diverged", "unstable", "flat", "too_good"]


def test_far_too_high_learning_rate_is_unstable_not_flat_with_lower_lr_advice():
    # GIVEN `--lr 3 --grad-clip 0`: train loss 50 -> 330 -> 10 with a uniform guess of log 103 = 4.6
    for baseline in (math.log(103), None):
        d = diagnose(real("lr_3_noclip")[0], baseline=baseline)
        # THEN it is unstable (with or without the baseline), blamed on the LR, and the fix lowers it
        assert d.shape == "unstable", d.summary
        assert "too high" in d.causes[0]
        assert d.fixes[0].startswith("lower the learning rate") and "peak 3" in d.fixes[0]
    assert "last 9.822 (median of the last 3: 33.900)" in d.summary


# each rule: a real curve it fires on, and one it stays silent on
@pytest.mark.parametrize(
    "rule, fires_on, silent_on",
    [
        ("nonfinite", "nonfinite", "lr_3_noclip"),
        ("unstable", "lr_3_noclip", "lr_1e-4"),
        ("unstable", "lr_1_blowup", "warmup_bump"),
        ("flat", "lr_1e-6", "lr_1e-4"),
        ("flat", "lr_1e-6", "lr_3_noclip"),  # ended above the uniform guess, but it rose: never flat
        ("overfitting", "overfit_tiny", "lr_1e-3"),
        ("overfitting", "hf_end_of_training_line", "lr_0.5_b8"),  # val rose by chance, train did not fall
        ("scaled_loss", "accum_8_logged_divided", "lr_1e-3"),
        ("scaled_loss", "accum_8_logged_divided", "overfit_tiny"),  # a train/val gap that opened slowly
        ("oscillating", "lr_0.5_b8", "plateau_lr_0.2"),  # level too, but val does not swing
        ("oscillating", "lr_0.5_b8", "lr_1e-3"),
        ("barely_learned", "lr_1e-5", "lr_1e-4"),
        ("spikes", "spike_after_warmup_bump", "lr_1e-3"),
        ("spikes", "spike_after_warmup_bump", "warmup_bump"),
        ("plateau", "plateau_lr_0.2", "lr_1e-3"),
        ("still_improving", "lr_1e-4", "lr_1e-3"),
        ("still_improving", "lr_1e-4", "plateau_lr_0.2"),
    ],
)
def test_rule_fires_on_one_real_curve_and_not_on_another(rule, fires_on, silent_on):
    fired = run_rule(rule, fires_on)
    assert fired is not None, rule
    assert run_rule(rule, silent_on) is None, run_rule(rule, silent_on).summary


def test_too_short_rule_on_the_first_four_and_first_five_points_of_a_real_run():
    points, baseline = real("lr_1e-3")
    assert dict(RULES)["too_short"](derive(points[:4], baseline)) is not None
    assert dict(RULES)["too_short"](derive(points[:5], baseline)) is None


def test_healthy_is_what_remains_for_a_converged_run_only():
    assert real_diagnosis("lr_1e-3").shape == "healthy"
    assert "converged" in real_diagnosis("lr_1e-3").summary
    assert real_diagnosis("lr_1e-4").shape != "healthy"


def test_warmup_bump_that_recovers_is_excused_but_a_blow_up_is_not():
    points, baseline = real("warmup_bump")
    bumped = derive(points, baseline)
    assert len(bumped.bumps) == 1 and bumped.values["warmup_end_step"] == 150
    rise, peak, back = bumped.values["warmup_bump_steps"][0]
    assert rise <= 150 < back and peak == bumped.values["peak_train_step"] == 160
    assert "warmup bump" in real_diagnosis("warmup_bump").summary
    # GIVEN a run with a bigger warmup bump (to 5.2) and a later spike: only the later spike is reported
    points, baseline = real("spike_after_warmup_bump")
    assert real_diagnosis("spike_after_warmup_bump").values["spike_steps"] == [310]
    # WHEN the learning rate is not logged, the warmup is unknown and the bump itself is the spike
    no_lr = [MetricPoint(p.step, p.train_loss, p.val_loss) for p in points]
    assert diagnose(no_lr, baseline=baseline).values["spike_steps"] == [160]
    # a rise to 39 at the end of warmup is no bump
    assert derive(*real("lr_1_blowup")).bumps == []


def test_learning_rate_cut_is_found_and_the_drop_is_healthy():
    cut = derive(*real("lr_cut_on_resume"))
    assert cut.values["lr_cut_steps"] == [310]
    d = real_diagnosis("lr_cut_on_resume")
    assert d.shape == "healthy" and "learning rate cut from 0.05" in d.summary and "healthy drop" in d.summary
    # a cosine decay, however far it falls, is no cut
    assert derive(*real("lr_1e-3")).cuts == [] and derive(*real("lr_1e-6")).cuts == []


def test_step_decay_late_in_the_run_is_not_read_as_still_improving():
    # GIVEN a loss level at 3.0, then a step cut of the LR at 75% of the run that drops it to 2.5
    rng = random.Random(8)
    losses = [2.5 + 1.5 * math.exp(-i / 10) + rng.gauss(0, 0.02) for i in range(150)]
    losses += [2.0 + 0.5 * math.exp(-i / 3) + rng.gauss(0, 0.02) for i in range(50)]
    pts = points_from(losses)
    for p in pts[150:]:
        p.lr = 1e-4
    d = diagnose(pts)
    # THEN the cut is named and the trend is measured after it (level: converged)
    assert d.values["lr_cut_steps"] == [1510] and d.shape == "healthy", d.summary
    # WITHOUT the LR in the log the drop reads as a still-falling tail
    for p in pts:
        p.lr = None
    assert diagnose(pts).shape == "still_improving"


def test_resumed_run_is_one_curve():
    points, _ = real("resumed")
    steps = [p.step for p in points]
    assert steps == sorted(set(steps)) and steps[-1] == 700 and 300 in steps


def test_other_peoples_key_names_give_the_same_diagnosis():
    assert '"iter"' in (FIXTURES / "foreign_keys.jsonl").read_text()
    theirs, ours = real_diagnosis("foreign_keys"), real_diagnosis("lr_1e-4")
    assert (theirs.shape, theirs.summary) == (ours.shape, ours.summary)


def test_nonfinite_line_as_the_trainer_writes_it_is_diverged_at_its_step():
    d = real_diagnosis("nonfinite")
    assert d.values["nonfinite_what"] == "grad_norm" and d.values["first_nonfinite_step"] == 165
    assert "165" in d.summary and d.values["lr_at_instability"] == pytest.approx(24.8, rel=0.01)


def test_a_summary_line_at_the_last_step_keeps_that_steps_val_loss():
    # GIVEN the lines a Trainer's callback writes: val 3.0/2.5/2.3/2.9 at steps 25-100, each after its step's
    # train line, then the end-of-training log at step 100 (train_runtime, no losses)
    d = real_diagnosis("hf_end_of_training_line")
    # THEN step 100 keeps its train and val loss: the last val is 2.9 and the curve is overfitting
    assert d.values["last_val_loss"] == 2.9 and d.values["last_step"] == 100
    assert d.values["last_train_loss"] == 1.9056
    assert d.shape == "overfitting" and "to 2.900 (last)" in d.summary, d.summary
    assert d.values["overfit_margin"] == pytest.approx(0.05) and d.values["train_fall_since_best"] > 0.01


def test_a_train_loss_logged_divided_by_the_accumulation_count_is_named_with_its_factor():
    # GIVEN `--grad-accum 8` logging the loss it scaled for backward(): train 1/8 of val from the first evaluation
    d = real_diagnosis("accum_8_logged_divided")
    assert d.shape == "scaled_loss", d.summary
    assert d.values["scale_factor"] == 8 and d.values["train_val_ratio"] == pytest.approx(0.133, abs=0.005)
    assert d.values["train_val_ratio_spread"] < 0.05
    assert "0.133 x the val loss (median of 6 evaluations" in d.summary and "about 1/8" in d.summary
    assert "first train loss 0.524 at step 10 vs log V 4.635" in d.summary
    assert "accumulation count (8 by this ratio)" in d.causes[0] and "loss.item() * grad_accum" in d.fixes[0]


def test_a_fresh_models_first_loss_far_below_log_v_is_a_scaled_loss_unless_val_says_otherwise():
    # GIVEN a loop logging from step 1 whose loss is log V / 8 and falls from there, with no evaluation
    losses = [(1.3 + (LOG_V - 1.3) * math.exp(-i / 40)) / 8 for i in range(100)]
    pts = points_from(losses, every=1)
    d = diagnose(pts, baseline=LOG_V)
    assert d.shape == "scaled_loss" and d.values["scale_factor"] == 8, d.summary
    assert f"first train loss {shown(losses[0])} at step 1 vs log V {LOG_V:.3f}" in d.summary
    # WHEN an evaluation puts val next to train (a model that did not start fresh) THEN it is no scaled loss
    for p in pts[::20]:
        p.val_loss = p.train_loss * 1.02
    assert diagnose(pts, baseline=LOG_V).shape != "scaled_loss"
    # and a log that starts later says nothing about the initial loss
    assert diagnose(points_from(losses, every=10), baseline=LOG_V).shape != "scaled_loss"


def test_a_train_loss_summed_where_val_is_averaged_is_a_scaled_loss_k_times_val():
    losses = decaying(n=200, noise=0.02, seed=11)
    vals = {s: 4 * (1.3 + (LOG_V - 1.3) * math.exp(-(s / 10 - 1) / 100)) for s in range(100, 2001, 100)}
    d = diagnose(points_from([4 * y for y in losses], vals={s: v / 4 for s, v in vals.items()}))
    assert d.shape == "scaled_loss" and d.values["scale_factor"] == 4 and "about 4x" in d.summary, d.summary
    assert d.causes[0].startswith("the train loss is summed over 4 micro-batches or tokens")


def swinging(n, seed=1, period=16):
    """A loss that falls quickly from log V, then swings +-0.35 about 3.0 without progress (LR too high): train
    logged every 10 steps, val every 40, the val swinging with the weights."""
    rng = random.Random(seed)
    pts = []
    for i in range(n):
        fall, swing = 1.2 * math.exp(-i / 6), math.sin(2 * math.pi * i / period)
        p = MetricPoint((i + 1) * 10, train_loss=3.0 + fall + 0.35 * swing + rng.gauss(0, 0.05), lr=0.05)
        if (i + 1) % 4 == 0:
            p.val_loss = 3.05 + fall + 0.3 * swing + rng.gauss(0, 0.01)
        pts.append(p)
    return pts


def test_a_loss_swinging_about_a_flat_level_is_oscillating_not_overfitting():
    # GIVEN a swing whose val happens to end on an upswing while train ends lower than at the best val
    for n in (112, 116, 120):
        d = diagnose(swinging(n), baseline=LOG_V)
        # THEN it is named for the swing, with the LR advice, whichever side of a swing the run ends on
        assert d.shape == "oscillating", (n, d.summary)
        assert d.causes[0].startswith("learning rate too high") and "lower the learning rate 3x" in d.fixes[0]
        assert d.values["swing_val"] > 0.15 and d.values["swing_val"] / d.values["swing_train"] > 0.8
        assert "without progress" in d.summary and f"+-{d.values['swing_val']:.3f}" in d.summary


@pytest.mark.parametrize("train_falls", [False, True])
def test_val_rising_is_overfitting_only_while_train_falls(train_falls):
    # GIVEN val falling to 2.05 at step 1200, then rising to 2.35 by step 2000, and a train loss that is level
    # at 2.0 from step 1000 on (or keeps falling)
    rng = random.Random(13)
    losses = [2.0 + 2.0 * math.exp(-i / 20) - (0.002 * max(0, i - 100) if train_falls else 0) for i in range(200)]
    losses = [y + rng.gauss(0, 0.05) for y in losses]
    vals = {s: 2.05 + 2.0 * math.exp(-s / 200) + 0.3 * max(0, s - 1200) / 800 for s in range(100, 2001, 100)}
    c = derive(points_from(losses, vals=vals), LOG_V)
    fired = dict(RULES)["overfitting"](c)
    # THEN the rise clears its margin either way, and only a falling train loss makes it overfitting
    assert c.values["overfit_rise"] > c.values["overfit_margin"]
    assert (fired is not None) == train_falls
    fall, se = c.values["train_fall_since_best"], c.values["train_fall_since_best_se"]
    assert (fall > 2 * se) == train_falls


def test_a_loss_that_fell_a_few_percent_of_the_way_from_log_v_barely_learned():
    # GIVEN `--lr 1e-5` for 300 steps: 4.54 -> 4.22 against log V 4.635; the demo text's unigram entropy 3.253
    points, baseline = real("lr_1e-5")
    for unigram, words in ((3.2528, "30% of the way from log V 4.635 to the unigram entropy 3.253"), (None, "9.0%")):
        d = diagnose(points, baseline=baseline, unigram_entropy=unigram)
        # THEN it is no "converged": it names how much was learned and a learning rate too low
        assert d.shape == "barely_learned" and words in d.summary, d.summary
        assert d.causes[0].startswith("learning rate too low (peak 1e-05)")
        assert d.fixes[0].startswith("raise the learning rate 3-10x") and "--lr-probe" in d.fixes[1]
    assert d.values["fraction_below_guess"] == pytest.approx(0.09, abs=0.001)
    # a run that got past the unigram entropy is not
    assert diagnose(real("lr_1e-4")[0], baseline=baseline, unigram_entropy=3.2528).shape == "still_improving"


def test_a_loss_that_stalled_early_short_of_the_unigram_entropy_is_a_plateau_not_barely_learned():
    # GIVEN a loss that drops to 4.0 in the first steps and stays there (LR too high, not too low)
    rng = random.Random(12)
    losses = [4.0 + 0.6 * math.exp(-i / 2) + rng.gauss(0, 0.01) for i in range(100)]
    d = diagnose(points_from(losses), baseline=math.log(103), unigram_entropy=3.2528)
    assert d.values["learned_fraction"] < 0.5
    assert d.shape == "plateau" and d.causes[0].startswith("learning rate too high"), d.summary


def converging_run(seed, n=400, every=10, eval_every=5):
    """A run that converges by ~60% of its length; single-batch train noise 0.12, val noise 0.02."""
    rng, pts = random.Random(seed), []
    for i in range(n):
        level = 1.5 + (LOG_V - 1.5) * math.exp(-i / 60)
        p = MetricPoint((i + 1) * every, train_loss=level + rng.gauss(0, 0.12), lr=1e-3)
        if (i + 1) % eval_every == 0:
            p.val_loss = level + 0.05 + rng.gauss(0, 0.02)
        pts.append(p)
    return pts


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_live_verdict_on_noisy_validation_changes_once_as_the_run_grows(seed):
    # GIVEN a converging run with noisy evaluations, WHEN it is judged at every evaluation from point 20 on
    pts = converging_run(seed)
    shapes = [diagnose(pts[:k], baseline=LOG_V).shape for k in range(20, len(pts) + 1, 5)]
    changes = [(a, b) for a, b in zip(shapes, shapes[1:]) if a != b]
    # THEN it goes from still improving to healthy once: never overfitting on a noisy evaluation, never back
    assert changes == [("still_improving", "healthy")], changes


def test_the_margins_a_verdict_used_are_in_its_values():
    d = diagnose(converging_run(0), baseline=LOG_V)
    assert d.values["val_noise"] == pytest.approx(0.02, rel=0.3)
    low, high = d.values["improving_band"]
    assert high - 0.03 == pytest.approx(0.03 - low) == pytest.approx(d.values["recent_improvement_se"])
    assert d.values["overfit_margin"] is None or d.values["overfit_margin"] >= 4 * d.values["val_noise"]


# -- diagnosis on synthetic curves ------------------------------------------------------------


def test_noisy_exponential_decay_still_falling_at_the_end_is_still_improving():
    d = diagnose(points_from(decaying()), baseline=LOG_V)
    assert d.shape == "still_improving", d.summary
    assert d.values["spike_steps"] == []
    assert "train longer" in d.fixes[0]


def test_noisy_decay_that_levelled_off_is_healthy():
    d = diagnose(points_from(decaying(tau=500 / 8)), baseline=LOG_V)
    assert d.shape == "healthy", d.summary
    assert d.causes == [] and d.fixes == []


@pytest.mark.parametrize("baseline", [LOG_V, None])
def test_constant_loss_at_uniform_guess_is_flat(baseline):
    rng = random.Random(1)
    d = diagnose(points_from([LOG_V + rng.gauss(0, 0.05) for _ in range(300)]), baseline=baseline)
    assert d.shape == "flat", d.summary
    assert any("learning rate" in c for c in d.causes)


def test_loss_stuck_at_baseline_after_bad_init_is_flat_only_with_baseline():
    # GIVEN a loss that falls from 6.0 (bad init) to log V and stays there
    losses = [LOG_V + (6.0 - LOG_V) * math.exp(-i / 10) for i in range(300)]
    # THEN only the baseline shows it learned nothing beyond guessing
    assert diagnose(points_from(losses), baseline=LOG_V).shape == "flat"
    assert diagnose(points_from(losses)).shape != "flat"


def test_zero_learning_rate_named_first_cause_of_flat():
    d = diagnose(points_from([3.0] * 50, lr=0.0))
    assert d.shape == "flat"
    assert "learning rate is 0" in d.causes[0]


def test_two_big_spikes_are_reported_at_their_steps():
    losses = decaying(seed=2)
    losses[199] += 2.0  # step 2000
    losses[349] += 1.5  # step 3500
    d = diagnose(points_from(losses, lr=3e-3))
    assert d.shape == "spikes", d.summary
    assert d.values["spike_steps"] == [2000, 3500]
    assert d.values["lr_at_instability"] == 3e-3


def test_healthy_noisy_curve_is_not_called_spikes():
    for seed in range(5):
        d = diagnose(points_from(decaying(seed=100 + seed, noise=0.05)))
        assert SHAPE_SEVERITY[d.shape] == "pass", (seed, d.summary)


def test_very_noisy_healthy_curve_is_not_called_spikes():
    # GIVEN minibatch noise so large (std 0.3) that jumps of 0.5 nats are ordinary
    for seed in range(5):
        d = diagnose(points_from(decaying(n=2000, seed=200 + seed, noise=0.3)))
        # THEN the noise scale (MAD), not the 0.5 floor, sets the spike threshold
        assert SHAPE_SEVERITY[d.shape] == "pass", (seed, d.summary)


def test_val_rising_while_train_falls_is_overfitting_with_positive_gap():
    losses = decaying(n=500, noise=0.02, seed=3, floor=0.5)
    # val every 500 steps: falls to 1.6 at step 2500, then rises
    vals = {
        500: 3.0,
        1000: 2.2,
        1500: 1.8,
        2000: 1.65,
        2500: 1.6,
        3000: 1.63,
        3500: 1.68,
        4000: 1.75,
        4500: 1.83,
        5000: 1.9,
    }
    d = diagnose(points_from(losses, vals=vals))
    assert d.shape == "overfitting", d.summary
    assert d.values["best_val_step"] == 2500
    assert d.values["generalisation_gap"] > 0.5
    assert any("best checkpoint" in f for f in d.fixes)


def test_val_falling_with_train_is_not_overfitting():
    losses = decaying(n=500, noise=0.02, seed=3)
    vals = {s: 1.5 + 3.0 * math.exp(-s / 2500) for s in range(500, 5001, 500)}
    assert SHAPE_SEVERITY[diagnose(points_from(losses, vals=vals)).shape] == "pass"


@pytest.mark.parametrize("nan_text", ['"nan"', "NaN"])
def test_nan_at_step_57_is_diverged_with_the_lr_there(tmp_path, nan_text):
    path = tmp_path / "metrics.jsonl"
    lines = [json.dumps({"step": s, "train_loss": 4.0 - 0.01 * s, "lr": 1e-4 * s}) for s in range(1, 57)]
    lines.append(f'{{"step": 57, "train_loss": {nan_text}, "lr": 0.0057, "grad_norm": "inf", "nonfinite": true}}')
    path.write_text("\n".join(lines) + "\n")
    log = read_metrics(path)
    assert log.bad_lines == 0 and len(log.points) == 57
    d = diagnose(log.points)
    assert d.shape == "diverged", d.summary
    assert d.values["first_nonfinite_step"] == 57
    assert d.values["lr_at_instability"] == pytest.approx(0.0057)
    assert "57" in d.summary


def test_nonfinite_grad_norm_on_the_last_line_is_diverged():
    pts = points_from(decaying(n=50))
    pts[-1].grad_norm = math.inf
    assert diagnose(pts).shape == "diverged"


def test_fewer_than_five_points_is_too_short():
    assert diagnose(points_from([4.0, 3.5, 3.2, 3.0])).shape == "too_short"
    assert diagnose([]).shape == "too_short"


def test_every_value_key_is_present_whatever_the_shape():
    for pts in ([], points_from([4.0, math.nan]), points_from(decaying()), real("warmup_bump")[0]):
        assert set(diagnose(pts).values) == set(VALUE_KEYS)


def test_steadily_rising_loss_is_unstable_and_blames_the_learning_rate():
    d = diagnose(points_from([2.0 + 0.004 * i for i in range(300)]))
    assert d.shape == "unstable", d.summary
    assert d.values["unstable_reason"] == "ended_above_start"
    assert "too high" in d.causes[0]
    assert not any("raise" in f for f in d.fixes)


def test_loss_rising_only_in_the_tail_is_unstable():
    # GIVEN a healthy fall, then a steady rise over the last third that stays below the start
    rng = random.Random(9)
    losses = [2.0 + 2.0 * math.exp(-i / 30) + rng.gauss(0, 0.01) for i in range(200)]
    losses += [losses[-1] + 0.004 * i + rng.gauss(0, 0.01) for i in range(100)]
    d = diagnose(points_from(losses))
    assert d.shape == "unstable" and d.values["unstable_reason"] == "rising", d.summary
    # THEN the same fall without the rise is not
    assert diagnose(points_from(losses[:200])).shape != "unstable"


def test_sustained_rise_that_comes_back_is_unstable_not_flat():
    # GIVEN a loss at 2.5 that rises to 4 for a third of the run, then returns to 2.5
    rng = random.Random(10)
    losses = [2.5 + rng.gauss(0, 0.02) for _ in range(300)]
    for i in range(100, 200):
        losses[i] += 1.5
    d = diagnose(points_from(losses))
    assert d.shape == "unstable" and d.values["unstable_reason"] == "surge", d.summary


def test_long_plateau_is_plateau_with_its_start():
    rng = random.Random(4)
    # falls fast for ~100 points, then stays at 2.5 for the remaining 400
    losses = [2.5 + 1.7 * math.exp(-i / 20) + rng.gauss(0, 0.03) for i in range(500)]
    d = diagnose(points_from(losses))
    assert d.shape == "plateau", d.summary
    assert 200 <= d.values["plateau_start_step"] <= 1500
    assert d.values["recent_improvement"] < 0.01


def test_perplexity_does_not_overflow():
    d = diagnose(points_from([1000.0 - i for i in range(100)]))
    assert d.values["train_perplexity"] == math.inf


def test_blow_up_far_above_uniform_guess_is_unstable_even_when_it_recovers():
    # GIVEN a run whose loss exploded to hundreds before the first log line, then fell (lr 3.0, no clipping)
    rng = random.Random(6)
    losses = [300 * math.exp(-i / 12) + 3.3 + rng.gauss(0, 0.05) for i in range(150)]
    d = diagnose(points_from(losses, every=5, lr=3.0), baseline=LOG_V)
    assert d.shape == "unstable", d.summary
    assert d.values["unstable_reason"] == "far_above_guess" and d.values["lr_at_instability"] == 3.0


def test_tail_too_noisy_to_resolve_one_percent_is_not_called_plateau():
    # GIVEN 120 points with minibatch noise std 0.13 (batch 8): the tail slope has a ~3% error
    rng = random.Random(7)
    losses = [2.4 + 1.0 * math.exp(-i / 15) + rng.gauss(0, 0.13) for i in range(120)]
    d = diagnose(points_from(losses, every=5))
    assert d.shape == "healthy", d.summary
    assert "too noisy" in d.summary and d.values["recent_improvement_se"] > 0.01


def test_curve_imports_no_torch_rich_or_textual():
    code = "import sys, minigpt.logs.curve; print([m for m in ('torch', 'rich', 'textual') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_slow_fall_judged_without_log_v_is_not_called_converged():
    # GIVEN the same `--lr 1e-5` run judged where the vocabulary size is unknown (no tokenizer to read)
    d = diagnose(real("lr_1e-5")[0])
    # THEN it is no "converged": the loss still falls measurably, and the verdict says what it could not judge
    assert "converged" not in d.summary, d.summary
    assert "still falling slowly" in d.summary and "log V unknown" in d.summary
    # a run that levelled off is still converged
    assert "converged" in real_diagnosis("lr_1e-3").summary


# -- too_good: a level no text allows -------------------------------------------------------------


@pytest.mark.parametrize(
    "baseline, unigram, words",
    [
        (LOG_V, 2.9, "10% of the unigram entropy 2.900"),
        (LOG_V, None, "5% of log V 4.174"),
        (None, None, "nats per token, near 0 (log V and the unigram entropy are unknown here)"),
    ],
)
def test_a_val_loss_below_what_text_allows_is_too_good_not_still_improving(baseline, unigram, words):
    # a model shown its targets: the loss falls towards 0, val included, still falling at the end
    losses = [max(0.002, LOG_V * math.exp(-i / 40)) for i in range(300)]
    vals = {step: losses[step // 10 - 1] for step in range(500, 3001, 500)}
    d = diagnose(points_from(losses, vals=vals), baseline=baseline, unigram_entropy=unigram)
    assert d.shape == "too_good", d.summary
    assert words in d.summary and "no real text is that predictable" in d.summary
    assert any("targets leak" in c for c in d.causes) and not any("train longer" in f for f in d.fixes)
    assert "memorised" not in " ".join(d.causes)  # an evaluation on held-out text rules that out


def test_a_train_loss_alone_near_zero_also_names_a_memorised_corpus():
    losses = [max(0.01, LOG_V * math.exp(-i / 40)) for i in range(300)]
    d = diagnose(points_from(losses), baseline=LOG_V, unigram_entropy=2.9)
    assert d.shape == "too_good" and "with no evaluation" in d.summary
    assert any("memorised a small corpus" in c for c in d.causes)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_no_real_curve_is_too_good(name):
    assert run_rule("too_good", name) is None


# -- flat: the learning-rate advice held against the logged rate ---------------------------------


def _flat(lr):
    return diagnose(points_from([LOG_V + 0.01 * math.sin(i) for i in range(100)], lr=lr), baseline=LOG_V)


def test_a_flat_run_at_a_usual_learning_rate_is_not_told_to_raise_it():
    d = _flat(1e-3)
    assert d.shape == "flat"
    assert not any("raise the learning rate" in f for f in d.fixes), d.fixes
    assert d.causes[0].startswith("measured: the logged peak learning rate 0.001 is in AdamW's usual range")
    assert any("frozen or missing from the optimizer" in c for c in d.causes)


def test_a_flat_run_at_a_tiny_learning_rate_names_the_rate():
    d = _flat(1e-7)
    assert d.shape == "flat" and "the logged peak is 1e-07" in d.causes[0]
    assert any("raise the learning rate" in f for f in d.fixes)
