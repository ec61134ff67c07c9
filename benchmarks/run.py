"""Benchmarks measured side by side in one run (medians over repetitions).

    python benchmarks/run.py --json          # one JSON object
    python benchmarks/run.py --quick --json  # fewer repetitions (for a smoke run)

Uses ../shared/data/wikitext-2 when present (prepared into a temp workspace), else the embedded demo corpus.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minigpt.checks import CheckContext, CheckOptions, run_checks  # noqa: E402
from minigpt.data.batches import get_batch, load_ids  # noqa: E402
from minigpt.data.prepare import prepare_workspace  # noqa: E402
from minigpt.io.workspace import Workspace  # noqa: E402
from minigpt.model.gpt import MiniGPT, MiniGPTConfig  # noqa: E402
from minigpt.model.gradstats import grad_rows, grad_table, row_params, tensor_norms  # noqa: E402
from minigpt.sample.generate import SamplerSettings, generate  # noqa: E402
from minigpt.train.config import MODEL_FIELDS, TrainConfig, lr_at, make_optimizer  # noqa: E402
from minigpt.train.presets import PRESETS  # noqa: E402
from minigpt.train.trainer import Trainer  # noqa: E402

WIKITEXT = ROOT.parent / "shared" / "data" / "wikitext-2"


def get_batch_loop(data, batch_size, block_size):
    """The per-row Python loop `get_batch` replaced (the other side of `get_batch_speedup`)."""
    starts = torch.randint(len(data) - block_size, (batch_size,))
    x = torch.stack([data[i : i + block_size].long() for i in starts.tolist()])
    y = torch.stack([data[i + 1 : i + 1 + block_size].long() for i in starts.tolist()])
    return x, y


def timed_runs(fn, reps: int) -> list[float]:
    """Seconds of each of `reps` calls of `fn`, after one warm-up call."""
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def median_time(fn, reps: int) -> float:
    return statistics.median(timed_runs(fn, reps))


def train_tokens_per_s(key: str, data, vocab: int, shape: dict, batch: int, steps: int, reps: int) -> dict:
    """Training tokens per second: `key` the median over `reps` runs of `steps` steps, with its spread."""
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

    return _spread(key, [steps * batch * shape["block_size"] / t for t in timed_runs(run_steps, reps)])


def watch_overhead(data, vocab: int, reps: int) -> dict:
    """`minigpt.watch` at its default interval on the debug shape: the same nanoGPT-style step (batch,
    forward, backward, clip, AdamW, zero_grad) with and without the watch. The two loops take turns a
    step at a time (which goes first alternates), so load that comes and goes hits both alike; a pair
    of windows of `interval` (20) steps, each watched window holding one full reading, gives one time
    ratio. Two model instances of the same weights are not equally fast
    (up to 1.5 % apart, from where their memory landed), so the watch moves between them: four phases,
    A watched, B watched, A, B; the overhead is the geometric mean of the median ratio with A watched
    and with B watched, which cancels the instances' difference (`watch_overhead_by_model` shows both,
    `watch_overhead_quartiles` the spread of all pairs). The watch writes what it buffered about once
    a second, in one window of seven or so: a median of window ratios would leave that write out, so
    the windows that hold one are set aside and the writes' own time, as a share of the unwatched
    loop's time, is added (`watch_overhead_flush_share`)."""
    import minigpt

    shape = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
    batch, block, steps = PRESETS["debug"]["batch_size"], shape["block_size"], 20

    def setup():
        torch.manual_seed(0)
        model = MiniGPT(MiniGPTConfig(vocab_size=vocab, **shape))
        return model, torch.optim.AdamW(model.parameters(), lr=1e-3)

    def run_step(model, opt):
        t0 = time.perf_counter()
        x, y = get_batch(data, batch, block)
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    models = [setup(), setup()]
    by_model: list[list[float]] = [[], []]
    plain_times = []
    flushes = {"seconds": 0.0, "count": 0}
    flush_windows = 0
    plain_total = 0.0
    with tempfile.TemporaryDirectory() as run:
        for phase in range(4):
            watched, plain = models[phase % 2], models[1 - phase % 2]
            watch = minigpt.watch(*watched, workspace=Path(run) / str(phase))
            for _ in range(3 * steps):  # warm-up (and past the watch's first three full readings)
                run_step(*plain), run_step(*watched)
            watch.flush = _timed_flush(watch.flush, flushes)  # the watch's own calls go through it too
            for i in range(reps * 30 // 4):
                t_plain = t_watched = 0.0
                flushed = flushes["count"]
                for j in range(steps):
                    if (i + j) % 2 == 0:
                        t_plain += run_step(*plain)
                        t_watched += run_step(*watched)
                    else:
                        t_watched += run_step(*watched)
                        t_plain += run_step(*plain)
                plain_total += t_plain
                if flushes["count"] != flushed:  # its write is counted apart (below)
                    flush_windows += 1
                    continue
                by_model[phase % 2].append(t_watched / t_plain)
                plain_times.append(t_plain)
            del watch.flush
            watch.close()
    med_a, med_b = statistics.median(by_model[0]), statistics.median(by_model[1])
    q1, _, q3 = statistics.quantiles(by_model[0] + by_model[1], n=4)
    flush_share = flushes["seconds"] / plain_total
    return {
        "watch_overhead": math.sqrt(med_a * med_b) - 1 + flush_share,
        "watch_overhead_flush_share": round(flush_share, 5),
        "watch_overhead_quartiles": [round(q1 - 1, 4), round(q3 - 1, 4)],
        "watch_overhead_by_model": [round(med_a - 1, 4), round(med_b - 1, 4)],
        "watch_unwatched_step_ms": statistics.median(plain_times) / steps * 1e3,
        "watch_pairs": len(by_model[0]) + len(by_model[1]),
        "watch_flushes": flushes["count"],
        "watch_windows_with_a_flush": flush_windows,
    }


def _timed_flush(flush, into: dict):
    """`flush` that adds its time and count to `into`."""

    def timed() -> None:
        t0 = time.perf_counter()
        flush()
        into["seconds"] += time.perf_counter() - t0
        into["count"] += 1

    return timed


def _spread(key: str, values: list[float]) -> dict:
    """`key`: the median of `values`; `key_min_max`: their spread; `key_repetitions`: how many."""
    return {
        key: statistics.median(values),
        f"{key}_min_max": [round(min(values), 4), round(max(values), 4)],
        f"{key}_repetitions": len(values),
    }


def kv_cache_speedup(reps: int) -> dict:
    """Greedy generation of 250 tokens with the KV cache and with full recomputation, timed in
    adjacent pairs (alternating which goes first, so load that drifts hits both alike); the
    speedup is the median of the pairs' ratios, at least 5 pairs, with their min/max."""
    torch.manual_seed(0)
    cfg = MiniGPTConfig(vocab_size=137, block_size=256, embedding_dim=384, num_heads=6, num_layers=6, dropout=0.0)
    model = MiniGPT(cfg).eval()
    prompt = torch.randint(cfg.vocab_size, (5,)).tolist()
    settings = SamplerSettings(temperature=0.0, max_new_tokens=250)
    outs = {}

    def timed(cache: bool) -> float:
        t0 = time.perf_counter()
        outs[cache] = generate(model, prompt, settings, use_cache=cache)
        return time.perf_counter() - t0

    timed(True), timed(False)  # warm-up
    ratios, cached, full = [], [], []
    for i in range(max(5, reps)):
        if i % 2 == 0:
            c, f = timed(True), timed(False)
        else:
            f, c = timed(False), timed(True)
        ratios.append(f / c)
        cached.append(c)
        full.append(f)
    assert outs[True] == outs[False], "KV cache changed the greedy output"
    return {
        **_spread("kv_cache_speedup", ratios),
        "generate_tokens_per_s_cached": 250 / statistics.median(cached),
        "generate_tokens_per_s_recompute": 250 / statistics.median(full),
        "kv_cache_speedup_load_average": os.getloadavg()[0],
    }


def grad_stats_overhead(data, vocab: int, reps: int) -> dict:
    """What a step logged to grads.jsonl adds to `Trainer`'s step, as a share of a debug-preset step:
    the weight norms, the per-parameter norms in the step's one host transfer, the rows. (The
    gradient norms come from the clip, which every step computes.) `grad_table_share_of_step`: the
    checks' `grad_table`, which measures everything itself, for comparison."""
    shape = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
    torch.manual_seed(0)
    model = MiniGPT(MiniGPTConfig(vocab_size=vocab, **shape))
    opt = make_optimizer(model, TrainConfig(**shape))
    gen = torch.Generator().manual_seed(0)
    named = list(model.named_parameters())
    rows_of = row_params(named)  # once per run, as the trainer reads them
    held: dict = {}

    def step():  # the trainer's step: norms once, clip with them, one host transfer
        x, y = get_batch(data, 8, shape["block_size"], "cpu", gen)
        _, loss = model(x, y)
        loss.backward()
        with torch.no_grad():
            held["norms"] = torch.stack(tensor_norms([p.grad for _, p in named]))
            total = torch.linalg.vector_norm(held["norms"])
            torch.nn.utils.clip_grads_with_norm_([p for _, p in named], 1.0, total)
            held["head"] = torch.stack([loss.detach(), total])
            held["head"].tolist()
        opt.step()

    @torch.no_grad()
    def stats():  # what Trainer._clip_and_sync and _train_step add at a logged step
        weights = torch.stack(tensor_norms([p for _, p in named]))
        host = torch.cat([held["head"], held["norms"], weights]).tolist()[2:]
        grad_rows(rows_of, host[: len(named)], host[len(named) :])  # every parameter has a gradient here

    step()
    # repetitions of (10 steps, 10 stats): each a ratio of medians over adjacent blocks
    shares, table_shares, step_times, stats_times = [], [], [], []
    for _ in range(max(5, reps)):
        step_s, stats_s = median_time(step, 10), median_time(stats, 10)
        shares.append(stats_s / step_s)
        table_shares.append(median_time(lambda: grad_table(model), 10) / step_s)
        step_times.append(step_s)
        stats_times.append(stats_s)
    return {
        **_spread("grad_stats_overhead", shares),
        "grad_stats_step_ms": statistics.median(step_times) * 1e3,  # the share's two sides, so load shows
        "grad_stats_logged_us": statistics.median(stats_times) * 1e6,
        "grad_table_share_of_step": statistics.median(table_shares),
        "grad_stats_overhead_load_average": os.getloadavg()[0],
    }


class RecipeGPT(torch.nn.Module):
    """nanoGPT's model, written plainly (the recipe side of `train_ratio_vs_recipe`)."""

    def __init__(self, vocab: int, block: int, width: int, heads: int, layers: int):
        super().__init__()
        nn = torch.nn
        self.heads = heads
        self.wte, self.wpe = nn.Embedding(vocab, width), nn.Embedding(block, width)
        self.h = nn.ModuleList(
            nn.ModuleDict(
                dict(
                    ln_1=nn.LayerNorm(width),
                    c_attn=nn.Linear(width, 3 * width),
                    c_proj=nn.Linear(width, width),
                    ln_2=nn.LayerNorm(width),
                    c_fc=nn.Linear(width, 4 * width),
                    gelu=nn.GELU(),
                    mlp_proj=nn.Linear(4 * width, width),
                )
            )
            for _ in range(layers)
        )
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)
        self.wte.weight = self.lm_head.weight
        for p in self.parameters():
            if p.dim() >= 2:
                torch.nn.init.normal_(p, std=0.02)

    def forward(self, idx, targets):
        B, T = idx.shape
        x = self.wte(idx) + self.wpe(torch.arange(T))
        for b in self.h:
            C = x.size(-1)
            q, k, v = b.c_attn(b.ln_1(x)).split(C, dim=2)
            q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in (q, k, v))
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + b.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))
            x = x + b.mlp_proj(b.gelu(b.c_fc(b.ln_2(x))))
        logits = self.lm_head(self.ln_f(x))
        return logits, torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def recipe_run(data, vocab: int, cfg: TrainConfig, out_dir: Path, evaluate: bool) -> float:
    """The nanoGPT training loop written plainly: random-offset batches, AdamW with decay groups,
    grad clipping, `loss.item()` at each log step, `estimate_loss` and `torch.save` at each eval.
    Returns tokens per second over `cfg.max_steps` steps."""
    B, T = cfg.batch_size, cfg.block_size
    torch.manual_seed(cfg.seed)
    model = RecipeGPT(vocab, T, cfg.embedding_dim, cfg.num_heads, cfg.num_layers)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(0.9, cfg.beta2))  # fused only on CUDA in nanoGPT
    data = data.long()

    def batch():
        ix = torch.randint(len(data) - T, (B,))
        return torch.stack([data[i : i + T] for i in ix]), torch.stack([data[i + 1 : i + 1 + T] for i in ix])

    @torch.no_grad()
    def estimate_loss():
        model.eval()
        losses = torch.zeros(cfg.eval_batches)
        for k in range(cfg.eval_batches):
            losses[k] = model(*batch())[1].item()
        model.train()
        return losses.mean().item()

    best, log = float("inf"), []
    t0 = time.perf_counter()
    for it in range(cfg.max_steps):
        lr = lr_at(it, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = batch()
        _, loss = model(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        step = it + 1
        if step % cfg.log_interval == 0:
            log.append((step, loss.item()))
        if evaluate and (step % cfg.eval_interval == 0 or step == cfg.max_steps):
            val = (estimate_loss(), estimate_loss())[1]  # train and val, as nanoGPT
            if val < best:
                best = val
                torch.save(
                    {"model": model.state_dict(), "optimizer": opt.state_dict(), "iter_num": step}, out_dir / "ckpt.pt"
                )
    return cfg.max_steps * B * T / (time.perf_counter() - t0)


def ours_run(ws: Workspace, cfg: TrainConfig, evaluate: bool) -> float:
    """`Trainer.run` as `minigpt train` runs it. evaluate=False: a run with no evaluation before its last
    step, timed from the end of step 10 to the end of the step before the last (steps only)."""
    if evaluate:
        t0 = time.perf_counter()
        Trainer(ws, cfg).run()
        return cfg.max_steps * cfg.batch_size * cfg.block_size / (time.perf_counter() - t0)
    cfg = replace(cfg, eval_interval=10**6)
    marks: dict[int, float] = {}
    first, last = 10, cfg.max_steps - 1
    trainer = Trainer(ws, cfg)
    trainer.register_callback(
        "on_step_end", lambda r: r["step"] in (first, last) and marks.setdefault(r["step"], time.perf_counter())
    )
    trainer.run()
    return (last - first) * cfg.batch_size * cfg.block_size / (marks[last] - marks[first])


def train_vs_recipe(ws: Workspace, data, vocab: int, pairs: int = 3) -> dict:
    """Ours / recipe tokens per second on the debug preset, median over `pairs` interleaved pairs
    (ours then recipe, so a neighbour's load hits both alike). `train_ratio_vs_recipe_debug`: whole
    200-step runs, evaluation and checkpoints included; `train_step_ratio_vs_recipe_debug`: steps only."""
    cfg = TrainConfig.from_preset("debug", device="cpu")
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # the first optimizer imports torch._dynamo (seconds)
    out: dict = {}
    for key, evaluate in (("train_ratio_vs_recipe_debug", True), ("train_step_ratio_vs_recipe_debug", False)):
        ratios, ours, recipe = [], [], []
        for _ in range(pairs):
            with tempfile.TemporaryDirectory() as tmp:
                ours.append(ours_run(ws, cfg, evaluate))
                recipe.append(recipe_run(data, vocab, cfg, Path(tmp), evaluate))
            ratios.append(ours[-1] / recipe[-1])
        out.update(_spread(key, ratios))
        out[key.replace("ratio_vs_recipe", "tokens_per_s_ours")] = statistics.median(ours)
        out[key.replace("ratio_vs_recipe", "tokens_per_s_recipe")] = statistics.median(recipe)
    out["train_vs_recipe_load_average"] = os.getloadavg()[0]
    return out


def _val_windows(ws: Workspace, cfg: TrainConfig):
    """The validation windows `Trainer.evaluate` scores (same rows, same generator): both sides are
    judged on exactly the same text."""
    gen = torch.Generator().manual_seed(cfg.seed + 1)
    return get_batch(load_ids(ws.ids("val")).long(), cfg.batch_size * cfg.eval_batches, cfg.block_size, "cpu", gen)


@torch.no_grad()
def _val_loss(model, windows, chunk: int = 64) -> float:
    model.eval()
    x, y = windows
    total = sum(
        model(x[i : i + chunk], y[i : i + chunk])[1].item() * len(x[i : i + chunk]) for i in range(0, len(x), chunk)
    )
    model.train()
    return total / len(x)


def recipe_timed(ws: Workspace, data, vocab: int, budget_s: float, shape: dict) -> dict:
    """The minimal nanoGPT-style recipe, time-boxed the way a careful user would: time steps 10-60
    and one evaluation, set max_iters to fill the budget (its evaluations every 250 steps counted), AdamW (decay on 2-D
    weights, betas 0.9/0.99), cosine from 1e-3 to 1e-4 after 100 warm-up steps, clip 1.0, its usual
    batch of 64; the best validation loss over its evaluations on the trainer's own windows."""
    cfg = TrainConfig(**shape, batch_size=64, learning_rate=1e-3, warmup_steps=100, eval_interval=250, device="cpu")
    B, T = cfg.batch_size, cfg.block_size
    torch.manual_seed(cfg.seed)
    model = RecipeGPT(vocab, T, cfg.embedding_dim, cfg.num_heads, cfg.num_layers)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    opt = torch.optim.AdamW(groups, lr=cfg.learning_rate, betas=(0.9, cfg.beta2))
    data = data.long()
    windows = _val_windows(ws, TrainConfig.from_preset("small"))  # the windows ours is scored on

    def batch():
        ix = torch.randint(len(data) - T, (B,))
        return torch.stack([data[i : i + T] for i in ix]), torch.stack([data[i + 1 : i + 1 + T] for i in ix])

    t0 = time.perf_counter()
    best, it, eval_s, t10 = float("inf"), 0, 0.0, 0.0
    while it < cfg.max_steps:
        lr = lr_at(it, cfg)
        for g in opt.param_groups:
            g["lr"] = lr
        _, loss = model(*batch())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        it += 1
        if it == 10:
            t10 = time.perf_counter()  # the first steps are slower (allocation): the rate is timed after them
        if it == 60:  # the user's estimate: this rate, with an evaluation every eval_interval steps
            t_e = time.perf_counter()
            _val_loss(model, windows)
            eval_s = time.perf_counter() - t_e
            step_s = (t_e - t10) / 50
            left = budget_s - (time.perf_counter() - t0) - eval_s
            cfg.max_steps = it + max(1, int(left / (step_s + eval_s / cfg.eval_interval)))
        if it % cfg.eval_interval == 0 or it == cfg.max_steps:
            best = min(best, _val_loss(model, windows))
    return {"best_val_loss": best, "steps": it, "seconds": time.perf_counter() - t0}


def ours_timed(ws: Workspace, budget_s: float, preset: str = "small") -> dict:
    """`minigpt train --preset small --time BUDGET` as the CLI runs it."""
    cfg = TrainConfig.from_preset(preset, device="cpu")
    trainer = Trainer(ws, cfg, time_budget_s=budget_s)
    summary = trainer.run()
    return {"best_val_loss": summary["best_val_loss"], "steps": summary["steps"], "seconds": summary["seconds"]}


def val_loss_vs_recipe_equal_time(ws: Workspace, data, vocab: int, budget_s: float) -> dict:
    """`val_loss_vs_recipe_equal_time`: best validation loss of `minigpt train --preset small --time
    B` minus the time-boxed recipe's at the same model shape and budget, on the same windows
    (negative: ours is better). One pair, ours first; the load average is printed beside it."""
    shape = {k: v for k, v in PRESETS["small"].items() if k in MODEL_FIELDS}
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # the first optimizer imports torch._dynamo
    ours = ours_timed(ws, budget_s)
    recipe = recipe_timed(ws, data, vocab, budget_s, shape)
    return {
        "val_loss_vs_recipe_equal_time": ours["best_val_loss"] - recipe["best_val_loss"],
        "equal_time_budget_s": budget_s,
        "equal_time_ours": ours,
        "equal_time_recipe": recipe,
        "equal_time_load_average": os.getloadavg()[0],
    }


def _measure_in_subprocess(code: str) -> dict:
    """Run `code` (which fills a dict `out`) in a fresh interpreter and return `out` with the
    child's own peak RSS in MB.

    Linux's ru_maxrss keeps the peak of the image before exec, which is this (torch-sized) parent
    forked, so the child reads VmHWM (its own address space's peak) where /proc has it, and
    resource.getrusage elsewhere."""
    import subprocess

    prelude = "import json, resource, time\n"
    epilogue = (
        "\ntry:\n"
        "    hwm = [line for line in open('/proc/self/status') if line.startswith('VmHWM:')][0]\n"
        "    out['peak_rss_mb'] = int(hwm.split()[1]) / 1024\n"
        "except (OSError, IndexError):\n"
        "    out['peak_rss_mb'] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024\n"
        "print(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", prelude + code + epilogue], capture_output=True, text=True, cwd=ROOT, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def prepare_memory(size_mb: int) -> dict:
    """`prepare` on a generated single-file corpus of `size_mb` MB: WikiText-2 (or demo) lines
    repeated, plus 200 CJK characters so the vocabulary passes 256 and IDs are int16 (the
    larger of the two dtypes a character corpus gets). Peak RSS and seconds, in a subprocess."""
    from minigpt.data.corpus import demo_text

    base = (WIKITEXT / "wiki.train.tokens").read_text(encoding="utf-8") if WIKITEXT.is_dir() else demo_text()
    unit = (base + "".join(chr(0x4E00 + i) for i in range(200)) + "\n").encode("utf-8")
    with tempfile.TemporaryDirectory() as tmp:
        corpus = Path(tmp) / "corpus.txt"
        with open(corpus, "wb") as fh:
            for _ in range(-(-size_mb * 2**20 // len(unit))):
                fh.write(unit)
        code = (
            "from minigpt.data.prepare import prepare_workspace\n"
            "t0 = time.perf_counter()\n"
            f"s = prepare_workspace({str(corpus)!r}, {str(Path(tmp) / 'ws')!r})\n"
            "out = {'seconds': time.perf_counter() - t0, 'dtype': s.ids_dtype}\n"
        )
        measured = _measure_in_subprocess(code)
        mb = corpus.stat().st_size / 2**20
    return {
        f"prepare_{size_mb}mb_peak_rss_mb": measured["peak_rss_mb"],
        "prepare_seconds_per_100mb": measured["seconds"] * 100 / mb,
        "prepare_ids_dtype": measured["dtype"],
    }


def metrics_read(size_mb: int) -> dict:
    """`read_metrics` on a generated metrics.jsonl of `size_mb` MB in `minigpt train`'s line
    format (an eval line every 50 steps). Seconds and peak RSS, in a subprocess."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        with open(path, "w", encoding="utf-8") as fh:
            step, written = 0, 0
            while written < size_mb * 2**20:
                lines = []
                for _ in range(10_000):
                    step += 1
                    record = {
                        "step": step,
                        "train_loss": 4.2 / (1 + step * 1e-4),
                        "lr": 3e-4,
                        "grad_norm": 0.5 + (step % 7) * 0.01,
                        "tokens_per_s": 123456.789 + step % 13,
                        "elapsed_s": step * 0.0123,
                        "time": 1.7645e9 + step * 0.0123,
                    }
                    if step % 50 == 0:
                        record.update(val_loss=record["train_loss"] + 0.05, eval_train_loss=record["train_loss"])
                    lines.append(json.dumps(record))
                block = "\n".join(lines) + "\n"
                fh.write(block)
                written += len(block)
        code = (
            "from minigpt.logs.metrics import read_metrics\n"
            "t0 = time.perf_counter()\n"
            f"log = read_metrics({str(path)!r})\n"
            "out = {'seconds': time.perf_counter() - t0, 'points': len(log.points)}\n"
        )
        measured = _measure_in_subprocess(code)
    return {
        f"metrics_read_{size_mb}mb_seconds": measured["seconds"],
        f"metrics_read_{size_mb}mb_peak_rss_mb": measured["peak_rss_mb"],
        f"metrics_read_{size_mb}mb_points": measured["points"],
    }


def _p95(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


def tui_latency(root: Path, reps: int) -> dict:
    """Key-to-frame latency of minigpt-tui in-process (ms): from a key event posted to the app to
    the first frame drawn after its effect (call_after_refresh), not Pilot's press (which waits
    for the whole process to go idle, background threads included). The first training confirm
    dialog opens while the checks still run (torch busy in a worker: what a user meets on
    opening); pane switches are the p95 over cycles through the seven panes, checks done."""
    import asyncio

    from textual import events
    from textual.widgets import TabbedContent

    from minigpt_tui.app import MiniGPTApp
    from minigpt_tui.screens.confirm import ConfirmScreen
    from minigpt_tui.workbench import PANES

    async def key_to_frame(app, key: str, done) -> float:
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        app.post_message(events.Key(key, key))
        while not done():
            await asyncio.sleep(0.001)
        drawn = loop.create_future()
        app.call_after_refresh(lambda: drawn.set_result(time.perf_counter()))
        return 1000 * (await drawn - t0)

    async def measure() -> dict:
        app = MiniGPTApp(root, device="cpu", skip_overfit=True)
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("6")
            await pilot.pause()
            # the workspace holds a run: `s` asks before starting (answered no)
            confirm_ms = await key_to_frame(app, "s", lambda: isinstance(app.screen, ConfirmScreen))
            await pilot.press("n")
            while app.session.last_report is None:
                await pilot.pause(0.05)
            tabs = app.query_one(TabbedContent)
            switches = []
            for _ in range(reps):
                for key, (pane_id, _) in zip("1234567", PANES):
                    switches.append(await key_to_frame(app, key, lambda p=pane_id: tabs.active == p))
            await pilot.press("q")
        return {"first_confirm_dialog_ms": confirm_ms, "pane_switch_ms_p95": _p95(switches)}

    return asyncio.run(measure())


def check_suite_with_a_busy_neighbour(root: Path) -> dict:
    """The check suite (300 overfit steps allowed, early stop on) while other processes keep every
    core busy, with the threads the policy picks on a busy machine (1) and with torch's default.
    Each run is timed once: the neighbour makes repeats meaningless; compare with the quiet run."""
    import subprocess
    import sys

    from minigpt.threads import usable_cpus

    def suite(threads: int) -> float:
        torch.set_num_threads(threads)
        t0 = time.perf_counter()
        run_checks(CheckContext(CheckOptions(workspace=root, device="cpu", overfit_steps=300)))
        return time.perf_counter() - t0

    default = torch.get_num_threads()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in usable_cpus()]
    try:
        time.sleep(1.0)
        out = {
            "check_suite_seconds_busy_neighbour_policy_1_thread": suite(1),
            f"check_suite_seconds_busy_neighbour_{default}_threads": suite(default),
        }
    finally:
        for proc in busy:
            proc.kill()
        torch.set_num_threads(default)
    return out


BARE_APP = Path(__file__).with_name("bare_app.py")
SWITCH_CYCLES_PER_REP = 5  # cycles of seven pane keys per repetition, per app
CLOCK = re.compile(r"\b\d\d:\d\d\b")  # the inspector's header shows the time: a minute ticking over is no frame


def _screen(session: str) -> str:
    done = subprocess.run(["tmux", "capture-pane", "-p", "-t", session], capture_output=True, text=True)
    return CLOCK.sub("", done.stdout)


def _tab_bar_drawn(screen: str) -> bool:
    return "1 Checks" in screen or "Checks" in screen and "Sampler" in screen


def _tmux_start(session: str, command: str) -> float:
    """Start `command` in a detached 80x24 tmux session; returns the time just before. Tried again
    when tmux answers "server exited unexpectedly": killing the last session makes its server exit,
    and a session started in that moment reaches the dying server."""
    for _attempt in range(3):
        t0 = time.perf_counter()
        argv = ["tmux", "new-session", "-d", "-s", session, "-x", "80", "-y", "24", command]
        started = subprocess.run(argv, capture_output=True, text=True)
        if started.returncode == 0:
            return t0
        time.sleep(0.2)
    raise RuntimeError(f"tmux could not start {session}: {started.stderr.strip()}")


def _tmux_first_frame(command: str, session: str) -> float | None:
    """Seconds from starting `command` in tmux to the tab bar on its screen (polled every 10 ms);
    the session is killed at once."""
    t0 = _tmux_start(session, command)
    try:
        while time.perf_counter() - t0 < 30:
            if _tab_bar_drawn(_screen(session)):
                return time.perf_counter() - t0
            time.sleep(0.01)
        return None
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)


def _still_screen(session: str, still_s: float = 0.15, limit_s: float = 5.0) -> str:
    """The screen once it has not changed for `still_s` (or after `limit_s`)."""
    t0 = changed = time.perf_counter()
    screen = _screen(session)
    while time.perf_counter() - t0 < limit_s:
        time.sleep(0.02)
        now = _screen(session)
        if now != screen:
            screen, changed = now, time.perf_counter()
        elif time.perf_counter() - changed >= still_s:
            break
    return screen


def _content(screen: str) -> list[str]:
    """The rows below the tab bar and its underline, less the last (the inspector's footer)."""
    lines = screen.splitlines()
    bar = next((i for i, line in enumerate(lines) if _tab_bar_drawn(line)), 0)
    return lines[bar + 2 : -1]


def _key_to_changed_screen_ms(session: str, key: str) -> tuple[float | None, float | None]:
    """From `tmux send-keys` to the first capture that differs from the still screen before it,
    and to the first whose pane content (below the tab bar) differs (ms; None: not within 10 s)."""
    before = _still_screen(session)
    t0 = time.perf_counter()
    subprocess.run(["tmux", "send-keys", "-t", session, key], check=True)
    first = None
    while time.perf_counter() - t0 < 10:
        now = _screen(session)
        if now != before:
            first = first or 1000 * (time.perf_counter() - t0)
            if _content(now) != _content(before):
                return first, 1000 * (time.perf_counter() - t0)
        time.sleep(0.002)
    return first, None


def _switch_cycle(session: str) -> list[tuple[str, float | None, float | None]]:
    """One press of each pane key (2..7, then 1): (key, ms to the first changed screen, ms to the
    changed pane content), as `_key_to_changed_screen_ms` times them."""
    return [(key, *_key_to_changed_screen_ms(session, key)) for key in "2345671"]


def _inspector_command(root: Path) -> str:
    exe = Path(sys.executable).with_name("minigpt-tui")
    return f"{shlex.quote(str(exe))} --workspace {shlex.quote(str(root))} --skip-overfit"


def first_frame_seconds(root: Path, reps: int) -> dict:
    """From starting `minigpt-tui` in an 80x24 tmux window to its first frame on the screen (the
    tab bar drawn), median of `reps` starts; each is killed at once. Needs tmux."""
    if shutil.which("tmux") is None:
        return {"first_frame_seconds": None}
    command = _inspector_command(root)
    times = [_tmux_first_frame(command, f"bench-first-frame-{os.getpid()}-{i}") for i in range(reps)]
    measured = [t for t in times if t is not None]
    return _spread("first_frame_seconds", measured) if measured else {"first_frame_seconds": None}


def _start_training_from_the_ui(session: str, root: Path) -> bool:
    """Press `t` in the inspector (and `y` when it asks before moving the last run aside); True once
    the training subprocess has written a step of its own to the workspace's metrics log."""
    metrics = root / "logs" / "metrics.jsonl"
    before = metrics.stat().st_mtime_ns if metrics.exists() else 0
    subprocess.run(["tmux", "send-keys", "-t", session, "t"], check=True)
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < 30:
        if "(y)" in _screen(session):
            subprocess.run(["tmux", "send-keys", "-t", session, "y"], check=True)
            break
        if metrics.exists() and metrics.stat().st_mtime_ns != before:
            break
        time.sleep(0.1)
    while time.perf_counter() - t0 < 60:
        if metrics.exists() and metrics.stat().st_mtime_ns != before and metrics.stat().st_size > 0:
            return True
        time.sleep(0.1)
    return False


def _stop_training(root: Path) -> None:
    """The UI's training subprocess runs in a session of its own: stop it by its workspace path."""
    subprocess.run(["pkill", "-INT", "-f", f"train --workspace {root}"], capture_output=True)
    time.sleep(1.0)
    subprocess.run(["pkill", "-KILL", "-f", f"train --workspace {root}"], capture_output=True)


def ui_vs_bare(root: Path, reps: int, neighbour: bool = False, training: bool = False) -> dict:
    """minigpt-tui on `root` and the bare seven-tab Textual app (benchmarks/bare_app.py), measured
    the same way in 80x24 tmux windows. First frame: process start to the tab bar on the screen,
    `reps` starts each, alternating which app goes first. Pane switch: `tmux send-keys` of a pane
    key (2..7, 1) to the first screen capture that differs from the still screen before it; both
    apps open side by side (the inspector once its checks are done), 5 x `reps` cycles of seven keys,
    one cycle per app in turn; `pane_switch_content_*`: to the first capture whose rows below the
    tab bar differ (the first changed screen is often the tab underline alone). Ratios:
    inspector / bare, the switch ratios on the p95; `pane_switch_ms_first_by_key_*` and `..._median_by_key_*`: the
    first switch to each pane (key 1..7; it draws the pane) and the median, so a slow p95 names its pane.
    neighbour=True: a CPU-bound process on every core throughout (keys end in `_busy_neighbour`).
    training=True: a training run started from the inspector's UI (`t`, with the workspace's own
    settings and default threads) goes on through every switch of both apps, so both meet the same
    load and the inspector also follows the run (keys end in `_training`; no first-frame figures)."""
    if shutil.which("tmux") is None:
        return {"ui_vs_bare": None}
    from minigpt.threads import usable_cpus

    commands = {
        "inspector": _inspector_command(root),
        "bare": f"{shlex.quote(sys.executable)} {shlex.quote(str(BARE_APP))}",
    }
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in usable_cpus()] if neighbour else []
    first: dict[str, list[float]] = {"inspector": [], "bare": []}
    switches: dict[str, list[float]] = {"inspector": [], "bare": []}
    contents: dict[str, list[float]] = {"inspector": [], "bare": []}  # key to the pane's content drawn
    lost = {"inspector": 0, "bare": 0}
    by_key: dict[str, dict[str, list[float]]] = {"inspector": {}, "bare": {}}  # which pane is slow
    sessions = {name: f"bench-{name}-{os.getpid()}" for name in commands}
    try:
        time.sleep(1.0 if busy else 0)
        for i in range(0 if training else reps):
            for name in ("inspector", "bare") if i % 2 == 0 else ("bare", "inspector"):
                t = _tmux_first_frame(commands[name], f"{sessions[name]}-first-{i}")
                if t is not None:
                    first[name].append(t)
        for name, command in commands.items():
            _tmux_start(sessions[name], command)
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 180 and "done in" not in _screen(sessions["inspector"]):
            time.sleep(0.1)  # the checks finished: what a user switches panes in
        if training and not _start_training_from_the_ui(sessions["inspector"], root):
            return {"ui_vs_bare_training": None, "ui_vs_bare_training_error": "the UI's training run did not start"}
        for i in range(SWITCH_CYCLES_PER_REP * reps):  # enough presses that a p95 is not one slow frame
            for name in ("inspector", "bare") if i % 2 == 0 else ("bare", "inspector"):
                for key, ms, content_ms in _switch_cycle(sessions[name]):
                    if ms is None:
                        lost[name] += 1
                    else:
                        switches[name].append(ms)
                        by_key[name].setdefault(key, []).append(ms)
                    if content_ms is not None:
                        contents[name].append(content_ms)
    finally:
        for session in sessions.values():
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
        for proc in busy:
            proc.kill()
            proc.wait()
        if training:
            _stop_training(root)
    suffix = "_busy_neighbour" if neighbour else "_training" if training else ""
    out: dict = {}
    for name in commands:
        if first[name]:
            out.update({k + f"_{name}{suffix}": v for k, v in _spread("first_frame_seconds", first[name]).items()})
        if switches[name]:
            out[f"pane_switch_ms_p95_tmux_{name}{suffix}"] = _p95(switches[name])
            out[f"pane_switch_ms_median_tmux_{name}{suffix}"] = statistics.median(switches[name])
            out[f"pane_switch_ms_min_max_tmux_{name}{suffix}"] = [
                round(min(switches[name]), 1),
                round(max(switches[name]), 1),
            ]
        if contents[name]:
            out[f"pane_switch_content_ms_p95_tmux_{name}{suffix}"] = _p95(contents[name])
            out[f"pane_switch_content_ms_median_tmux_{name}{suffix}"] = statistics.median(contents[name])
        keys = sorted(by_key[name].items())
        out[f"pane_switch_ms_first_by_key_{name}{suffix}"] = {k: round(v[0], 1) for k, v in keys}
        out[f"pane_switch_ms_median_by_key_{name}{suffix}"] = {k: round(statistics.median(v), 1) for k, v in keys}
        out[f"pane_switch_presses_{name}{suffix}"] = len(switches[name])
        out[f"pane_switch_lost_presses_{name}{suffix}"] = lost[name]
    if first["inspector"] and first["bare"]:
        out[f"first_frame_ratio_vs_bare{suffix}"] = statistics.median(first["inspector"]) / statistics.median(
            first["bare"]
        )
    if switches["inspector"] and switches["bare"]:
        out[f"pane_switch_ratio_vs_bare{suffix}"] = _p95(switches["inspector"]) / _p95(switches["bare"])
        out[f"pane_switch_median_ratio_vs_bare{suffix}"] = statistics.median(switches["inspector"]) / statistics.median(
            switches["bare"]
        )
    if contents["inspector"] and contents["bare"]:
        out[f"pane_switch_content_ratio_vs_bare{suffix}"] = _p95(contents["inspector"]) / _p95(contents["bare"])
    out[f"ui_vs_bare_load_average{suffix}"] = os.getloadavg()[0]
    return out


COMPAT_OFF = Path(__file__).with_name("compat_off.py")
COMPAT_SHORTCUTS = ["line_keeping"]  # compat_off.OFF


def compat_gains(root: Path, reps: int, shortcuts: list[str] = COMPAT_SHORTCUTS) -> dict:
    """What each shortcut of `minigpt_tui/textual_compat.py` earns: the inspector as it is, the
    inspector with one shortcut switched off (`benchmarks/compat_off.py`) for each of `shortcuts`,
    and the bare app, all open side by side in 80x24 tmux windows (the inspectors once their checks
    are done); 3 x `reps` cycles of the seven pane keys per app, the apps taking turns in a rotating
    order. `compat_gain_<name>`: the p95 switch ratio to the bare app without the shortcut minus the
    ratio with it; `compat_gain_share_<name>`: that gain over the ratio with it (a shortcut is kept
    in textual_compat.py when it earns at least 10 %)."""
    if shutil.which("tmux") is None:
        return {"compat_gains": None}
    workspace = f"--workspace {shlex.quote(str(root))} --skip-overfit"
    commands = {"inspector": _inspector_command(root)}
    for name in shortcuts:
        off = f"env COMPAT_OFF={name} {shlex.quote(sys.executable)} {shlex.quote(str(COMPAT_OFF))}"
        commands[f"without_{name}"] = f"{off} {workspace}"
    commands["bare"] = f"{shlex.quote(sys.executable)} {shlex.quote(str(BARE_APP))}"
    names = list(commands)
    sessions = {name: f"bench-compat-{name}-{os.getpid()}" for name in names}
    switches: dict[str, list[float]] = {name: [] for name in names}
    lost = dict.fromkeys(names, 0)
    try:
        for name in names:
            _tmux_start(sessions[name], commands[name])
        t0 = time.perf_counter()
        for name in names[:-1]:
            while time.perf_counter() - t0 < 240 and "done in" not in _screen(sessions[name]):
                time.sleep(0.1)
        for i in range(3 * reps):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                for _key, ms, _content_ms in _switch_cycle(sessions[name]):
                    if ms is None:
                        lost[name] += 1
                    else:
                        switches[name].append(ms)
    finally:
        for session in sessions.values():
            subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    if not all(switches.values()):
        return {"compat_gains": None, "compat_lost_presses": lost}
    p95 = {name: _p95(values) for name, values in switches.items()}
    ratio = {name: p95[name] / p95["bare"] for name in names}
    out: dict = {f"compat_pane_switch_ms_p95_{name}": p95[name] for name in names}
    out.update({f"compat_pane_switch_ratio_vs_bare_{name}": ratio[name] for name in names[:-1]})
    for name in shortcuts:
        gain = ratio[f"without_{name}"] - ratio["inspector"]
        out[f"compat_gain_{name}"] = gain
        out[f"compat_gain_share_{name}"] = gain / ratio["inspector"]
    out["compat_presses_per_app"] = len(switches["bare"])
    out["compat_lost_presses"] = lost
    out["compat_load_average"] = os.getloadavg()[0]
    return out


def demo_build_seconds(tmp: Path) -> dict:
    """The demo workspace from nothing (prepare the embedded corpus + the UI's training run), by the
    function `minigpt-tui --demo` calls, in a fresh folder."""
    from minigpt_tui.demo import DEMO_STEPS, build_demo

    t0 = time.perf_counter()
    build_demo(tmp / "demo", progress=lambda stage, fraction: None, cancelled=lambda: False)
    return {"demo_build_seconds": time.perf_counter() - t0, "demo_steps": DEMO_STEPS}


ONLY = [
    "val_loss_vs_recipe_equal_time",
    "watch_overhead",
    "ui_vs_bare",
    "ui_vs_bare_busy_neighbour",
    "ui_vs_bare_training",
    "kv_cache_speedup",
    "grad_stats_overhead",
    "metrics_stream",
    "tensorboard_read",
    "compat_gains",
]


def train_briefly(ws: Workspace) -> None:
    """A short trained checkpoint and metrics log: what the check suite and the UI figures open."""
    Trainer(ws, TrainConfig.from_preset("debug", max_steps=100, eval_interval=50, device="cpu")).run()


def train_long_settings(ws: Workspace) -> None:
    """A short trained checkpoint whose settings ask for a long run (100,000 steps, stopped here
    after 100): what the UI's `t` then trains for the length of a benchmark."""
    trainer = Trainer(ws, TrainConfig.from_preset("debug", max_steps=100_000, eval_interval=50, device="cpu"))
    trainer.register_callback("on_step_end", lambda record: record["step"] >= 100 and trainer.request_stop())
    trainer.run()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--only", choices=ONLY, help="measure just this figure (and the load average)")
    parser.add_argument(
        "--budget", type=float, default=480.0, help="seconds per side of val_loss_vs_recipe_equal_time (default 480)"
    )
    args = parser.parse_args()
    reps = 3 if args.quick else 7
    torch.set_num_threads(max(1, torch.get_num_threads()))
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(tmp)
        source = str(WIKITEXT) if WIKITEXT.is_dir() else "demo"
        prep = prepare_workspace(source, ws)
        data, vocab = load_ids(ws.ids("train")), prep.vocab_size
        out = {"corpus": prep.source_kind, "torch": torch.__version__, "threads": torch.get_num_threads()}
        out["load_average_1min"] = os.getloadavg()[0]
        if args.only is not None:
            if args.only == "ui_vs_bare_training":
                train_long_settings(ws)
                out.update(ui_vs_bare(ws.root, reps, training=True))
            elif args.only == "compat_gains":
                train_briefly(ws)
                out.update(compat_gains(ws.root, reps))
            elif args.only.startswith("ui_vs_bare"):
                train_briefly(ws)
                out.update(ui_vs_bare(ws.root, reps, neighbour=args.only.endswith("busy_neighbour")))
            elif args.only == "val_loss_vs_recipe_equal_time":
                out.update(val_loss_vs_recipe_equal_time(ws, data, vocab, args.budget))
            elif args.only == "watch_overhead":
                out.update(watch_overhead(data, vocab, reps))
            elif args.only == "kv_cache_speedup":
                out.update(kv_cache_speedup(reps))
            elif args.only == "grad_stats_overhead":
                out.update(grad_stats_overhead(data, vocab, reps))
            elif args.only == "metrics_stream":  # the check on a long metrics log (benchmarks/metrics_stream.py)
                from metrics_stream import DEFAULT_LINES, measure

                out["metrics_stream"] = [measure(n) for n in DEFAULT_LINES]
            elif args.only == "tensorboard_read":  # a 50 MB TensorBoard file (benchmarks/tensorboard_read.py)
                from tensorboard_read import measure as measure_tensorboard

                out["tensorboard_read"] = measure_tensorboard()
            out["load_average_1min_at_end"] = os.getloadavg()[0]
            emit(out, args.json)
            return

        # `reps` ratios, each of two medians of 20 calls measured one after the other
        batch_ratios = [
            median_time(lambda: get_batch_loop(data, 64, 256), 20) / median_time(lambda: get_batch(data, 64, 256), 20)
            for _ in range(reps)
        ]
        out.update(_spread("get_batch_speedup", batch_ratios))

        debug = {k: v for k, v in PRESETS["debug"].items() if k in MODEL_FIELDS}
        small = {k: v for k, v in PRESETS["small"].items() if k in MODEL_FIELDS}
        out.update(
            train_tokens_per_s("train_tokens_per_s_debug", data, vocab, debug, PRESETS["debug"]["batch_size"], 50, reps)
        )
        out.update(
            train_tokens_per_s("train_tokens_per_s_small", data, vocab, small, PRESETS["small"]["batch_size"], 10, reps)
        )
        ref = dict(block_size=64, embedding_dim=128, num_heads=4, num_layers=4, expansion_factor=4, dropout=0.0)
        out.update(train_tokens_per_s("train_tokens_per_s_4x128_block64_batch12", data, vocab, ref, 12, 20, reps))

        out.update(kv_cache_speedup(reps))
        out.update(grad_stats_overhead(data, vocab, reps))
        out.update(watch_overhead(data, vocab, reps))
        out.update(train_vs_recipe(ws, data, vocab))
        out.update(val_loss_vs_recipe_equal_time(ws, data, vocab, args.budget))

        # the whole check suite on the debug shape with a short trained checkpoint, 300 overfit steps
        train_briefly(ws)
        t0 = time.perf_counter()
        report = run_checks(CheckContext(CheckOptions(workspace=ws.root, device="cpu", overfit_steps=300)))
        out["check_suite_seconds"] = time.perf_counter() - t0
        out["check_suite_seconds_without_overfit"] = (
            out["check_suite_seconds"] - report.by_id()["single_batch_overfit"].duration_s
        )
        out["check_suite_failures"] = [r.id for r in report.failed]
        out.update(check_suite_with_a_busy_neighbour(ws.root))
        out.update(tui_latency(ws.root, reps))
        out.update(first_frame_seconds(ws.root, reps))
        out.update(ui_vs_bare(ws.root, reps))
        out.update(ui_vs_bare(ws.root, reps, neighbour=True))
        long_ws = Workspace(Path(tmp) / "long")  # a workspace whose settings ask for a long run
        prepare_workspace(source, long_ws)
        train_long_settings(long_ws)
        out.update(ui_vs_bare(long_ws.root, reps, training=True))
        out.update(demo_build_seconds(Path(tmp)))  # the UI on the same trained workspace
    # memory bounds, each in its own interpreter (--quick: smaller inputs, keys name the size)
    out.update(prepare_memory(100 if args.quick else 500))
    out.update(metrics_read(40 if args.quick else 200))
    out["load_average_1min_at_end"] = os.getloadavg()[0]
    emit(out, args.json)


def emit(out: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, indent=2))
    else:
        for k, v in out.items():
            print(f"{k:<44} {v:.4g}" if isinstance(v, float) else f"{k:<44} {v}")


if __name__ == "__main__":
    main()
