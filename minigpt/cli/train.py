"""`minigpt train`: presets with flag overrides, rich progress, clean stop on divergence.

Exit codes: 0 done (or nothing left to do), 1 training diverged, 2 bad input, a workspace locked
by another run or an OS error, 130 interrupted (Ctrl-C; the last checkpoint is intact).

Under torchrun (`torchrun --standalone --nproc_per_node N -m minigpt train ...`) every rank trains
with DistributedDataParallel and only rank 0 prints, logs and saves.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
from typing import TYPE_CHECKING, cast

from minigpt.device import DEVICE_CHOICES
from minigpt.train.option_ranges import parser_for
from minigpt.train.presets import PRESETS

if TYPE_CHECKING:
    from minigpt.model.gpt import MiniGPTConfig
    from minigpt.train.config import TrainConfig
    from minigpt.train.distributed import World
    from minigpt.train.trainer import Trainer

DTYPE_CHOICES = ("float32", "bfloat16", "float16")  # minigpt.train.trainer.DTYPES, without importing torch
# nanoGPT's model flags -> TrainConfig's fields
SHAPE_FLAGS = {
    "--n-layer": ("num_layers", "transformer blocks"),
    "--n-head": ("num_heads", "attention heads (must divide --n-embd)"),
    "--n-embd": ("embedding_dim", "embedding width"),
    "--block-size": ("block_size", "context length in tokens"),
}
FLAG_OF = {field: flag for flag, (field, _) in SHAPE_FLAGS.items()} | {"dropout": "--dropout"}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", choices=sorted(PRESETS), default="debug", help="model shape and schedule")
    shape = p.add_argument_group("model shape (nanoGPT's names; over the preset)")
    for flag, (field, what) in SHAPE_FLAGS.items():
        shape.add_argument(flag, type=parser_for(flag), dest=field, metavar="N", help=what)
    p.add_argument("--steps", type=parser_for("--steps"), dest="max_steps", help="optimizer steps")
    p.add_argument(
        "--time",
        dest="time_budget",
        metavar="DURATION",
        help="train for this long (8m, 90s, 1h30m): the steps are planned from measured throughput so that "
        "warm-up, decay and evaluations fit",
    )
    p.add_argument("--lr", "--learning-rate", type=parser_for("--lr"), dest="learning_rate", help="peak learning rate")
    p.add_argument("--batch-size", type=parser_for("--batch-size"), help="sequences per micro-batch")
    p.add_argument("--grad-accum", type=parser_for("--grad-accum"), help="micro-batches per optimizer step")
    p.add_argument(
        "--eval-interval", type=parser_for("--eval-interval"), help="evaluate and save `latest` every N steps"
    )
    p.add_argument("--warmup-steps", type=parser_for("--warmup-steps"))
    p.add_argument("--grad-clip", type=parser_for("--grad-clip"), help="max global gradient norm (0 = off)")
    p.add_argument("--dropout", type=parser_for("--dropout"), help="dropout probability in [0, 1)")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    p.add_argument("--seed", type=parser_for("--seed"))
    p.add_argument(
        "--dtype",
        choices=DTYPE_CHOICES,
        help="autocast dtype of the training steps (default float32; float16 adds loss scaling)",
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        help="torch.compile the model for the training steps (pays off on a GPU; slow to start)",
    )
    p.add_argument("--resume", action="store_true", help="continue from checkpoints/mini_gpt_latest.pt")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.add_argument(
        "--allow-large", action="store_true", help="train even if the memory estimate exceeds the device's memory"
    )


def run(args: argparse.Namespace) -> int:
    from minigpt.train.config import TrainConfig

    overrides = {
        k: getattr(args, k)
        for k in (
            *(field for field, _ in SHAPE_FLAGS.values()),
            "max_steps",
            "learning_rate",
            "batch_size",
            "grad_accum",
            "eval_interval",
            "warmup_steps",
            "grad_clip",
            "dropout",
            "seed",
            "dtype",
            "compile",
        )
    }
    _check_shape_flags(args, overrides)
    if args.time_budget is not None:
        from minigpt.errors import ConfigError
        from minigpt.train.time_budget import parse_duration

        args.time_budget_s = parse_duration(args.time_budget)
        if args.max_steps is not None:
            raise ConfigError("--time plans the step count itself; drop --steps (or --time)")
    else:
        args.time_budget_s = None
    cfg = TrainConfig.from_preset(args.preset, device=args.device, **overrides)
    from minigpt.threads import apply as apply_thread_policy
    from minigpt.train import distributed

    apply_thread_policy("train")
    world = distributed.init(args.device)  # a world of one without torchrun
    try:
        return _train(args, cfg, overrides, world)
    finally:
        distributed.shutdown()


def _check_shape_flags(args: argparse.Namespace, overrides: dict) -> None:
    """The model flags in the user's words: heads dividing the width, no shape change on --resume
    (the checkpoint's shape is the run's). Each flag's range is its parser's (minigpt.train.option_ranges)."""
    from minigpt.errors import ConfigError

    given = {FLAG_OF[k]: v for k, v in overrides.items() if k in FLAG_OF and v is not None}
    if args.resume and given:
        raise ConfigError(
            f"--resume keeps the checkpoint's model shape; drop {', '.join(given)}",
            causes=["to train another shape, start a fresh run (the old one is archived to previous/)"],
        )
    preset = PRESETS[args.preset]
    width = int(overrides.get("embedding_dim") or preset["embedding_dim"])
    heads = int(overrides.get("num_heads") or preset["num_heads"])
    if width % heads:
        fits = next(h for h in range(heads, 0, -1) if width % h == 0)
        raise ConfigError(
            f"--n-embd {width} must be divisible by --n-head {heads} (each head gets n_embd / n_head channels)",
            causes=[f"try --n-head {fits} or --n-embd {width + (-width) % heads}"],
        )


def _shape_line(trainer: Trainer) -> str:
    """What is trained, in nanoGPT's words, with the memory estimate the trainer checked it against."""
    from minigpt.io.files import describe_size
    from minigpt.model.memory import estimate_memory

    assert trainer.state is not None  # on_start fires once the run's state exists
    cfg, model = trainer.cfg, trainer.state.model
    params = sum(p.numel() for p in model.parameters())
    peak = estimate_memory(cast("MiniGPTConfig", model.config), cfg.batch_size, training=True)  # the trainer's MiniGPT
    return (
        f"n_layer {cfg.num_layers}, n_head {cfg.num_heads}, n_embd {cfg.embedding_dim}, block_size "
        f"{cfg.block_size}, dropout {cfg.dropout:g}; batch_size {cfg.batch_size}; {params:,} parameters, "
        f"about {describe_size(peak)} at peak (estimate)"
    )


