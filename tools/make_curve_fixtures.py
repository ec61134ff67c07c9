"""Regenerate tests/fixtures/curves/: real short training runs of this pipeline on the embedded demo corpus.

Each case prepares a workspace (`minigpt prepare`), trains it (`minigpt train --preset debug ...`, optionally
a second `--resume` run), thins `logs/metrics.jsonl` to a few KB and stores it as NAME.jsonl, plus
expected.json: NAME -> {"shape", "vocab_size", "command", "note"}. The expected shape is our reading of the
curve (a human judgement written in CASES below), not what `diagnose` happened to say; the script prints
both so a disagreement shows when the fixtures are regenerated.

    OMP_NUM_THREADS=1 python tools/make_curve_fixtures.py [--only NAME ...] [--out DIR]

A few minutes on one CPU core. The runs use `python -m minigpt` with this interpreter and this checkout's
code; --code DIR trains with another copy instead (e.g. `git archive HEAD` unpacked elsewhere, while the
working tree is half-edited). The diagnoses printed always come from this checkout's minigpt.logs.curve.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "fixtures" / "curves"
KEEP = ("step", "train_loss", "val_loss", "lr", "grad_norm", "nonfinite")  # time and speed change every run
MAX_TRAIN_LINES = 60  # thinned beyond this (eval and non-finite lines are always kept)
TINY_CHARS = 3000  # the overfitting corpus: the first characters of the demo text


@dataclass(frozen=True)
class Case:
    name: str
    shape: str  # what the curve shows, by eye
    train: tuple[str, ...]  # `minigpt train` flags after --preset debug
    resume: tuple[str, ...] = ()  # flags of a second run with --resume (empty: none)
    source: str = "demo"  # demo | tiny (a file of the first TINY_CHARS characters of the demo text)
    rename: bool = False  # rewrite the keys as iter/loss/val/learning_rate
    note: str = ""
    env: dict = field(default_factory=dict)


CASES = [
    # the learning-rate sweep, far too low to far too high
    Case("lr_1e-6", "flat", ("--steps", "300", "--lr", "1e-6"), note="stays at the uniform guess"),
    Case(
        "lr_1e-5",
        "barely_learned",
        ("--steps", "300", "--lr", "1e-5"),
        note="4.54 -> 4.22 against log V 4.635: a slow steady fall, a third of the way to the unigram entropy",
    ),
    Case("lr_1e-4", "still_improving", ("--steps", "300", "--lr", "1e-4"), note="falls steadily to the end"),
    Case("lr_1e-3", "healthy", ("--steps", "1500", "--lr", "1e-3"), note="converged: falls, then flattens late"),
    Case("lr_1e-2", "healthy", ("--steps", "600", "--lr", "1e-2"), note="converged"),
    Case(
        "lr_0.05",
        "still_improving",
        ("--steps", "300", "--lr", "0.05"),
        note="stalls near 3.2 while the LR is high, then val falls as the cosine decays; lr 1e-3 reaches 2.45 "
        "in as many steps, but the curve alone cannot show that",
    ),
    Case(
        "lr_3_noclip",
        "unstable",
        ("--steps", "100", "--lr", "3", "--grad-clip", "0"),
        note="50 -> 330 -> 10: far above the uniform guess all run",
    ),
    Case(
        "lr_1_blowup",
        "unstable",
        ("--steps", "400", "--lr", "1", "--warmup-steps", "150"),
        note="3.3 -> 39 around the end of warmup, back to 3.1: a blow-up that recovered, not a warmup bump",
    ),
    Case(
        "lr_0.5_b8",
        "oscillating",
        ("--steps", "600", "--lr", "0.5", "--batch-size", "8", "--warmup-steps", "50"),
        note="train swings +-0.35 about 3.3 and val about 3.35 over the second half, neither falling (lr far too "
        "high); its last evaluations rise by chance",
    ),
    Case(
        "plateau_lr_0.2",
        "plateau",
        ("--steps", "600", "--lr", "0.2", "--batch-size", "32", "--warmup-steps", "100"),
        note="at 3.2 from the first logged step to the last (lr far too high)",
    ),
    Case(
        "warmup_bump",
        "healthy",
        ("--steps", "400", "--lr", "0.5", "--warmup-steps", "150", "--seed", "3"),
        note="a bump 3.2 -> 4.5 at the end of warmup that comes back; levels off near 3.15 (lr too high, "
        "which the curve alone cannot show)",
    ),
    Case(
        "spike_after_warmup_bump",
        "spikes",
        ("--steps", "400", "--lr", "0.5", "--warmup-steps", "150"),
        note="a warmup bump to 5.2 (excused), then a spike 3.3 -> 3.8 at step 310",
    ),
    Case(
        "nonfinite",
        "diverged",
        ("--steps", "300", "--lr", "30", "--warmup-steps", "200", "--grad-clip", "0"),
        note="real run: the loss climbs to 3e7 and the gradient norm becomes inf (the loss itself stays finite; "
        "we could not provoke a NaN loss on CPU fp32); the trainer writes the line and stops",
    ),
    Case(
        "overfit_tiny",
        "overfitting",
        ("--steps", "1000", "--lr", "3e-3", "--eval-interval", "50"),
        source="tiny",
        note=f"{TINY_CHARS} characters of text: val rises while train falls",
    ),
    Case(
        "resumed",
        "healthy",
        ("--steps", "300", "--lr", "1e-3"),
        resume=("--steps", "700"),
        note="300 steps, then --resume to 700",
    ),
    Case(
        "lr_cut_on_resume",
        "healthy",
        ("--steps", "300", "--lr", "0.05", "--warmup-steps", "300"),
        resume=("--steps", "600", "--lr", "3e-3", "--warmup-steps", "0"),
        note="300 steps warming up to lr 0.05, then resumed with lr 3e-3: a step cut of the LR (val drops)",
    ),
    Case(
        "foreign_keys",
        "still_improving",
        ("--steps", "300", "--lr", "1e-4"),
        rename=True,
        note="lr_1e-4's run with the keys iter/loss/val/learning_rate",
    ),
]


def minigpt(code: Path, work: Path, *args: str) -> None:
    """`python -m minigpt ARGS` on the copy of the code in `code`; a failed run leaves no metrics log (shown later)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONPATH=str(code))
    with open(work / "minigpt.log", "a") as log:
        log.write(f"$ minigpt {' '.join(args)}\n")
        log.flush()
        subprocess.run([sys.executable, "-m", "minigpt", *args], cwd=work, env=env, stdout=log, stderr=log)


