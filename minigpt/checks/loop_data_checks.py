"""Loop checks on the data a watched loop trained on: new batches each step, other batches on each
DDP rank, targets that are the inputs shifted by one (see `loop_checks`).
"""

from __future__ import annotations

import statistics

from minigpt.checks.context import CheckContext
from minigpt.checks.control import CheckRun
from minigpt.checks.registry import CheckReturn, check
from minigpt.checks.result import Outcome, Status
from minigpt.checks.watched import MIN_STEPS, loop_values, watched_loop

LATE_SHARE = 0.5  # of a rank's batches, drawn by rank 0 too at some step: the same stream, shifted


@check("loop_batches_change", "loop", "Each step trains on new batches")
def loop_batches_change(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, need_steps=5, forwards=True)
    per_step = [tuple(s.get("fingerprints") or ()) for s in log.steps]
    per_step = [fp for fp in per_step if fp]
    if len(per_step) < 5:
        raise Outcome(Status.SKIP, f"{log.writer()}: the model's forward got no integer token IDs to fingerprint")
    everything = [f for fp in per_step for f in fp]
    distinct = len(set(everything))
    values = loop_values(log, batches=len(everything), distinct=distinct)
    repeats = [i for i in range(1, len(per_step)) if per_step[i] == per_step[i - 1]]
    if distinct <= max(1, len(per_step[0])) and len(per_step) >= 5:
        raise Outcome(
            Status.FAIL,
            f"the same batch on every step: {len(everything)} micro-batches, {distinct} distinct (from step "
            f"{log.steps[0]['step']})",
            values=values,
            causes=["get_batch() re-seeds its generator on every call", "the batch is built once, outside the loop"],
            fixes=["seed once at start; draw a new batch inside the loop"],
        )
    if len(repeats) >= len(per_step) // 2 or distinct < len(everything) // 2:
        raise Outcome(
            Status.WARN,
            f"batches repeat: {distinct} distinct of {len(everything)} micro-batches, {len(repeats)} steps repeat "
            "the previous one",
            values=values,
            causes=["a data loader that restarts each epoch on a tiny dataset", "a seed reset inside the loop"],
        )
    return f"{distinct} distinct batches in {len(everything)} micro-batches", values


@check("loop_ranks_differ", "loop", "DDP ranks train on different batches")
def loop_ranks_differ(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    world = int(log.header.get("world_size", 1))
    if world <= 1:
        raise Outcome(Status.SKIP, f"{log.writer()}: a single process (no DDP ranks to compare)")
    if not log.ranks:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: {world} ranks, but no logs/ranks/rank*.jsonl of this run here (ranks on other nodes "
            "write them on their own disks)",
        )
    mine = {s["step"]: s.get("fingerprints") or [] for s in log.steps}
    # every batch rank 0 drew, at any step, evaluation included: a rank seeded alike but behind
    # rank 0's stream (rank 0 alone evaluates from the same generator) reads them steps later
    drawn = {f for s in log.steps for f in (s.get("fingerprints") or []) + (s.get("eval_fingerprints") or [])}
    same: dict[int, float] = {}  # rank -> share of common steps with the same batches
    anywhere: dict[int, float] = {}  # rank -> share of its batches that rank 0 drew at some step
    for rank, steps in sorted(log.ranks.items()):
        common = [st for st in steps if st in mine and mine[st] and steps[st]]
        if len(common) >= MIN_STEPS:
            same[rank] = sum(steps[st] == mine[st] for st in common) / len(common)
        theirs = [f for fps in steps.values() for f in fps]
        if len(theirs) >= MIN_STEPS:
            anywhere[rank] = sum(f in drawn for f in theirs) / len(theirs)
    values = loop_values(log, world_size=world, ranks_read=sorted(log.ranks), same_share=same, drawn_share=anywhere)
    dupes = {r: share for r, share in same.items() if share >= 0.9}
    if dupes:
        r = min(dupes)
        raise Outcome(
            Status.FAIL,
            f"rank {r} trained on the same batches as rank 0 on {dupes[r]:.0%} of steps ({len(dupes)} of "
            f"{len(same)} ranks compared)",
            values=values,
            causes=["every rank seeds its data the same way", "no DistributedSampler (or set_epoch never called)"],
            fixes=["seed per rank (seed + rank) or shard the data with DistributedSampler"],
        )
    late = {r: share for r, share in anywhere.items() if share >= LATE_SHARE}
    if late:
        r = min(late)
        raise Outcome(
            Status.FAIL,
            f"rank {r} trained on the same batches as rank 0 drew, steps later: {late[r]:.0%} of its "
            f"{sum(len(f) for f in log.ranks[r].values())} micro-batches read ({len(late)} of {len(anywhere)} ranks)",
            values=values,
            causes=[
                "every rank seeds its data the same way; rank 0 runs ahead, drawing extra batches (an evaluation "
                "on rank 0 alone, from the same generator)",
                "no DistributedSampler (or set_epoch never called)",
            ],
            fixes=["seed per rank (seed + rank) or shard the data with DistributedSampler"],
        )
    if not same and not anywhere:
        raise Outcome(Status.SKIP, f"{log.writer()}: fewer than {MIN_STEPS} steps in common with the other ranks")
    return f"{len(same or anywhere)} other rank(s) trained on different batches", values


@check("loop_targets_shifted", "loop", "Targets your loop passes are the inputs shifted by one")
def loop_targets_shifted(ctx: CheckContext, run: CheckRun) -> CheckReturn:
    log = watched_loop(ctx, forwards=True)
    steps = [s for s in log.steps if s.get("targets_equal") is not None]
    if not steps:
        raise Outcome(
            Status.SKIP,
            f"{log.writer()}: the model never received targets of the inputs' shape (the loss is computed in the "
            "loop, which the watch cannot compare)",
        )
    name = steps[0].get("targets") or "targets"
    what = "targets" if name == "positional" else name  # passed by position: no argument name to quote
    equal = statistics.median(s["targets_equal"] for s in steps)
    shifted = statistics.median(s["targets_shifted"] for s in steps)
    hf = str(log.header.get("model_class", "")).startswith("transformers.") or name == "labels"
    values = loop_values(log, argument=name, equal_share=equal, shifted_share=shifted, shifts_inside=hf)
    if hf:
        if equal >= 0.99:
            return "labels equal input_ids: the model shifts them inside, as Hugging Face models do", values
        if shifted >= 0.9:
            raise Outcome(
                Status.FAIL,
                f"labels are already shifted by one ({shifted:.0%}) and the model shifts them again: every target is "
                "two tokens ahead",
                values=values,
                causes=["labels built as input_ids[:, 1:] for a model that shifts internally (Hugging Face)"],
                fixes=["pass labels=input_ids"],
            )
    elif shifted >= 0.9:
        return f"the {what} are the inputs shifted by one ({shifted:.0%} of positions)", values
    elif equal >= 0.99:
        raise Outcome(
            Status.FAIL,
            f"the {what} equal the inputs (from step {steps[0]['step']}): the model learns to copy its input",
            values=values,
            causes=["targets built from the same slice as the inputs: y = data[i:i+T] instead of data[i+1:i+T+1]"],
            fixes=["y = data[i + 1 : i + 1 + block_size]"],
        )
    raise Outcome(
        Status.WARN,
        f"unsure: the {what} match the inputs at {equal:.0%} and the shifted inputs at {shifted:.0%} of positions",
        values=values,
        causes=["a shift by more than one", "targets from another sequence", "a masked or packed format"],
    )
