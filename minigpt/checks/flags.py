"""The check flags, declared once for `minigpt check` and `minigpt-tui` (torch-free).

`add_check_arguments(parser, ui=...)` adds what the checks read (the UI takes the subset that
makes sense in it: no report file, no check selection, no sandbox controls); `option_values(args)`
turns the parsed flags into `CheckOptions` keyword arguments, the same names for both.
"""

from __future__ import annotations

import argparse
import re

from minigpt.checks.faults import FAULTS
from minigpt.device import DEVICE_CHOICES
from minigpt.train.option_ranges import parser_for

OVERFIT_STEPS = 300  # CheckOptions' default, repeated here so `--help` needs no import of the options
LR_PROBE_STEPS = 150

# flag dest -> CheckOptions field, for every flag both commands take
_SHARED = {
    "checkpoint": "checkpoint",
    "tokenizer": "tokenizer",
    "model_spec": "model_spec",
    "config_path": "config_path",
    "metrics": "metrics",
    "device": "device",
    "inject": "fault",
    "skip_overfit": "skip_overfit",
    "overfit_steps": "overfit_steps",
    "lr_probe": "lr_probe",
    "lr_probe_steps": "lr_probe_steps",
    "run_learning_rate": "run_learning_rate",
}
_CLI_ONLY = {
    "train_data": "train_data",
    "expect_gpu": "expect_gpu",
    "allow_large": "allow_large",
}


_DEVICE = re.compile(r"(auto|cpu|mps|cuda)(:\d+)?")


def device_name(text: str) -> str:
    """--device: one of DEVICE_CHOICES, or cuda:N for one GPU of several."""
    if not _DEVICE.fullmatch(text) or (":" in text and not text.startswith("cuda")):
        raise argparse.ArgumentTypeError(f"expected {', '.join(DEVICE_CHOICES)} or cuda:N; found {text!r}")
    return text


def add_check_arguments(p: argparse.ArgumentParser, *, ui: bool = False) -> None:
    p.add_argument(
        "--checkpoint", help="checkpoint to inspect (default: checkpoints/mini_gpt_best.pt; none = fresh model)"
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH|tiktoken:NAME",
        help="char_tokenizer.json, tokenizer.json, a .model, a .tiktoken or tiktoken:gpt2 (default: the workspace's)",
    )
    if not ui:
        p.add_argument("--train-data", help="encoded training IDs (default: data/encoded/train_ids.pt)")
    p.add_argument(
        "--model",
        dest="model_spec",
        metavar="SPEC",
        help="your model: FILE.py:CLASS[:CONFIG], package.module:CLASS[:CONFIG] (transformers:CLASS:CONFIG) or hf:PATH",
    )
    p.add_argument(
        "--config", dest="config_path", metavar="JSON", help="model config JSON, used when there is no checkpoint"
    )
    p.add_argument(
        "--metrics",
        metavar="PATH",
        help="training log to judge: a metrics JSONL (default: logs/metrics.jsonl) or a TensorBoard event file/folder",
    )
    p.add_argument(
        "--device",
        type=device_name,
        default="auto",
        metavar="DEVICE",
        help="auto, cpu, cuda[:N] or mps (default: auto)",
    )
    p.add_argument(
        "--inject",
        choices=sorted(FAULTS),
        metavar="FAULT",
        help="apply a known bug and watch its check fail: " + ", ".join(FAULTS),
    )
    p.add_argument("--skip-overfit", action="store_true", help="skip the single-batch overfit check (the slow one)")
    p.add_argument(
        "--overfit-steps",
        type=parser_for("--overfit-steps"),
        default=OVERFIT_STEPS,
        metavar="N",
        help=f"steps for the overfit check (default {OVERFIT_STEPS})",
    )
    p.add_argument(
        "--lr-probe",
        action="store_true",
        help="also run the learning-rate probe: short runs of the run's model at LR/10, LR/3, LR, 3xLR, "
        "and further (to LR/100 or 100xLR) while the end rate keeps winning",
    )
    p.add_argument(
        "--lr-probe-steps",
        type=parser_for("--lr-probe-steps"),
        default=LR_PROBE_STEPS,
        metavar="N",
        help=f"steps of each probe run (default {LR_PROBE_STEPS})",
    )
    p.add_argument(
        "--lr",
        type=parser_for("--lr"),
        dest="run_learning_rate",
        metavar="LR",
        help="the run's learning rate, for the probe and optimizer_update (default: the checkpoint's settings, else "
        "the log's peak lr)",
    )
    if not ui:
        p.add_argument("--expect-gpu", action="store_true", help="warn when the device falls back to CPU")
        p.add_argument(
            "--allow-large",
            action="store_true",
            help="build models whose memory estimate exceeds the machine's memory (refused by default)",
        )


def option_values(args: argparse.Namespace) -> dict:
    """`CheckOptions` keyword arguments from the parsed flags (those the command declared)."""
    fields = {**_SHARED, **_CLI_ONLY}
    return {field: getattr(args, dest) for dest, field in fields.items() if hasattr(args, dest)}
