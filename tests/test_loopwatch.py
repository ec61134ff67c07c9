"""minigpt.watch itself: it never changes or breaks the user's run, and it writes the run folder in
the trainer's formats."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import minigpt
from minigpt.io.workspace import Workspace
from minigpt.logs.metrics import read_metrics
from minigpt.logs.record import json_line
from minigpt.loopwatch import loop_log, loss_weights, probes, runlog
from minigpt.loopwatch.loop_log import STEP_DEFAULTS, read_loop_log
from minigpt.loopwatch.steps import Forward, LightStep, Window, short_line, step_record
from tests.fixtures import loops

ROOT = Path(__file__).resolve().parents[1]


def plain_loop(run_dir, *, steps=12, watched=True, **watch_options):
    """A small loop with dropout, accumulation and clipping; returns the final parameters."""
    torch.manual_seed(0)
    data, vocab = loops.demo_ids()
    model = loops.small_model(vocab, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    watch = minigpt.watch(model, opt, workspace=run_dir, **watch_options) if watched else None
    for _ in range(steps):
        for _ in range(2):
            ix = torch.randint(len(data) - 33, (8,))
            x = torch.stack([data[i : i + 32] for i in ix])
            y = torch.stack([data[i + 1 : i + 33] for i in ix])
            _, loss = model(x, y)
            (loss / 2).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
    if watch is not None:
        watch.close()
    return [p.detach().clone() for p in model.parameters()], watch


def test_watching_does_not_change_a_single_weight(tmp_path):
    # the watch reads but never writes: same RNG streams, same gradients, same updates
    watched, _ = plain_loop(tmp_path / "a", watched=True)
    unwatched, _ = plain_loop(tmp_path / "b", watched=False)
    assert all(torch.equal(a, b) for a, b in zip(watched, unwatched))


def test_an_error_inside_the_watch_is_reported_once_and_training_goes_on(tmp_path, monkeypatch, capsys):
    def broken(grad, rows):
        raise RuntimeError("probe exploded")

    monkeypatch.setattr(probes, "loss_weight_batch", broken)
    params, watch = plain_loop(tmp_path / "run", steps=6)
    unwatched, _ = plain_loop(tmp_path / "b", steps=6, watched=False)
    assert all(torch.equal(a, b) for a, b in zip(params, unwatched))  # the run finished, untouched
    err = capsys.readouterr().err
    assert err.count("minigpt.watch turned itself off") == 1
    assert "probe exploded" in err and "your training goes on" in err
    assert not watch.active
    log = read_loop_log(Workspace(tmp_path / "run"))
    assert log is not None and "probe exploded" in log.errors[0]["message"]


@pytest.mark.slow
def test_a_full_disk_turns_the_watch_off_and_training_goes_on(tmpfs, capsys):
    run = tmpfs("size=24k") / "run"
    params, watch = plain_loop(run, steps=30, interval=1)  # a line per step: the disk fills mid-run
    unwatched, _ = plain_loop(run.parent / "unused", steps=30, watched=False)
    assert all(torch.equal(a, b) for a, b in zip(params, unwatched))
    err = capsys.readouterr().err
    assert err.count("minigpt.watch turned itself off") == 1
    assert "No space left" in err or "Disk full" in err
    assert not watch.active


def test_a_run_folder_that_cannot_be_made_is_reported_and_training_goes_on(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("a file where the run folder should go")
    params, watch = plain_loop(blocker / "run", steps=3)
    assert not watch.active
    err = capsys.readouterr().err
    assert err.count("minigpt.watch turned itself off") == 1 and "starting" in err


def test_a_run_folder_in_use_is_refused_naming_the_holder(tmp_path, capsys):
    from minigpt.io import lock

    with lock.acquire(tmp_path / "run", command="train"):
        _, watch = plain_loop(tmp_path / "run", steps=2)
    assert not watch.active
    assert "is in use" in capsys.readouterr().err


def test_run_folder_formats_are_the_trainers(tmp_path):
    plain_loop(tmp_path / "run", steps=12, interval=10, grads_every=10)
    ws = Workspace(tmp_path / "run")
    log = read_metrics(ws.metrics)
    assert [p.step for p in log.points] == list(range(1, 13))
    assert all(p.train_loss is not None and p.lr == pytest.approx(1e-3) for p in log.points)
    lines = [json.loads(line) for line in ws.metrics.read_text().splitlines()]
    assert {line["loss_source"] for line in lines} == {"model"}
    deep = [line for line in lines if "grad_norm" in line]
    assert [line["step"] for line in deep] == [1, 2, 3, 10]
    assert all(line["grad_norm"] >= line["grad_norm_after_clip"] for line in deep)
    grads = [json.loads(line) for line in ws.grads.read_text().splitlines()]
    assert [g["step"] for g in grads] == [1, 10]
    row = grads[-1]["rows"][0]
    assert {"name", "shape", "numel", "grad_norm", "weight_norm", "update_ratio", "flags"} <= set(row)
    assert row["update_ratio"] > 0
    loop = read_loop_log(ws)
    assert loop is not None and loop.closed is not None and loop.header["pid"] == os.getpid()


def test_a_second_run_moves_the_first_runs_logs_to_previous(tmp_path):
    plain_loop(tmp_path / "run", steps=3)
    plain_loop(tmp_path / "run", steps=4)
    previous = list((tmp_path / "run" / "previous").iterdir())
    assert len(previous) == 1 and (previous[0] / "logs" / "loop.jsonl").is_file()
    assert read_loop_log(Workspace(tmp_path / "run")).last_step == 4


@pytest.mark.slow
def test_the_watch_closes_itself_at_interpreter_exit(tmp_path):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import sys, torch
            sys.path.insert(0, {str(ROOT)!r})
            import minigpt
            model = torch.nn.Sequential(torch.nn.Embedding(10, 8), torch.nn.Linear(8, 10))
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            watch = minigpt.watch(model, opt, workspace={str(tmp_path / "run")!r})
            for _ in range(5):
                x = torch.randint(0, 10, (4, 6))
                loss = torch.nn.functional.cross_entropy(model(x).view(-1, 10), x.view(-1))
                loss.backward(); opt.step(); opt.zero_grad()
            """
        )
    )
    subprocess.run([sys.executable, str(script)], check=True)
    log = read_loop_log(Workspace(tmp_path / "run"))
    assert log is not None and log.closed is not None and log.last_step == 5
    assert log.writer().startswith("train.py (PID")


