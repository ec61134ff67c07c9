"""Reading a large TensorBoard event file of scalars: our reader against TensorBoard's own
`EventFileLoader` path (what `read_tensorboard` used before), side by side in one run.

    python benchmarks/tensorboard_read.py                  # a 50 MB file; the old path on a 5 MB one
    python benchmarks/tensorboard_read.py --mb 50 --baseline-mb 50 --json

The file is what `SummaryWriter.add_scalar` writes (one `Event` with one `simple_value` per call:
a train loss every step, the learning rate every 10, a val loss every 100), built with
TensorBoard's protobufs and framed with its record format; the old path reads it through
TensorBoard's loader, which checks every CRC, so a framing slip would show as missing points.
The old path is slow (about 1 MB/s), so by default it reads a `--baseline-mb` prefix of the same
run and both readers are timed on that; the new reader is also timed on the whole file, and the
user's command, `minigpt check --only training_curve --metrics FILE`, is timed as a subprocess.
`run.py --only tensorboard_read` runs the defaults.
"""

from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from minigpt.logs.sources import read_run_metrics  # noqa: E402
from minigpt.logs.tensorboard import read_tensorboard  # noqa: E402
from minigpt.logs.tensorboard_records import masked_crcs  # noqa: E402

RECORD_BYTES = 49  # about what one add_scalar record of these tags takes, framing included


def _frame(payloads: list[bytes]) -> bytes:
    """TensorBoard's record framing (tensorboard.summary.writer.record_writer) of each payload, its
    CRCs computed at once."""
    lengths = np.array([len(p) for p in payloads], dtype=np.int64)
    headers = lengths.astype("<u8").tobytes()
    head_crc = masked_crcs(np.frombuffer(headers, np.uint8), np.arange(len(payloads)) * 8, np.full(len(payloads), 8))
    data = b"".join(payloads)
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    data_crc = masked_crcs(np.frombuffer(data, np.uint8), starts, lengths)
    parts = []
    for i, payload in enumerate(payloads):
        parts += [headers[8 * i : 8 * i + 8], struct.pack("<I", head_crc[i]), payload, struct.pack("<I", data_crc[i])]
    return b"".join(parts)


def write_events(path: Path, megabytes: float) -> int:
    """An event file of about `megabytes` MB of scalars from a run whose loss falls; returns its records."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.compat.proto.summary_pb2 import Summary

    def event(step: int, tag: str, value: float) -> bytes:
        summary = Summary(value=[Summary.Value(tag=tag, simple_value=value)])
        return Event(wall_time=1.7645e9 + step * 0.05, step=step, summary=summary).SerializeToString()

    payloads = [Event(wall_time=1.7645e9, file_version="brain.Event:2").SerializeToString()]
    step, target = 0, int(megabytes * 2**20 / RECORD_BYTES)
    while len(payloads) < target:
        loss = 2 + 2.2 / (1 + step * 1e-4) + 0.02 * ((step * 7919) % 13) / 13
        payloads.append(event(step, "train/loss", loss))
        if step % 10 == 0:
            payloads.append(event(step, "train/lr", 3e-4 * min(1.0, step / 2000)))
        if step % 100 == 0:
            payloads.append(event(step, "val/loss", loss + 0.05))
        step += 1
    path.write_bytes(_frame(payloads))
    return len(payloads)


def old_read(path: Path) -> int:
    """The scalars as `read_tensorboard` read them before: TensorBoard's EventFileLoader (its
    record reader and read-time compat layers), every Summary.Value looked at; the values kept."""
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    series: dict[str, dict[int, float]] = {}
    for event in EventFileLoader(str(path)).Load():
        for value in event.summary.value:
            if value.HasField("simple_value"):
                series.setdefault(value.tag, {})[int(event.step)] = float(value.simple_value)
            elif value.HasField("tensor") and value.tensor.float_val:
                series.setdefault(value.tag, {})[int(event.step)] = float(value.tensor.float_val[0])
    return sum(len(s) for s in series.values())


def new_read(path: Path) -> int:
    """The scalars as `read_tensorboard` reads them now; the values kept (one a step and tag)."""
    log = read_tensorboard(path)
    return sum(len(log.points.series(name)[0]) for name in log.tags)  # type: ignore[attr-defined]


def _timed(fn, *args) -> tuple[float, object]:
    t0 = time.perf_counter()
    out = fn(*args)
    return time.perf_counter() - t0, out


def _check_seconds(path: Path, workdir: Path) -> dict:
    """`minigpt check --only training_curve --metrics FILE`, as a user runs it: seconds and verdict."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "minigpt", "check", "--metrics", str(path), "--only", "training_curve"],
        capture_output=True,
        text=True,
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    seconds = time.perf_counter() - t0
    verdict = next((line.strip() for line in done.stdout.splitlines() if "training_curve" in line), "")
    return {"check_seconds": seconds, "check_exit_status": done.returncode, "check_verdict": verdict}


