"""Loop checks on real loops: each classic loop bug fails its own check (and no other loop check),
and healthy loops written the usual ways run clean."""

from __future__ import annotations

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, run_checks
from minigpt.checks.registry import catalog
from minigpt.io.workspace import Workspace
from tests.fixtures import loops

LOOP_IDS = [cid for cid, info in catalog().items() if info.stage == "loop"]

# each bug -> (the check that must name it, words its summary or causes must contain)
EXPECTED = {
    "never_zero_grad": ("loop_grads_cleared", "not cleared"),
    "zero_grad_before_step": ("loop_grads_reach_step", "between backward() and step()"),
    "accum_not_divided": ("loop_accumulation", "not divided by the 2"),
    "no_train_after_eval": ("loop_train_mode", "model.train() missing"),
    "no_eval_for_eval": ("loop_eval_mode", "model.eval() missing"),
    "eval_with_grad": ("loop_eval_no_grad", "torch.no_grad()"),
    "lr_zero": ("loop_lr_positive", "learning rate is 0"),
    "scheduler_never_stepped": ("loop_scheduler", "never moved"),
    "warmup_too_long": ("loop_warmup_ends", "still rising at the last step"),
    "same_batch": ("loop_batches_change", "same batch on every step"),
    "targets_equal_inputs": ("loop_targets_shifted", "the targets equal the inputs"),
    "optimizer_misses_params": ("loop_optimizer_covers", "in no optimizer group"),
    "decay_on_norms": ("loop_weight_decay", "1-D parameter"),
    "clip_always": ("loop_clipping", "clipping fired"),
    "graph_kept_alive": ("loop_memory", "still alive"),
}
WARN_ONLY = {"decay_on_norms"}  # a choice, not a bug


def loop_report(run_dir):
    return run_checks(CheckContext(CheckOptions(workspace=run_dir, device="cpu")), only=LOOP_IDS)


def not_clean(report) -> dict[str, str]:
    return {
        r.id: f"{r.status.value}: {r.summary}"
        for r in report.results
        if r.status in (Status.FAIL, Status.WARN, Status.ERROR)
    }


def test_every_bug_has_an_expectation():
    assert set(EXPECTED) == set(loops.BUGS)
    assert {check for check, _ in EXPECTED.values()} <= set(LOOP_IDS)


FAST_BUGS = {"accum_not_divided", "zero_grad_before_step", "no_train_after_eval"}  # the rest: slow tier


@pytest.mark.parametrize("bug", [b if b in FAST_BUGS else pytest.param(b, marks=pytest.mark.slow) for b in loops.BUGS])
def test_loop_bug_fails_its_check_and_no_other(tmp_path, bug):
    # GIVEN a nanoGPT-style loop with one bug, watched for 50 optimizer steps
    # clipping is judged on full readings after step 3: at the default interval (20) a 50-step run has
    # two, so that bug's loop reads every 10 steps (it is not one of the step-level bugs named by step 50)
    loops.nanogpt_loop(tmp_path / "run", bug=bug, max_iters=50, **({"interval": 10} if bug == "clip_always" else {}))
    # WHEN the loop checks read its run folder
    report = loop_report(tmp_path / "run")
    # THEN the bug's check fails (warns, for a choice) naming the cause, and no other loop check complains
    check_id, words = EXPECTED[bug]
    result = report.by_id()[check_id]
    assert result.status is (Status.WARN if bug in WARN_ONLY else Status.FAIL), result.summary
    text = " ".join([result.summary, *result.causes, *result.fixes])
    assert words in text, text
    others = {cid: s for cid, s in not_clean(report).items() if cid != check_id}
    assert not others, others
    if "first_step" in result.values:
        assert result.values["first_step"] <= 50


def test_healthy_nanogpt_loop_is_clean(tmp_path):
    loops.nanogpt_loop(tmp_path / "run", max_iters=50)
    report = loop_report(tmp_path / "run")
    assert not not_clean(report)
    accumulation = report.by_id()["loop_accumulation"]
    assert accumulation.values["micro_batches"] == 2
    assert accumulation.values["loss_weight"] == pytest.approx(1.0, abs=0.05)


def test_healthy_hf_style_loop_with_lambdalr_and_zero_grad_to_zeros_is_clean(tmp_path):
    loops.hf_style_loop(tmp_path / "run")
    report = loop_report(tmp_path / "run")
    assert not not_clean(report)
    assert "shifts them inside" in report.by_id()["loop_targets_shifted"].summary
    assert "changes over the run" in report.by_id()["loop_scheduler"].summary


