"""`minigpt-tui`: the full-screen inspector (also `python -m minigpt_tui`)."""

from __future__ import annotations

import time

STARTED = time.perf_counter()  # before textual loads: time to first paint counts from here

import argparse  # noqa: E402
import sys  # noqa: E402


def build_parser() -> argparse.ArgumentParser:
    from minigpt import __version__  # minigpt/__init__.py is a constant: no torch

    p = argparse.ArgumentParser(prog="minigpt-tui", description="Find out why a small GPT trains badly.")
    p.add_argument("--version", action="version", version=f"minigpt-tui {__version__}")
    p.add_argument("--workspace", default=".", help="run folder (default: current directory)")
    p.add_argument("--checkpoint", help="checkpoint to inspect (default: checkpoints/mini_gpt_best.pt)")
    p.add_argument(
        "--model",
        dest="model_spec",
        metavar="SPEC",
        help="your model: FILE.py:CLASS[:CONFIG], transformers:CLASS:CONFIG or hf:PATH",
    )
    p.add_argument("--config", dest="config_path", metavar="JSON", help="model config JSON for fresh-model checks")
    p.add_argument(
        "--metrics",
        metavar="PATH",
        help="training log to judge: a metrics JSONL (default: logs/metrics.jsonl) or a TensorBoard event file/folder",
    )
    p.add_argument("--device", default="auto", help="auto, cpu, cuda[:N] or mps (default: auto)")
    p.add_argument(
        "--demo",
        action="store_true",
        help="open the demo workspace (built and briefly trained in the cache folder on first use)",
    )
    p.add_argument("--inject", metavar="FAULT", help="start with a known bug injected (see the fault menu, key f)")
    p.add_argument("--skip-overfit", action="store_true", help="skip the single-batch overfit check (the slow one)")
    p.add_argument("--overfit-steps", type=int, help="steps for the overfit check (default 300)")
    p.add_argument(
        "--lr-probe", action="store_true", help="also run the learning-rate probe (four short runs, LR/10..3xLR)"
    )
    p.add_argument(
        "--lr", type=float, dest="run_learning_rate", metavar="LR", help="the run's learning rate, for the probe"
    )
    p.add_argument("--timings", action="store_true", help="print time to first paint and to all checks done on exit")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from .app import MiniGPTApp

    app = MiniGPTApp(
        args.workspace,
        checkpoint=args.checkpoint,
        model_spec=args.model_spec,
        config_path=args.config_path,
        metrics=args.metrics,
        device=args.device,
        demo_mode=args.demo,
        fault=args.inject,
        skip_overfit=args.skip_overfit,
        overfit_steps=args.overfit_steps,
        lr_probe=args.lr_probe,
        run_learning_rate=args.run_learning_rate,
        started_at=STARTED,
    )
    app.run()
    if args.timings:
        for name, seconds in app.timings.items():
            print(f"{name}: {seconds:.2f}s", file=sys.stderr)
    return app.return_code or 0


if __name__ == "__main__":
    sys.exit(main())