def measure(megabytes: float = 50, baseline_mb: float = 5, reps: int = 3) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        big, prefix = Path(tmp) / "events.out.tfevents.1.big", Path(tmp) / "events.out.tfevents.1.prefix"
        records = write_events(big, megabytes)
        write_events(prefix, baseline_mb)
        big_mb, prefix_mb = big.stat().st_size / 2**20, prefix.stat().st_size / 2**20
        # side by side on the prefix: the old path once (it is slow), the new one `reps` times
        old_s, old_values = _timed(old_read, prefix)
        new_prefix = [_timed(new_read, prefix) for _ in range(reps)]
        new_prefix_s = min(s for s, _ in new_prefix)
        whole = [_timed(read_run_metrics, big) for _ in range(reps)]
        new_s = min(s for s, _ in whole)
        out = {
            "file_mb": round(big_mb, 1),
            "records": records,
            "read_seconds": new_s,
            "read_mb_per_s": big_mb / new_s,
            "points": len(whole[0][1].points),
            "baseline_file_mb": round(prefix_mb, 1),
            "old_seconds_on_baseline": old_s,
            "old_mb_per_s": prefix_mb / old_s,
            "new_seconds_on_baseline": new_prefix_s,
            "new_mb_per_s_on_baseline": prefix_mb / new_prefix_s,
            "speedup_on_baseline": old_s / new_prefix_s,
            "old_seconds_for_whole_file_estimated": old_s * big_mb / prefix_mb,
            "values_on_baseline": new_prefix[0][1],
            "readers_agree": new_prefix[0][1] == old_values,  # the same values (both check every CRC)
        }
        out.update(_check_seconds(big, Path(tmp)))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=50, help="size of the file the new reader reads (MB)")
    parser.add_argument("--baseline-mb", type=float, default=5, help="size both readers read side by side (MB)")
    parser.add_argument("--reps", type=int, default=3, help="new-reader repetitions (the fastest is kept)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    out = measure(args.mb, args.baseline_mb, args.reps)
    if args.json:
        print(json.dumps({k: round(v, 4) if isinstance(v, float) else v for k, v in out.items()}, indent=2))
        return
    print(
        f"{out['file_mb']} MB ({out['records']:,} records): read in {out['read_seconds']:.2f} s "
        f"({out['read_mb_per_s']:.1f} MB/s), {out['points']:,} points; check {out['check_seconds']:.1f} s"
    )
    print(
        f"side by side on {out['baseline_file_mb']} MB: TensorBoard's loader {out['old_seconds_on_baseline']:.2f} s "
        f"({out['old_mb_per_s']:.2f} MB/s), ours {out['new_seconds_on_baseline']:.3f} s "
        f"({out['new_mb_per_s_on_baseline']:.1f} MB/s): {out['speedup_on_baseline']:.0f}x"
    )
    if not out["readers_agree"]:
        print("warning: the two readers read a different number of values")


if __name__ == "__main__":
    main()
