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

from minigpt.logs.curve import SHAPE_SEVERITY, VALUE_KEYS, derive
from minigpt.logs.curve_rules import RULES, diagnose
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
def test_only_a_flat_curve_is_told_to_raise_the_learning_rate(name):
    d = real_diagnosis(name)
    raise_lr = any("raise the learning rate" in f for f in d.fixes)
    assert raise_lr == (d.shape == "flat"), (d.shape, d.fixes)


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
        "spikes",
        "plateau",
        "overfitting",
    }
    assert [s for s, sev in SHAPE_SEVERITY.items() if sev == "fail"] == ["diverged", "unstable", "flat"]


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
