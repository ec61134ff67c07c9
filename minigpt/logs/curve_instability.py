"""The curve rules for a loss that went the wrong way: a non-finite value (`rule_nonfinite`), a rise
or a blow-up (`rule_unstable`, whose `unstable_reason` the flat rule asks too), and spikes
(`rule_spikes`). Each reports the learning rate at the step it went wrong (`lr_at_instability`) and
names a raise of the learning rate before that step as the first suspect (`_blame_raise`).
`curve_rules.RULES` orders them among the others; the thresholds and their reasons are in
`minigpt.logs.curve_rules`' docstring."""

from __future__ import annotations

import math

from minigpt.logs.curve import (
    FAR_RATIO,
    RISE_ABS,
    RISE_REL,
    RISING_REL,
    RISING_SE,
    SPIKE_MADS,
    SPIKE_MIN_BLOCK,
    SPIKE_MIN_JUMP,
    SPIKE_SCALE_BLOCKS,
    SURGE_ABS,
    SURGE_REL,
    CurveDiagnosis,
    fmt_loss,
)
from minigpt.logs.curve_advice import diagnosis, first_words, last_words
from minigpt.logs.curve_series import CEILING_MARGIN, NO_BASELINE_CEILING, Curve, blocks, logged_lr_at, median
from minigpt.logs.curve_trend import TAIL


def _fmt_steps(steps: list[int], limit: int = 5) -> str:
    shown = ", ".join(str(s) for s in steps[:limit])
    return shown + (f" and {len(steps) - limit} more" if len(steps) > limit else "")


def rule_nonfinite(c: Curve) -> CurveDiagnosis | None:
    train_vals = [p.train_loss for p in c.points if p.train_loss is not None]
    train_vals += [p.val_loss for p in c.points if p.val_loss is not None]
    last = c.points[-1] if c.points else None
    if math.isfinite(sum(train_vals)) and (last is None or last.grad_norm is None or math.isfinite(last.grad_norm)):
        return None  # the common case, tested in C; the loop below finds the first bad line
    for i, p in enumerate(c.points):
        bad = [
            name
            for name in ("train_loss", "val_loss")
            if getattr(p, name) is not None and not math.isfinite(getattr(p, name))
        ]
        if not bad and i == len(c.points) - 1 and p.grad_norm is not None and not math.isfinite(p.grad_norm):
            bad = ["grad_norm"]
        if bad:
            lr = logged_lr_at(c.points, p.step)
            c.values.update(first_nonfinite_step=p.step, nonfinite_what=bad[0], lr_at_instability=lr)
            value = getattr(p, bad[0])
            lr_text = f" (learning rate {lr:.3g})" if lr is not None else ""
            loss = f"; train loss {fmt_loss(p.train_loss)} there" if bad[0] == "grad_norm" and p.train_loss else ""
            d = diagnosis(
                "diverged", f"diverged: {bad[0].replace('_', ' ')} became {value} at step {p.step}{lr_text}{loss}", c
            )
            return _blame_raise(d, c, p.step)
    return None


def _first_raw_above(c: Curve, i: int, level: float) -> int:
    """The first logged point above `level` in the window the smoothed value at `i` covers: a
    running median of 3 can cross at the point before the jump (4.8 at step 0, 50 at step 10 gives
    a smoothed 27 at step 0), and the verdict must quote the step the loss itself got there."""
    n = len(c.ys)
    return next((j for j in range(max(0, i - 1), min(n, i + 2)) if c.ys[j] > level), i)