def test_model_outputs_are_read_in_every_usual_form():
    logits, loss = torch.randn(2, 3, 5), torch.tensor(1.5)

    class Out:
        pass

    obj = Out()
    obj.logits, obj.loss = logits, loss
    for output in [(logits, loss), [logits, loss], {"logits": logits, "loss": loss}, obj]:
        got_logits, got_loss = probes.model_outputs(output)
        assert got_logits is logits and got_loss is loss
    assert probes.model_outputs(logits) == (logits, None)
    assert probes.model_outputs("text") == (None, None)
    assert probes.model_outputs((loss, logits)) == (logits, loss)  # the order does not matter
    assert probes.model_outputs((logits, None)) == (logits, None)


def test_steps_between_full_readings_are_written_from_what_their_hooks_noted(tmp_path):
    # GIVEN a loop of 2 micro-batches a step, with an evaluation forward before step 6, read in full every 5 steps
    torch.manual_seed(0)
    data, vocab = loops.demo_ids()
    model = loops.small_model(vocab, dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / 10)
    watch = minigpt.watch(model, opt, workspace=tmp_path / "run", interval=5)
    losses: dict[int, list[float]] = {}
    for step in range(1, 11):
        if step == 6:
            model.eval()
            with torch.no_grad():
                model(data[None, :32], data[None, 1:33])
            model.train()
        for _ in range(2):
            ix = torch.randint(len(data) - 33, (8,))
            _, loss = model(
                torch.stack([data[i : i + 32] for i in ix]), torch.stack([data[i + 1 : i + 33] for i in ix])
            )
            losses.setdefault(step, []).append(loss.item())
            (loss / 2).backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
    watch.close()
    # WHEN the loop log is read back
    steps = {s["step"]: s for s in read_loop_log(Workspace(tmp_path / "run")).steps}
    # THEN a step between full readings has its counts, modes, tokens, LR and mean loss, and no full reading
    light = steps[6]
    assert light["deep"] is False
    assert (light["backwards"], light["train_forwards"], light["eval_forwards"]) == (2, 2, 1)
    assert (light["eval_in_train_mode"], light["eval_with_grad"], light["train_in_eval_mode"]) == (0, 0, 0)
    assert light["tokens"] == 2 * 8 * 32 and light["grads_at_step"] == "present"
    assert light["lrs"] == [pytest.approx(1e-3 * 6 / 10)]
    assert light["loss"] == pytest.approx(sum(losses[6]) / 2)
    assert light["cleared_before"] is None and "old_graphs_alive" not in light and "loss_weight" not in light
    # and the full readings around it keep theirs
    for deep in (steps[5], steps[10]):
        assert deep["deep"] is True and deep["cleared_before"] is True and deep["old_graphs_alive"] == 0
        assert deep["loss"] == pytest.approx(sum(losses[deep["step"]]) / 2)
        assert deep["loss_weight"] == pytest.approx(1.0, rel=0.05)
    assert [s["step"] for s in steps.values() if s["deep"]] == [1, 2, 3, 5, 10]