def test_hf_labels_shifted_twice_fail_the_targets_check(tmp_path):
    loops.hf_style_loop(tmp_path / "run", bug="labels_shifted", steps=20)
    result = loop_report(tmp_path / "run").by_id()["loop_targets_shifted"]
    assert result.status is Status.FAIL
    assert "labels=input_ids" in " ".join(result.fixes)


@pytest.mark.parametrize("autocast", [False, True], ids=["float32", "bfloat16"])
def test_healthy_logits_only_loop_is_clean(tmp_path, autocast):
    loops.logits_only_loop(tmp_path / "run", autocast=autocast)
    report = loop_report(tmp_path / "run")
    assert not not_clean(report)
    assert report.by_id()["loop_targets_shifted"].status is Status.SKIP  # the loop computes the loss
    assert report.by_id()["loop_accumulation"].values["loss_weight"] == pytest.approx(1.0, abs=0.1)


def test_closure_loop_is_read_and_clean(tmp_path):
    loops.closure_loop(tmp_path / "run")
    report = loop_report(tmp_path / "run")
    assert not not_clean(report)
    assert report.by_id()["loop_grads_reach_step"].status is Status.PASS


def test_loop_checks_skip_without_a_watched_run(tiny_workspace):
    report = loop_report(tiny_workspace.root)
    for r in report.results:
        assert r.status is Status.SKIP
        assert "minigpt.watch" in r.summary


def test_a_watched_folder_with_a_tokenizer_but_no_token_ids_skips_the_data_checks(tmp_path, tiny_workspace):
    # GIVEN a healthy watched loop's folder with a tokenizer copied in beside its logs (no prepared IDs)
    run = tmp_path / "run"
    loops.nanogpt_loop(run, max_iters=20)
    ws = Workspace(run)
    ws.tokenizer.parent.mkdir(parents=True, exist_ok=True)
    ws.tokenizer.write_bytes(tiny_workspace.tokenizer.read_bytes())
    # WHEN every check runs THEN files skips naming what is absent, and nothing fails
    report = run_checks(CheckContext(CheckOptions(workspace=run, device="cpu")))
    files = report.by_id()["files"]
    assert files.status is Status.SKIP and "no train ids here" in files.summary, files.summary
    assert not {k: v for k, v in not_clean(report).items() if not k.startswith("loop_")}
    # AND an empty token-ID file is still a fault, watched folder or not
    ws.ids("train").parent.mkdir(parents=True, exist_ok=True)
    ws.ids("train").write_bytes(b"")
    files = run_checks(CheckContext(CheckOptions(workspace=run, device="cpu")), only=["files"]).by_id()["files"]
    assert files.status is Status.FAIL and "too small: train_ids" in files.summary, files.summary


def _torchrun_loop(run_dir, *extra):
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    cmd += [str(root / "tests" / "fixtures" / "ddp_loop.py"), str(run_dir), *extra]
    done = subprocess.run(
        cmd, cwd=root, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["per_rank_seeds", "same_seed", "same_seed_eval"])
def test_ddp_ranks_reading_the_same_data_fail_and_per_rank_seeds_pass(tmp_path, mode):
    # GIVEN a DDP loop under torchrun with 2 gloo ranks, watched on both (rank 1 writes logs/ranks/);
    # same_seed_eval: seeded alike, rank 0 alone evaluates from the same generator and runs ahead
    _torchrun_loop(tmp_path / "run", mode)
    report = loop_report(tmp_path / "run")
    ranks = report.by_id()["loop_ranks_differ"]
    others = {cid: s for cid, s in not_clean(report).items() if cid != "loop_ranks_differ"}
    assert not others, others
    if mode != "per_rank_seeds":
        assert ranks.status is Status.FAIL and "same batches as rank 0" in ranks.summary, ranks.summary
    else:
        assert ranks.status is Status.PASS, ranks.summary