def unstable_reason(c: Curve) -> tuple[str, str, int] | None:
    """(reason, words, index where it went wrong), or None when the loss never went the wrong way."""
    ys, sm, steps, n = c.ys, c.smooth, c.steps, len(c.ys)
    guess = (
        f"the uniform guess (log V {c.baseline:.3f} + {CEILING_MARGIN})"
        if c.baseline is not None
        else f"{NO_BASELINE_CEILING:g} nats (no real vocabulary starts that high)"
    )
    peak = max(range(n), key=ys.__getitem__)
    if c.end > c.ceiling:
        first_up = next(i for i in range(n) if ys[i] > c.ceiling)  # the end is above: some point is
        return (
            "above_ceiling",
            f"ended above {guess}; first above it at step {steps[first_up]}, "
            f"peak {fmt_loss(ys[peak])} at step {steps[peak]}",
            first_up,
        )
    far = max(FAR_RATIO * c.baseline, c.ceiling) if c.baseline is not None else NO_BASELINE_CEILING
    first_far = next((i for i in range(n) if sm[i] > far), None)
    if first_far is not None:
        first_far = _first_raw_above(c, first_far, far)
        return (
            "far_above_guess",
            f"went above {fmt_loss(far)} (far worse than a uniform guess) at step {steps[first_far]}; "
            f"peak {fmt_loss(ys[peak])} at step {steps[peak]}",
            first_far,
        )
    low = sm[0]
    for i in range(1, n):
        low = min(low, sm[i - 1])
        if i not in c.excused and sm[i] > c.ceiling and sm[i] > low + max(RISE_ABS, RISE_REL * abs(low)):
            i = _first_raw_above(c, i, c.ceiling)
            top = max(range(i, n), key=ys.__getitem__)
            return (
                "rose_above_ceiling",
                f"rose from {fmt_loss(low)} above {guess} at step {steps[i]} "
                f"(peak {fmt_loss(ys[top])} at step {steps[top]})",
                i,
            )
    if c.end > c.start + max(RISE_ABS, RISE_REL * abs(c.start)):
        return "ended_above_start", "ended above where it started", n - 1
    fall, se = c.train_trend
    if -fall > RISING_REL and -fall > RISING_SE * se:
        return "rising", f"is still rising at the end ({100 * -fall:+.1f}% over the last {TAIL:.0%})", n - 1
    limit = c.start + max(SURGE_ABS, SURGE_REL * abs(c.start))
    best, run_from = (0, 0), None  # the longest run of consecutive points above the limit: [from, to)
    for i in range(n + 1):
        up = i < n and sm[i] > limit and i not in c.excused
        if up and run_from is None:
            run_from = i
        elif not up and run_from is not None:
            best, run_from = max(best, (run_from, i), key=lambda r: r[1] - r[0]), None
    if best[1] - best[0] >= max(3, n // 10):
        top = max(range(*best), key=ys.__getitem__)
        return (
            "surge",
            f"rose to {fmt_loss(ys[top])} at step {steps[top]} and stayed above {fmt_loss(limit)} "
            f"from step {steps[best[0]]} to {steps[best[1] - 1]}",
            best[0],
        )
    return None


def rule_unstable(c: Curve) -> CurveDiagnosis | None:
    found = unstable_reason(c)
    if found is None:
        return None
    reason, words, index = found
    lr = logged_lr_at(c.points, c.steps[index])
    c.values.update(unstable_reason=reason, lr_at_instability=lr)
    d = diagnosis("unstable", f"unstable: train loss {words}; {first_words(c)}, {last_words(c)}", c)
    peak_lr = c.values["peak_lr"]
    if peak_lr:
        d.fixes[0] = f"lower the learning rate 3-10x (peak {peak_lr:.3g}: try {peak_lr / 10:.2g} to {peak_lr / 3:.2g})"
    return _blame_raise(d, c, c.steps[index])


def _blame_raise(d: CurveDiagnosis, c: Curve, bad_step: int) -> CurveDiagnosis:
    """It went wrong at or after a jump up of the LR (a resume with a higher --lr): that jump is
    the first suspect, named with the rate the run had before it."""
    raised = [(i, before, after) for i, before, after in c.raises if c.steps[i] <= bad_step]
    if raised:
        i, before, after = raised[-1]
        d.causes.insert(
            0,
            f"the learning rate was raised from {before:.3g} to {after:.3g} at step {c.steps[i]} (a resume with --lr?)",
        )
        d.fixes.insert(
            0, f"resume from the checkpoint before step {c.steps[i]} with the learning rate it had ({before:.3g})"
        )
    return d


def _spike_indices(ys: list[float]) -> list[int]:
    """Indices more than max(SPIKE_MIN_JUMP, SPIKE_MADS * scale) above the previous block's median,
    scale = the median of the MADs of the blocks before (one 50-point MAD is too noisy alone)."""
    bounds = blocks(len(ys), max(SPIKE_MIN_BLOCK, min(50, len(ys) // 10)))
    meds = [median(ys[a:z]) for a, z in bounds]
    mads: dict[int, float] = {}

    def mad(b: int) -> float:
        if b not in mads:
            a, z = bounds[b]
            mads[b] = median([abs(y - meds[b]) for y in ys[a:z]])
        return mads[b]

    out: list[int] = []
    for b in range(1, len(bounds)):
        a, z = bounds[b]
        if max(ys[a:z]) <= meds[b - 1] + SPIKE_MIN_JUMP:
            continue  # the common case: no MAD needed
        scale = median([mad(k) for k in range(max(0, b - SPIKE_SCALE_BLOCKS), b)])
        limit = meds[b - 1] + max(SPIKE_MIN_JUMP, SPIKE_MADS * scale)
        out.extend(i for i in range(a, z) if ys[i] > limit)
    return out


def rule_spikes(c: Curve) -> CurveDiagnosis | None:
    kept = [i for i in range(len(c.ys)) if i not in c.excused]
    spike_idx = [kept[j] for j in _spike_indices([c.ys[i] for i in kept])]
    if not spike_idx:
        return None
    clusters: list[list[int]] = [[spike_idx[0]]]
    for i in spike_idx[1:]:
        (clusters[-1].append(i) if i == clusters[-1][-1] + 1 else clusters.append([i]))
    spike_steps = [c.steps[max(cl, key=c.ys.__getitem__)] for cl in clusters]
    lr = logged_lr_at(c.points, spike_steps[0])
    c.values.update(spike_steps=spike_steps, lr_at_instability=lr)
    lr_text = f"; learning rate {lr:.3g} at the first" if lr is not None else ""
    top = max(spike_idx, key=c.ys.__getitem__)
    d = diagnosis(
        "spikes",
        f"spikes: {len(spike_steps)} loss spike(s) at step(s) {_fmt_steps(spike_steps)} "
        f"(highest {fmt_loss(c.ys[top])}){lr_text}; {last_words(c)}",
        c,
    )
    return _blame_raise(d, c, spike_steps[0])