def test_buffered_steps_reach_the_disk_a_second_after_the_last_write_and_at_close(tmp_path, monkeypatch):
    # GIVEN a watched loop read in full every 5 steps, whose writes are at least an hour apart
    from minigpt.loopwatch import watch as watch_module

    monkeypatch.setattr(watch_module, "FLUSH_SECONDS", 3600.0)
    torch.manual_seed(0)
    data, vocab = loops.demo_ids()
    model = loops.small_model(vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    watch = minigpt.watch(model, opt, workspace=tmp_path / "run", interval=5)
    ws = Workspace(tmp_path / "run")

    def train(steps):
        for _ in range(steps):
            ix = torch.randint(len(data) - 33, (4,))
            _, loss = model(
                torch.stack([data[i : i + 32] for i in ix]), torch.stack([data[i + 1 : i + 33] for i in ix])
            )
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

    def on_disk():
        return [s["step"] for s in read_loop_log(ws).steps], [p.step for p in read_metrics(ws.metrics).points]

    # WHEN it runs 12 steps: THEN the first three full readings are written at once, the rest waits
    train(12)
    assert on_disk() == ([1, 2, 3], [1, 2, 3])
    # WHEN a second has passed at the next full reading (here: no wait at all): THEN everything buffered is written
    monkeypatch.setattr(watch_module, "FLUSH_SECONDS", 0.0)
    train(3)
    assert on_disk() == (list(range(1, 16)), list(range(1, 16)))
    # and close() writes what came after
    monkeypatch.setattr(watch_module, "FLUSH_SECONDS", 3600.0)
    train(2)
    watch.close()
    assert on_disk() == (list(range(1, 18)), list(range(1, 18)))


@pytest.mark.parametrize(
    "forwards, closure, present",
    [
        ([(True, True, "bfloat16", True)], False, 1),  # (training, grad enabled, autocast, backwarded)
        ([(True, True, None, True)], False, 1),  # the usual step
        ([(True, True, None, True)], True, 1),
        ([(False, True, None, True)], False, 1),  # one forward, trained in eval mode
        ([(True, True, None, True), (False, False, None, False), (True, True, None, False)], False, 1),
        ([(False, True, None, True), (True, True, "float16", True)], True, 0),
        ([], False, 0),
    ],
)
def test_a_short_step_line_reads_back_as_the_full_line_it_stands_for(forwards, closure, present):
    # GIVEN a step between full readings as its hooks noted it: train and eval forwards, modes off their defaults or not
    window = Window(deep=False)
    for training, grad_enabled, autocast, backwarded in forwards:
        window.forwards.append(Forward(training, grad_enabled, autocast, tokens=256, backwarded=backwarded))
    window.backwards, window.closure = sum(f[3] for f in forwards), closure
    step = LightStep(7, 1.0, 0.01, window, [1e-3, None], present)
    losses = [2.0, 3.0] if window.backwards else None
    # WHEN the flush writes its short line and the reader puts the defaults back
    short = short_line(step, losses)
    read_back = {**STEP_DEFAULTS, "fingerprints": [], **json.loads(json.dumps(short))}
    # THEN it is the line the full path writes, field for field
    full = {**step_record(window, 7, 1.0, 0.01, [1e-3, None], present), "loss": losses}
    assert read_back == runlog.loop_record(full)
    assert len(short) < len(runlog.loop_record(full))


@pytest.mark.parametrize(
    "loss, lrs, factor, seconds",
    [
        (2.5, [1e-3], 1.0, 0.01),
        (2.123456789012345, [3.0000000000000004e-05], 0.25, 0.004),  # a pre-divided loss: the factor names it
        (float("nan"), [1e-3], 1.0, 0.01),  # not finite: the general path writes "nan"
        (2.5, [1e-3, 2e-3], 1.0, 0.01),  # two groups: `lrs` too
        (2.5, [None], 1.0, 0.01),  # an LR that is not a float
        (None, [1e-3], 1.0, 0.01),  # logits only: no loss of its own
        (2.5, [1e-3], 1.0, 0.0),  # no time measured: no tokens/s
    ],
)
def test_a_short_steps_metrics_line_is_the_line_the_general_path_writes(loss, lrs, factor, seconds):
    step = {"step": 41, "lrs": lrs, "tokens": 256, "seconds": seconds}
    if loss is not None:
        step["loss"] = loss
    record = {"step": 41, "time": 1796377129.0319278, "seconds": seconds}
    general = json_line(runlog.metrics_record(step, record, False, 1796377000.25, factor))
    fast = runlog.short_metrics_line(step, record["time"], 1796377000.25, factor)
    assert fast is None or fast == general
    usual = loss is not None and loss == loss and len(lrs) == 1 and lrs[0] is not None and seconds
    assert (fast is not None) == bool(usual)  # the template takes the usual lines, and only those


def test_steps_between_full_readings_share_one_line_that_reads_back_step_by_step():
    # GIVEN short lines of five steps between full readings: the LR changes, one step has an
    # evaluation forward, one has no loss, one ran in eval mode
    def short(step, lr, loss=2.0, **extra):
        line = {
            "kind": "step",
            "step": step,
            "backwards": 1,
            "micro_batches": 1,
            "train_forwards": 1,
            "lrs": [lr, None],
        }
        line.update({"tokens": 256, "seconds": 0.01 * step, "grads_at_step": "present", **extra})
        return line if loss is None else {**line, "loss": loss + step}

    lines = [short(4, 1e-3), short(5, 2e-3, eval_forwards=1), short(6, 3e-3, loss=None), short(7, 4e-3)]
    lines.append(short(8, 5e-3, train_in_eval_mode=1, autocast="bfloat16"))
    # WHEN they are written as one line and read back
    one = json.loads(json.dumps(loop_log.steps_line(lines)))
    read_back = loop_log.expand_steps(one)
    # THEN each step is its own line again, defaults put back
    assert read_back == [{**STEP_DEFAULTS, "fingerprints": [], **line} for line in lines]
    assert one["same"]["backwards"] == 1 and len(one["each"]["lrs"]) == 5  # said once / as a column
    # and a line whose columns disagree in length is refused, not half-read
    one["each"]["seconds"].pop()
    assert loop_log.expand_steps(one) is None


def test_a_watched_run_writes_one_loop_line_per_stretch_between_full_readings(tmp_path):
    plain_loop(tmp_path / "run", steps=45, interval=20)
    ws = Workspace(tmp_path / "run")
    kinds = [json.loads(line)["kind"] for line in ws.loop_log.read_text().splitlines()]
    # header, full readings 1-3, steps 4-19 in one line, 20, 21-39, 40, 41-45, closed
    assert kinds == ["header"] + ["step"] * 3 + ["steps", "step", "steps", "step", "steps", "closed"]
    log = read_loop_log(ws)
    assert [s["step"] for s in log.steps] == list(range(1, 46)) and log.bad_lines == 0
    assert all(s["backwards"] == 2 and s["train_forwards"] == 2 for s in log.steps)


def test_loss_weight_reads_the_division_of_a_cross_entropy():
    torch.manual_seed(0)
    logits = torch.randn(4, 16, 11, requires_grad=True)
    targets = torch.randint(0, 11, (4, 16))
    rows = probes.sampled_rows(logits)
    for scale, expected in [(1.0, 1.0), (0.25, 0.25), (3.0, 3.0)]:
        logits.grad = None
        (F.cross_entropy(logits.view(-1, 11), targets.view(-1)) * scale).backward()
        weight, misfit, loss, share, loss_se = probes.loss_weight(logits.grad, rows)
        assert weight == pytest.approx(expected, rel=1e-4) and misfit < 1e-4 and share == 1.0
        per_row = F.cross_entropy(logits.view(-1, 11), targets.view(-1), reduction="none")
        assert loss == pytest.approx(per_row.mean().item(), rel=1e-4)
        # the sampled loss's standard error: the rows' spread over the square root of their number
        assert loss_se == pytest.approx(per_row.std(unbiased=False).item() / 64**0.5, rel=1e-3)
    logits.grad = None
    (F.cross_entropy(logits.view(-1, 11), targets.view(-1), reduction="sum")).backward()
    assert probes.loss_weight(logits.grad, rows)[0] == pytest.approx(64, rel=1e-4)  # the token count
    logits.grad = None
    ignored = targets.clone()
    ignored[:, 8:] = -1  # half the positions ignored (padding): the weight is still one mean, over the rest
    F.cross_entropy(logits.view(-1, 11), ignored.view(-1), ignore_index=-1).backward()
    weight, misfit, _, share, _ = probes.loss_weight(logits.grad, rows)
    assert weight == pytest.approx(1.0, rel=1e-4) and misfit < 1e-4 and share == 0.5
    logits.grad = None
    ((logits.softmax(-1) - 0.1) ** 2).mean().backward()  # not a cross-entropy
    assert probes.loss_weight(logits.grad, rows)[1] > 0.25


@pytest.mark.slow
def test_loss_weights_left_to_the_flush_equal_those_computed_in_the_backward(tmp_path, monkeypatch):
    # the flush computes a second's loss weights in one batch; past DEFER_BYTES the backward does
    plain_loop(tmp_path / "later", steps=25, interval=5)
    monkeypatch.setattr(loss_weights, "DEFER_BYTES", 0)
    plain_loop(tmp_path / "now", steps=25, interval=5)
    later, now = (read_loop_log(Workspace(tmp_path / name)) for name in ("later", "now"))
    assert later is not None and now is not None
    keys = ("loss_weight", "loss_weight_misfit", "loss_from_logits")
    read = [[[s.get(k) for k in keys] for s in log.steps if s["deep"]] for log in (later, now)]
    # steps 1-3, 5, ..., 25; two micro-batches of loss / 2 each: one mean in all
    assert len(read[0]) == 8 and all(w[0] == pytest.approx(1.0, rel=1e-3) for w in read[0])
    assert all(a == pytest.approx(b, rel=1e-5, abs=1e-6) for a, b in zip(read[0], read[1], strict=True))


def test_target_relation_counts_pool_over_micro_batches_of_any_size():
    torch.manual_seed(0)
    ids = torch.randint(0, 50, (4, 17))
    shifted = torch.cat([ids[:, 1:], torch.randint(0, 50, (4, 1))], dim=1)  # y = x moved left by one
    counts, totals = [], []
    for x, y in [(ids, shifted), (ids[:1], ids[:1].clone())]:  # a healthy batch, then one of targets = inputs
        c, n = probes.target_relation(x, y)
        counts.append(c.tolist()), totals.append(n)
    assert totals == [[68, 64], [17, 16]]
    equal, shift = runlog.relation_shares(counts, totals)
    own_equal = int((ids == shifted).sum()) + 17
    own_shift = 64 + int((ids[:1, 1:] == ids[:1, :-1]).sum())
    assert equal == pytest.approx(own_equal / 85) and shift == pytest.approx(own_shift / 80)
    assert probes.target_relation(ids, ids[:, :5]) is None  # shapes that do not match: nothing to say


@pytest.mark.slow
def test_a_healthy_runs_loss_is_never_scaled_by_the_sampling_noise_of_the_logits_reading(tmp_path):
    # GIVEN a plain loop (no accumulation) trained until its per-token losses spread out: the
    # cross-entropy read on 128 of its 256 rows is then several per cent off the batch's mean
    torch.manual_seed(0)
    data, vocab = loops.demo_ids()
    model = loops.small_model(vocab, dropout=0.0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    with minigpt.watch(model, opt, workspace=tmp_path / "run", interval=5):
        for _ in range(800):
            ix = torch.randint(len(data) - 33, (8,))
            x = torch.stack([data[i : i + 32] for i in ix])
            y = torch.stack([data[i + 1 : i + 33] for i in ix])
            _, loss = model(x, y)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
    # THEN every metrics line gives the model's own loss as it is (a 5 % rule scaled 14 of 163 readings)
    lines = [json.loads(line) for line in Workspace(tmp_path / "run").metrics.read_text().splitlines()]
    assert len(lines) == 800 and {line["loss_source"] for line in lines} == {"model"}


@pytest.mark.parametrize(
    "model, at_logits, se, weight, expected",
    [
        (2.0, 2.2, 0.08, 1.0, 1.0),  # 2.5 standard errors off: noise, the model's loss as it is
        (2.0, 2.2, 0.01, 1.0, 1.1),  # 20 of them: a factor, the ratio read
        (1.1, 2.3, 0.05, 1.0, 2.0),  # the model divided by 2 (each backward carries half a mean), the loop not
        (1.0, 2.0, 0.01, 0.5, 2.0),  # the loop divided too (a quarter a backward does not explain 2): the ratio
    ],
)
def test_loss_factor_reads_a_pre_divided_loss_and_not_noise(model, at_logits, se, weight, expected):
    reading = {"loss": model, "loss_from_logits": at_logits, "loss_from_logits_se": se, "loss_weight_misfit": 0.0}
    reading.update(loss_weight=weight, micro_batches=2)
    assert runlog.loss_factor(reading, previous=0.7) == pytest.approx(expected, rel=1e-9)
    assert runlog.loss_factor({**reading, "loss_weight_misfit": 0.9}, previous=0.7) == 0.7  # not a cross-entropy


def test_watch_refuses_what_is_not_a_model_or_an_optimizer(tmp_path):
    model = torch.nn.Linear(2, 2)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        minigpt.watch("model", torch.optim.SGD(model.parameters(), lr=1), workspace=tmp_path)
    with pytest.raises(TypeError, match="torch.optim.Optimizer"):
        minigpt.watch(model, object(), workspace=tmp_path)
