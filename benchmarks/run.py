"""Benchmarks measured side by side in one run (medians over repetitions).

    python benchmarks/run.py --json          # one JSON object
    python benchmarks/run.py --quick --json  # fewer repetitions (for a smoke run)

Uses ../shared/data/wikitext-2 when present (prepared into a temp workspace), else the embedded demo corpus.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minigpt.checks import CheckContext, CheckOptions, run_checks  # noqa: E402
from minigpt.data import get_batch, get_batch_loop, load_ids  # noqa: E402
from minigpt.gradstats import grad_table  # noqa: E402
from minigpt.model import MiniGPT, MiniGPTConfig  # noqa: E402
from minigpt.prepare import prepare_workspace  # noqa: E402
from minigpt.sampling import SamplerSettings, generate  # noqa: E402
from minigpt.train import MODEL_FIELDS, PRESETS, TrainConfig, Trainer, make_optimizer  # noqa: E402
from minigpt.workspace import Workspace  # noqa: E402

WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2"


def median_time(fn, reps: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def train_tokens_per_s(data, vocab: int, shape: dict, batch: int, steps: int, reps: int) -> float:
    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=vocab, **shape))
    cfg = TrainConfig(**shape, batch_size=batch)
    opt = make_optimizer(model, cfg)
    gen = torch.Generator().manual_seed(0)

    def run_steps():
        for _ in range(steps):
            x, y = get_batch(data, batch, shape["block_size"], "cpu", gen)
            _, loss = model(x, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)

    return steps * batch * shape["block_size"] / median_time(run_steps, reps)


def kv_cache_speedup(reps: int) -> dict:
    torch.manual_seed(0)
    cfg = MiniGPTConfig(vocab_size=137, block_size=256, embedding_dim=384, num_heads=6, num_layers=6, dropout=0.0)
    model = MiniGPT(cfg).eval()
    prompt = torch.randint(cfg.vocab_size, (5,)).tolist()
    settings = SamplerSettings(temperature=0.0, max_new_tokens=250)
    outs = {}

    def run(cache: bool):
        outs[cache] = generate(model, prompt, settings, use_cache=cache)

    cached = median_time(lambda: run(True), reps)
    full = median_time(lambda: run(False), reps)
    assert outs[True] == outs[False], "KV cache changed the greedy output"
    return {
        "kv_cache_speedup": full / cached,
        "generate_tokens_per_s_cached": 250 / cached,
        "generate_tokens_per_s_recompute": 250 / full,
    }


def grad_stats_overhead(data, vocab: int, reps: int) -> float:
    shape = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=vocab, **shape))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(0)

    def step():
        x, y = get_batch(data, 8, shape["block_size"], "cpu", gen)
        _, loss = model(x, y)
        loss.backward()
        opt.step()

    def stats():
        grad_table(model)

    step()
    return median_time(stats, reps * 10) / median_time(step, reps * 10)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        source = str(WIKITEXT) if WIKITEXT.is_dir() else "demo"
        prep = prepare_workspace(source, ws)
        data, vocab = load_ids(ws.ids("train")), prep.vocab_size
        out = {"corpus": prep.source_kind, "torch": torch.__version__, "threads": torch.get_num_threads()}

        loop = median_time(lambda: get_batch_loop(data, 64, 256), reps * 20)
        vec = median_time(lambda: get_batch(data, 64, 256), reps * 20)
        out["get_batch_speedup"] = loop / vec

        debug = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
        small = {k: v for k, v in PRESETS["small"].items() if k in MODEL_FIELDS}
        out["train_tokens_per_s_debug"] = train_tokens_per_s(
            data, vocab, debug, PRESETS["debug"]["batch_size"], 50, reps
        )
        out["train_tokens_per_s_small"] = train_tokens_per_s(
            data, vocab, small, PRESETS["small"]["batch_size"], 10, reps
        )
        ref = dict(block_size=64, embedding_dim=128, num_heads=4, num_layers=4, expansion_factor=4, dropout=0.0)
        out["train_tokens_per_s_4x128_block64_batch12"] = train_tokens_per_s(data, vocab, ref, 12, 20, reps)

        out.update(kv_cache_speedup(max(2, reps // 2)))
        out["grad_stats_overhead"] = grad_stats_overhead(data, vocab, reps)

        # the whole check suite on the debug shape with a short trained checkpoint, 300 overfit steps
        Trainer(ws, TrainConfig.from_preset("debug", max_steps=100, eval_interval=50, device="cpu")).run()
        t0 = time.perf_counter()
        report = run_checks(CheckContext(CheckOptions(workspace=ws.root, device="cpu", overfit_steps=300)))
        out["check_suite_seconds"] = time.perf_counter() - t0
        out["check_suite_seconds_without_overfit"] = (
            out["check_suite_seconds"] - report.by_id()["single_batch_overfit"].duration_s
        )
        out["check_suite_failures"] = [r.id for r in report.failed]
    if args.json:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<44} {v:.4g}" if isinstance(v, float) else f"{k:<44} {v}")


if __name__ == "__main__":
    main()