def test_a_watched_module_that_never_ran_forward_skips_the_forward_checks_saying_why(tmp_path):
    # GIVEN a loop that watches a wrapper but calls its submodule (Lightning's `self.model(x)`)
    import torch

    import minigpt

    torch.manual_seed(0)
    data, vocab = loops.demo_ids()
    wrapper = torch.nn.Module()
    wrapper.model = loops.small_model(vocab)
    optimizer = torch.optim.AdamW(wrapper.parameters(), lr=1e-3)
    with minigpt.watch(wrapper, optimizer, workspace=tmp_path / "run"):
        for _ in range(6):
            ix = torch.randint(len(data) - 33, (8,))
            x = torch.stack([data[i : i + 32] for i in ix])
            y = torch.stack([data[i + 1 : i + 33] for i in ix])
            optimizer.zero_grad()
            _, loss = wrapper.model(x, y)
            loss.backward()
            optimizer.step()
    report = loop_report(tmp_path / "run")
    # THEN every check that reads forwards skips, naming the cause; none passes on zero forwards
    for cid in ("loop_train_mode", "loop_eval_mode", "loop_eval_no_grad", "loop_targets_shifted", "loop_accumulation"):
        r = report.by_id()[cid]
        assert r.status is Status.SKIP and "never ran forward" in r.summary, (cid, r.summary)
    # AND the checks that read the backward and the step still judge
    assert report.by_id()["loop_grads_cleared"].status is Status.PASS


@pytest.mark.slow
def test_the_curves_advice_uses_the_clipping_the_watch_measured(tmp_path):
    # GIVEN nanoGPT's loop (clip 1.0) at LR 1.0, watched: the loss blows up although it clips
    loops.nanogpt_loop(tmp_path / "run", max_iters=100, learning_rate=1.0, interval=10)
    report = run_checks(
        CheckContext(CheckOptions(workspace=tmp_path / "run", device="cpu")), only=["loop_clipping", "training_curve"]
    )
    clipping, curve = report.by_id()["loop_clipping"], report.by_id()["training_curve"]
    assert clipping.values["clipped_share"] >= 0.5
    # THEN the curve's advice never asks for the clipping the same report saw, and names what it saw
    assert curve.status is Status.FAIL and curve.values["shape"] == "unstable"
    assert not any("clip gradients" in f for f in curve.fixes), curve.fixes
    assert "no gradient clipping" not in curve.causes
    readings = clipping.values["readings"]
    assert any("the watch saw clipping at" in c and f"of {readings} full readings" in c for c in curve.causes)
    # AND its warmup advice names the warmup the watch measured (nanoGPT's warmup_iters 5)
    assert "no warmup or too short a warmup" not in curve.causes
    assert "a warmup of 5 steps (the watch measured the LR)" in curve.causes, curve.causes
    assert "a warmup longer than 5 steps (a few hundred)" in curve.fixes


def test_a_loop_whose_targets_equal_its_inputs_is_too_good_explained_by_the_loop_check(tmp_path):
    # GIVEN a nanoGPT-style loop that trains on y = x, long enough for the loss to near 0
    loops.nanogpt_loop(tmp_path / "run", bug="targets_equal_inputs", max_iters=500)
    # WHEN the loop checks and the curve are read together
    report = run_checks(
        CheckContext(CheckOptions(workspace=tmp_path / "run", device="cpu")), only=[*LOOP_IDS, "training_curve"]
    )
    # THEN the curve is not "still improving, train longer": it is too good, and the failed loop
    # check is named as its measured cause
    assert report.by_id()["loop_targets_shifted"].status is Status.FAIL
    curve = report.by_id()["training_curve"]
    assert curve.status is Status.FAIL, curve.summary
    assert curve.values["shape"] == "too_good" and curve.values["explained_by"] == ["loop_targets_shifted"]
    assert "explained by loop_targets_shifted" in curve.summary
    assert curve.causes[0].startswith("measured: loop_targets_shifted failed in this run")
    assert not any("train longer" in f for f in curve.fixes)


def test_lr_probe_asked_for_on_a_watched_folder_says_what_it_needs(tmp_path, capsys):
    from minigpt.cli import main

    # GIVEN a watched loop's folder (no tokenizer, no token files, no model the checks can rebuild)
    loops.nanogpt_loop(tmp_path / "run", max_iters=20)
    # WHEN the user asks for the LR probe there
    main(["check", "--workspace", str(tmp_path / "run"), "--lr-probe"])
    out = capsys.readouterr().out
    # THEN the probe has a line of its own saying why it did not run and the command that runs it,
    # not a place in "N checks not run: they need files skip"
    line = next(x for x in out.splitlines() if " lr_probe " in x)
    assert "a watched loop's folder holds neither" in line and "--model FILE.py:CLASS" in out
    assert not any("lr_probe" in x for x in out.splitlines() if "checks " in x and "not run" in x)
