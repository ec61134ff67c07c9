"""`minigpt import nanogpt`: open a nanoGPT run (character-level or GPT-2 BPE) as a workspace."""

from __future__ import annotations

import argparse
import json

FORMATS = ("nanogpt",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("format", choices=FORMATS, help="what wrote the run (nanogpt: Karpathy's nanoGPT)")
    p.add_argument("--out-dir", required=True, help="nanoGPT's out_dir, holding ckpt.pt")
    p.add_argument(
        "--data-dir", required=True, help="nanoGPT's data/<dataset> folder: train.bin, val.bin (and meta.pkl if char)"
    )
    p.add_argument(
        "--tokenizer",
        metavar="PATH|tiktoken:NAME",
        help="what wrote the IDs (default: meta.pkl, else GPT-2's BPE, tiktoken:gpt2, as nanoGPT's sample.py assumes)",
    )
    p.add_argument(
        "--log",
        metavar="FILE",
        help="nanoGPT's saved stdout (python train.py ... | tee train.log): written as logs/metrics.jsonl",
    )
    p.add_argument("--json", dest="json_path", metavar="PATH", help="also write the import summary as JSON here")
    p.add_argument("--allow-large", action="store_true", help="import a model past the machine's memory estimate")


# the train.py settings that decide how a run trains, in the order a reader looks for them
SETTINGS_SHOWN = (
    "learning_rate", "min_lr", "warmup_iters", "lr_decay_iters", "decay_lr", "max_iters", "batch_size",
    "gradient_accumulation_steps", "grad_clip", "weight_decay", "beta1", "beta2", "dropout", "dtype", "compile",
)  # fmt: skip


def settings_line(settings: dict) -> str:
    """nanoGPT's training settings in one line: `learning_rate 0.001, ... (+12 more in the checkpoint)`."""
    shown = [f"{k} {settings[k]}" for k in SETTINGS_SHOWN if k in settings]
    rest = len(settings) - len(shown)
    return ", ".join(shown) + (f" (+{rest} more kept in the checkpoint)" if rest else "")


def run(args: argparse.Namespace) -> int:
    import time

    from minigpt.cli.startup import STARTED
    from minigpt.importers.nanogpt import import_nanogpt
    from minigpt.io.atomic import atomic_write_text
    from minigpt.model.memory import large_allowed
    from minigpt.model.nanogpt import MODEL_CLASS

    loaded = time.perf_counter()  # the command's start to here: Python, torch and the importer's modules
    with large_allowed(args.allow_large):
        summary = import_nanogpt(args.out_dir, args.data_dir, args.workspace, log=args.log, tokenizer=args.tokenizer)
    cfg = summary.config
    best = f"{summary.best_val_loss:.4f}" if summary.best_val_loss is not None else "unknown"
    print(f"imported {summary.checkpoint} (iter {summary.step}, best val loss {best}) into {summary.workspace}")
    print(
        f"  model       {MODEL_CLASS}: {cfg['n_layer']} layers, {cfg['n_head']} heads, n_embd {cfg['n_embd']}, "
        f"block {cfg['block_size']}, bias {'on' if cfg['bias'] else 'off'}, {summary.parameters:,} parameters"
    )
    if summary.settings:
        print(f"  training    {settings_line(summary.settings)}")
    if summary.log_records is not None:
        print(f"  log         {summary.log_records:,} steps from {args.log}")
    print(f"  tokenizer   {summary.tokenizer}, fingerprint {summary.fingerprint[:12]}")
    print(
        "  data        "
        + ", ".join(f"{split} {n:,} tokens" for split, n in summary.tokens.items())
        + f" as {summary.ids_dtype}"
    )
    for path in summary.written.values():
        print(f"  wrote       {path}")
    for notice in summary.notices:
        print(f"  note        {notice}")
    if args.json_path:
        atomic_write_text(json.dumps(summary.to_dict(), indent=1) + "\n", args.json_path)
    # the whole command's time, as `prepare` prints it: on a first or busy run, loading torch is most of it
    print(
        f"done in {time.perf_counter() - STARTED:.1f} s (starting and loading torch {loaded - STARTED:.1f} s, "
        f"importing {summary.seconds:.1f} s); next: minigpt check --workspace {summary.workspace}"
    )
    return 0