def _clock(seconds: float) -> str:
    """`0:01:30`, as rich's elapsed-time column writes it."""
    whole = int(seconds)
    return f"{whole // 3600}:{whole // 60 % 60:02d}:{whole % 60:02d}"


def _train(args: argparse.Namespace, cfg: TrainConfig, overrides: dict, world: World) -> int:
    import time

    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        ProgressColumn,
        TaskID,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )
    from rich.text import Text

    from minigpt.cli.output import hanging, wrap_width
    from minigpt.errors import TrainingDiverged
    from minigpt.io.files import os_error
    from minigpt.train.time_budget import CALIBRATION_STEPS
    from minigpt.train.trainer import Trainer

    trainer = Trainer(
        args.workspace,
        cfg,
        resume=args.resume,
        overrides=overrides,
        allow_large=args.allow_large,
        time_budget_s=args.time_budget_s,
        choose_eval_interval=args.eval_interval is None,  # a short run gets several evaluations
    )
    # only rank 0 speaks: N ranks printing the same lines would interleave
    # soft_wrap: rich never breaks a line itself; `say` breaks it at spaces (never inside a path or a number)
    console = Console(stderr=True, soft_wrap=True, quiet=not world.is_main)
    width = wrap_width(console)

    def say(text: str, label: str = "", indent: int = 2) -> None:
        """One message, broken at spaces to fit the terminal (a path is never broken by us)."""
        console.print(hanging(label, text, width, indent=len(label) or indent), highlight=False)

    budget = args.time_budget_s
    columns: tuple[ProgressColumn, ...]
    if budget is None:  # the total is the run's max_steps, known when it starts
        columns = (TextColumn("step"), MofNCompleteColumn(), BarColumn())
        tail: tuple[ProgressColumn, ...] = (TimeRemainingColumn(),)
    else:  # --time plans (and plans again) the step count as it runs: the bar counts the budget, known up front
        columns = (TextColumn("step {task.fields[step]:>5}"), BarColumn())
        tail = (TimeElapsedColumn(), TextColumn(f"of {_clock(budget)}"))
    progress = Progress(
        *columns,
        TextColumn("{task.fields[info]}"),
        *tail,
        console=console,
        disable=args.quiet or not world.is_main,
        # the ETA from the rate over the last 10 minutes, evaluations and checkpoints included: over
        # rich's default 30 s it jumped at every evaluation
        speed_estimate_period=600.0,
    )
    state: dict = {"val": "-", "task": None, "start_step": 0, "started": 0.0}

    def on_step(rec: dict) -> None:
        if "val_loss" in rec:
            state["val"] = f"{rec['val_loss']:.4f}"
            say(
                f"step {rec['step']:>6}  train {rec['train_loss']:.4f}  val {rec['val_loss']:.4f}  "
                f"lr {rec['lr']:.2e}  {rec['tokens_per_s']:,.0f} tok/s"
            )
        task: TaskID | None = state["task"]
        if task is None:
            return
        info = f"loss {rec['train_loss']:.4f} val {state['val']} {rec['tokens_per_s']:,.0f} tok/s"
        if budget is None:
            progress.update(task, completed=rec["step"], info=info)
        else:
            spent = min(budget, time.monotonic() - state["started"])
            progress.update(task, completed=spent, step=rec["step"], info=info)

    def on_start(info: dict) -> None:
        # printed once the run's own settings are known (on --resume, the checkpoint's, not the preset's)
        # with --time, the step count is planned after the first steps: no total is named before then
        planned = f"--time {args.time_budget}: steps planned after the first {CALIBRATION_STEPS}"
        if info["resumed"]:
            what = f"resuming at step {info['step']}" + (
                f", {planned}" if budget is not None else f" of {info['max_steps']}"
            )
        else:
            what = f"preset {args.preset}, fresh, " + (planned if budget is not None else f"{info['max_steps']} steps")
            if info["eval_plan"] is not None:  # the interval chosen for a short run (--time says so in its plan)
                what += f"; {info['eval_plan'].describe()}"
        ranks = f" x {info['world_size']} processes" if info["world_size"] > 1 else ""
        say(f"training on {info['device']}{ranks} ({what})")
        say(_shape_line(trainer), label="model: ")
        state["start_step"], state["started"] = info["step"], time.monotonic()
        # the bar starts here, with a total that holds: a resume with nothing to do never draws one
        if budget is None:
            state["task"] = progress.add_task("train", total=info["max_steps"], completed=info["step"], info="")
        else:
            state["task"] = progress.add_task("train", total=budget, step=info["step"], info="")
        progress.start()

    trainer.register_callback("on_start", on_start)
    trainer.register_callback("on_step_end", on_step)
    trainer.register_callback("on_notice", lambda text: say(text, label="note: "))
    trainer.register_callback(
        "on_archive",
        lambda dest: say(
            f"the previous run's checkpoints and logs were moved to {dest} (use --resume to continue a run)"
        ),
    )
    # SIGTERM (a scheduler's preemption, `timeout`): stop after the current step with its checkpoint
    # saved, as a stop asked for in the UI does; a second SIGTERM ends the process at once
    terminated: list[int] = []

    def stop_on_sigterm(signum: int, frame: object) -> None:
        if terminated:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
        terminated.append(signum)
        trainer.request_stop()

    in_main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, stop_on_sigterm) if in_main_thread else None
    try:
        try:
            summary = trainer.run()
        finally:
            progress.stop()
            if in_main_thread:
                signal.signal(signal.SIGTERM, previous)
    except TrainingDiverged as exc:
        console.print(hanging(Text("stopped: ", style="red"), exc.message, width), highlight=False)
        return 1
    except KeyboardInterrupt:
        st = trainer.state
        if st is None:
            moved = f"; the previous run had been moved to {trainer.archived}" if trainer.archived else ""
            where = f"before the first step{moved}"
        elif st.last_good:
            where = f"at step {st.step}; last checkpoint {st.last_good} (step {st.last_good_step}), use --resume"
        else:
            where = f"at step {st.step}; no checkpoint was written yet"
        say(f"interrupted {where}")
        return 130
    except OSError as exc:  # disk full, permissions: the checkpoint written last is still intact
        last = trainer.state.last_good if trainer.state else None
        say(f"error: {os_error(exc, action='write')}")
        say(f"last checkpoint: {last or 'none'}")
        return 2
    if summary.get("nothing_to_do"):
        say(
            f"nothing to do: {trainer.ws.latest_checkpoint} is at step {summary['steps']} and the run's max_steps "
            f"is {trainer.cfg.max_steps}; pass --steps N (N > {summary['steps']}) to train further"
        )
        return 0
    if terminated:
        saved = trainer.state.last_good if trainer.state else None
        say(
            f"stopped by SIGTERM at step {summary['steps']}; "
            + (f"saved {saved}, use --resume to continue" if saved else "no checkpoint was written yet")
        )
        return 128 + signal.SIGTERM
    ran = summary["steps"] - state["start_step"]
    span = f" (from step {state['start_step']} to {summary['steps']})" if state["start_step"] else ""
    say(
        f"done: {ran} steps{span} in {summary['seconds']:.1f}s, best val loss {summary['best_val_loss']:.4f}; "
        f"checkpoints in {trainer.ws.checkpoints}"
    )
    return 0