def thin(records: list[dict]) -> list[dict]:
    plain = [i for i, r in enumerate(records) if "val_loss" not in r and "nonfinite" not in r]
    every = math.ceil(len(plain) / MAX_TRAIN_LINES)
    drop = {i for k, i in enumerate(plain) if every > 1 and k % every != every - 1}
    return [r for i, r in enumerate(records) if i not in drop]


def compact(record: dict, rename: bool) -> dict:
    out = {}
    for key in KEEP:
        if key in record:
            value = record[key]
            out[key] = float(f"{value:.5g}") if type(value) is float else value
    if rename:
        names = {"step": "iter", "train_loss": "loss", "val_loss": "val", "lr": "learning_rate"}
        out = {names.get(k, k): v for k, v in out.items()}
    return out


def run_case(case: Case, code: Path, work: Path, tiny: Path) -> tuple[list[dict], int]:
    ws = work / case.name
    minigpt(code, work, "prepare", "--source", str(tiny) if case.source == "tiny" else "demo", "--workspace", str(ws))
    minigpt(code, work, "train", "--preset", "debug", "--workspace", str(ws), "--quiet", *case.train)
    if case.resume:
        minigpt(code, work, "train", "--preset", "debug", "--workspace", str(ws), "--quiet", "--resume", *case.resume)
    metrics = ws / "logs" / "metrics.jsonl"
    if not metrics.is_file():
        sys.exit(f"{case.name}: no {metrics}; the runs said:\n{(work / 'minigpt.log').read_text()[-3000:]}")
    lines = metrics.read_text(encoding="utf-8").splitlines()
    vocab = json.loads((ws / "tokenizer" / "char_tokenizer.json").read_text(encoding="utf-8"))["vocab_size"]
    return [compact(json.loads(line), case.rename) for line in lines if line.strip()], vocab


def command_of(case: Case) -> str:
    source = "tiny.txt" if case.source == "tiny" else "demo"
    cmd = f"minigpt prepare --source {source}; minigpt train --preset debug {' '.join(case.train)}"
    return cmd + (f"; minigpt train --preset debug --resume {' '.join(case.resume)}" if case.resume else "")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="case names (default: all)")
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--code", type=Path, default=ROOT, help="the folder holding the minigpt package that trains")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from minigpt.data.corpus import demo_text
    from minigpt.logs.curve_rules import diagnose
    from minigpt.logs.metrics import parse_line

    args.out.mkdir(parents=True, exist_ok=True)
    expected_path = args.out / "expected.json"
    expected = json.loads(expected_path.read_text()) if expected_path.exists() else {}
    work = Path(tempfile.mkdtemp(prefix="curve_fixtures_"))
    try:
        tiny = work / "tiny.txt"
        text = demo_text()
        tiny.write_text(text[: text.rfind("\n", 0, TINY_CHARS) + 1], encoding="utf-8")
        for case in CASES:
            if args.only and case.name not in args.only:
                continue
            records, vocab = run_case(case, args.code.resolve(), work, tiny)
            records = thin(records)
            body = "".join(json.dumps(r) + "\n" for r in records)
            (args.out / f"{case.name}.jsonl").write_text(body, encoding="utf-8")
            expected[case.name] = {
                "shape": case.shape,
                "vocab_size": vocab,
                "command": command_of(case),
                "note": case.note,
            }
            points = [p for p in map(parse_line, body.splitlines()) if p is not None]
            d = diagnose(points, baseline=math.log(vocab))
            flag = "" if d.shape == case.shape else f"   <-- expected {case.shape}"
            print(f"{case.name:18} {len(records):3} lines {len(body):5} B  {d.shape}: {d.summary}{flag}")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    expected_path.write_text(json.dumps(dict(sorted(expected.items())), indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
