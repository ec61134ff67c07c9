"""A training run's checkpoints: what they hold, and the order an evaluation's log line, `best` and
`latest` reach the disk (the file format and its safe load and save: `minigpt.model.checkpoint`).

The order is what makes a crash at any point readable: the log line first (fsynced), then best,
then latest. A crash after the line leaves a line after latest's step, which `--resume` drops and
rewrites; one between the two saves leaves best newer than latest (`--resume` repeats the steps
since latest and saves both again), never latest past an evaluation whose best is missing. The
crash points between the writes (`MINIGPT_KILL_AT`, `minigpt.io.crash_points`) let the
crash-consistency tests kill the process at each one.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import IO

from minigpt.io.crash_points import crash_point
from minigpt.io.workspace import Workspace
from minigpt.logs.record import MetricsRecord, write_metrics
from minigpt.model.checkpoint import save_checkpoint
from minigpt.train.config import TrainConfig
from minigpt.train.distributed import World
from minigpt.train.run_files import interrupts_deferred
from minigpt.train.run_state import RunState


def checkpoint_payload(st: RunState, cfg: TrainConfig, world: World, rng_states: list[dict]) -> dict:
    """Everything `--resume` restores (`run_state.resumed_state`), with every rank's generator states."""
    payload = {
        "model_state_dict": st.model.state_dict(),
        "config": st.model.config.to_dict(),  # type: ignore[union-attr,operator]
        "optimizer_state_dict": st.optimizer.state_dict(),
        "step": st.step,
        "best_val_loss": float(st.best_val),
        "tokenizer_fingerprint": st.tokenizer.fingerprint,
        "train_config": asdict(cfg),
        "rng_state": rng_states[0],
        "world_size": world.size,
    }
    if world.distributed:
        payload["rng_states"] = rng_states  # one per rank, in rank order
    if st.scaler is not None:
        payload["scaler_state_dict"] = st.scaler.state_dict()
    return payload


def save_evaluation(log: IO[str], record: MetricsRecord, ws: Workspace, payload: dict, *, improved: bool) -> None:
    """The evaluation's log line, then best (when `improved`), then latest; SIGINT waits for all three."""
    with interrupts_deferred():
        write_metrics(log, record, sync=True)
        crash_point("eval-logged")
        if improved:
            save_checkpoint(ws.best_checkpoint, payload)
            crash_point("best-saved")
        save_checkpoint(ws.latest_checkpoint, payload)
        crash_point("latest-saved")
