"""What `minigpt check --only training_curve` costs on a long metrics log: seconds and peak RSS for
logs of a few sizes, per million lines, and against just reading the file's lines in Python.

    python benchmarks/metrics_stream.py                        # 200,000 lines (a smoke run)
    python benchmarks/metrics_stream.py --lines 1000000 10000000 --json
    python benchmarks/metrics_stream.py --source /tmp/old-tree # the same figures for another checkout

Each log is `minigpt train`'s line format (an evaluation line every 50 steps) written to a temp
folder. Each measurement runs in its own wrapper process, which reads its one child's peak RSS with
`resource.getrusage(RUSAGE_CHILDREN)` (a child's ru_maxrss is its own, whoever forked it).
`run.py --only metrics_stream` runs the default size.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_LINES = (200_000,)

# runs one command as a child and prints its wall time and peak RSS (MB) as JSON
_WRAPPER = """
import json, resource, subprocess, sys, time
t0 = time.perf_counter()
done = subprocess.run(sys.argv[1:], capture_output=True, text=True)
seconds = time.perf_counter() - t0
rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps({"seconds": seconds, "peak_rss_mb": rss_mb, "rc": done.returncode, "out": done.stdout}))
"""

_READ_LINES = "import sys\nn = 0\nfor _ in open(sys.argv[1], 'rb'):\n    n += 1\nprint(n)\n"


def write_log(path: Path, lines: int) -> int:
    """`lines` lines of a run whose loss falls and levels off, with a little noise; returns the bytes."""
    with open(path, "w", encoding="utf-8") as fh:
        written, step, chunk = 0, 0, []
        while written < lines:
            step += 1
            loss = 2 + 2.2 / (1 + step * 1e-4) + 0.02 * ((step * 7919) % 13) / 13
            elapsed = step * 0.0123
            chunk.append(
                f'{{"step": {step}, "train_loss": {loss:.6f}, "lr": 0.0003, "grad_norm": 0.5, '
                f'"tokens_per_s": 123456.7, "elapsed_s": {elapsed:.3f}, "time": {1.7645e9 + elapsed:.3f}}}\n'
            )
            written += 1
            if step % 50 == 0 and written < lines:
                chunk.append(f'{{"step": {step}, "val_loss": {loss + 0.05:.6f}, "eval_train_loss": {loss:.6f}}}\n')
                written += 1
            if len(chunk) >= 10_000:
                fh.write("".join(chunk))
                chunk = []
        fh.write("".join(chunk))
    return path.stat().st_size


def measured(command: list[str], source: Path, cwd: Path) -> dict:
    """Wall seconds and peak RSS of `command`, run by a wrapper process with `source` importable."""
    env = {**os.environ, "PYTHONPATH": str(source)}
    done = subprocess.run(
        [sys.executable, "-c", _WRAPPER, *command], capture_output=True, text=True, cwd=cwd, env=env, check=True
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(lines: int, source: Path = ROOT) -> dict:
    """The check and a plain line count on one generated log of `lines` lines."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.jsonl"
        size = write_log(path, lines)
        check = measured(
            [sys.executable, "-m", "minigpt", "check", "--metrics", str(path), "--only", "training_curve"],
            source,
            Path(tmp),
        )
        read = measured([sys.executable, "-c", _READ_LINES, str(path)], source, Path(tmp))
    verdict = next((line.strip() for line in check["out"].splitlines() if "training_curve" in line), "")
    per_m = 1e6 / lines
    return {
        "lines": lines,
        "file_mb": size / 2**20,
        "check_seconds": check["seconds"],
        "check_peak_rss_mb": check["peak_rss_mb"],
        "check_seconds_per_million_lines": check["seconds"] * per_m,
        "read_lines_seconds": read["seconds"],
        "read_lines_peak_rss_mb": read["peak_rss_mb"],
        "check_time_ratio_vs_read_lines": check["seconds"] / read["seconds"],
        "check_exit_status": check["rc"],
        "judged_a_downsample": "judged a downsample" in verdict,
        "verdict": verdict,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, nargs="+", default=list(DEFAULT_LINES), help="log sizes in lines")
    parser.add_argument("--source", type=Path, default=ROOT, help="the checkout whose minigpt is measured")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = {"source": str(args.source), "sizes": [measure(n, args.source.resolve()) for n in args.lines]}
    if args.json:
        print(json.dumps(out, indent=2))
        return
    for row in out["sizes"]:
        ratio, read = row["check_time_ratio_vs_read_lines"], row["read_lines_seconds"]
        print(
            f"{row['lines']:>11,} lines {row['file_mb']:7.0f} MB: check {row['check_seconds']:6.1f} s, "
            f"peak RSS {row['check_peak_rss_mb']:6.0f} MB ({row['check_seconds_per_million_lines']:.1f} s per million "
            f"lines, {ratio:.0f}x reading its lines: {read:.2f} s, {row['read_lines_peak_rss_mb']:.0f} MB)"
            + ("; judged a downsample" if row["judged_a_downsample"] else "")
        )


if __name__ == "__main__":
    main()
