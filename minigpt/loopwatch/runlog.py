"""The run folder a watched loop writes, in the trainer's own formats (no torch here).

- `logs/metrics.jsonl`: `minigpt.logs.record`'s lines, as the trainer writes them, with what the
  watch measures besides (`loss_source`, `lrs`, `grad_norm_after_clip`, `tokens`, `memory_bytes`);
- `logs/grads.jsonl`: the gradients pane's records (per-parameter gradient, weight and update norms);
- `logs/loop.jsonl`: a header (who writes: PID, script, optimizer, groups), a line per full reading
  and one for the steps between two of them (`loop_log.steps_line`) with what the loop checks read
  (docs/your-loop.md lists them), a closing or error line;
- `logs/ranks/rank{N}.jsonl`: under DDP, each rank above 0 writes the batches it saw.

Rank 0 takes the workspace lock for the whole run (the UI then names the writer) and moves an
earlier run's logs to `previous/<time>/` first, as `minigpt train` does.
"""

from __future__ import annotations

import math
import os
import time
from typing import IO, Any

from minigpt.io.files import named, open_log
from minigpt.io.lock import WorkspaceLock, acquire
from minigpt.io.workspace import Workspace, archive_run
from minigpt.logs.record import MetricsRecord, compact_json, json_line, line_template
from minigpt.loopwatch.loop_log import steps_line
from minigpt.model.gradstats import grad_flags

CLIP_EPS = 1e-3  # a step whose gradients shrank by more than this between backward and step was clipped


class RunLog:
    def __init__(self, ws: Workspace, *, rank: int = 0, lock: bool = True):
        self.ws, self.rank, self.use_lock = ws, rank, lock
        self._lock: WorkspaceLock | None = None
        self._files: dict[str, IO] = {}
        self._queued: dict[str, list[str]] = {}  # lines not yet written, by file
        self._loss_factor = 1.0  # the model's loss times this is the mean cross-entropy (see loss_factor)
        self.t0 = time.time()
        self.pid = os.getpid()  # the process that opened the files: only it writes, flushes or releases them

    def start(self, header: dict) -> None:
        logs = self.ws.metrics.parent
        if self.rank != 0:
            self.ws.ranks.mkdir(parents=True, exist_ok=True)
            self._files["rank"] = open_log(self.ws.ranks / f"rank{self.rank}.jsonl", "wb", what="the rank's log")
            self._line("rank", {k: header[k] for k in ("kind", "pid", "started", "rank", "world_size")})
            return
        logs.mkdir(parents=True, exist_ok=True)
        if self.use_lock:
            self._lock = acquire(self.ws.root, command="watch")
        archive_run(self.ws, self.ws.log_files())
        for name, path in (("loop", self.ws.loop_log), ("metrics", self.ws.metrics), ("grads", self.ws.grads)):
            self._files[name] = open_log(path, "a")
        self._line("loop", header)
        self._flush()

    # --- records ---------------------------------------------------------------------------------

    def write(self, records: list[dict], logged_loss: bool) -> None:
        short: list[dict] = []  # consecutive steps between full readings: one loop-log line for all
        for record in records:
            if "metrics_only" in record:
                if self.rank == 0:
                    self._line("metrics", {**record["metrics_only"], "time": time.time()})
                continue
            if self.rank != 0:
                self._line("rank", {"step": record["step"], "fingerprints": record.get("fingerprints", [])})
                continue
            step = record.get("short_line")  # a step between full readings comes made
            if step is not None:
                short.append(step)
            else:
                self._steps_line(short)
                step = loop_record(record)
                self._line("loop", step)
                self._loss_factor = loss_factor(step, self._loss_factor)
            line = None
            if "short_line" in record:
                line = short_metrics_line(step, record["time"], self.t0, self._loss_factor)
            if line is None:
                line = json_line(metrics_record(step, record, logged_loss, self.t0, self._loss_factor))
            self._queue("metrics", line)
            if record.get("grad_rows"):
                self._line("grads", grads_record(step, record["grad_rows"]))
        self._steps_line(short)
        self._flush()

    def _steps_line(self, short: list[dict]) -> None:
        """The loop-log line of the steps between full readings gathered in `short` (emptied)."""
        if short:
            self._line("loop", short[0] if len(short) == 1 else steps_line(short))
            short.clear()

    def sample(self, line: str) -> None:
        """One line of `logs/samples.jsonl` (rank 0; opened on the first sample)."""
        if self.rank != 0:
            return
        if "samples" not in self._files:
            self._files["samples"] = open_log(self.ws.samples, "a", what="the samples log")
        self._files["samples"].write(line)
        self._files["samples"].flush()

    def close(self, step: int) -> None:
        if self.rank == 0 and "loop" in self._files:
            self._line("loop", {"kind": "closed", "step": step, "time": time.time()})
        self._flush(sync=True)

    def error(self, message: str, step: int) -> None:
        """Best effort: the error line in the loop log (the disk may be what failed)."""
        try:
            name = "loop" if "loop" in self._files else "rank"
            if name in self._files:
                self._line(name, {"kind": "error", "step": step, "message": message, "time": time.time()})
                self._flush()
        except Exception:  # noqa: BLE001  reporting must never raise into the user's loop
            pass

    def forget(self) -> None:
        """In a forked child: drop the queued lines and the inherited files and lock unwritten and
        unreleased (they are the parent's: the child's exit must not flush or unlock them)."""
        self._queued = {}
        self._files = {}  # no flush: the files' own buffers are empty after every `_flush`
        if self._lock is not None:
            self._lock.release()  # closes the child's descriptor only (see WorkspaceLock.release)
            self._lock = None

    def release(self) -> None:
        if os.getpid() != self.pid:
            self.forget()
            return
        try:
            self._flush()  # lines queued since the last flush (a rank's first line)
        except (OSError, ValueError):  # a full disk or a closed file: what is queued is lost, the rest stays
            pass
        for fh in self._files.values():
            try:
                fh.close()
            except OSError:
                pass
        self._files = {}
        if self._lock is not None:
            self._lock.release()
            self._lock = None

    def _line(self, name: str, record: dict) -> None:
        """Queue one line of file `name`; `_flush` writes each file's lines in one call."""
        if name in self._files:
            # the metrics log takes non-finite numbers as strings (as the trainer writes them); the
            # loop log is ours and its reader takes JSON's NaN literals (and the records are large)
            self._queue(name, compact_json(record) if name == "loop" else json_line(record))

    def _queue(self, name: str, line: str) -> None:
        if name in self._files:
            self._queued.setdefault(name, []).append(line)

    def _flush(self, sync: bool = False) -> None:
        if os.getpid() != self.pid:
            self.forget()
            return
        queued, self._queued = self._queued, {}
        for name, fh in self._files.items():
            lines = queued.get(name)
            if lines:
                text = "\n".join(lines) + "\n"
                fh.write(text.encode("utf-8") if "b" in fh.mode else text)
            fh.flush()
            if sync:
                try:
                    os.fsync(fh.fileno())
                except OSError as exc:
                    raise named(exc, fh.name) from None


def loop_record(r: dict) -> dict:
    """The loop log's line for one optimizer step, from the watch's host-side record."""
    before = r.get("grad_before") or []
    known = [b for b in before if b is not None]
    # where the gradients were cleared inside this step's window (a backward that found them empty)
    clears = [i for i, b in enumerate(before) if b is not None and b == 0.0]
    last_clear = max([i for i in clears if i > 0], default=0)
    effective = r["backwards"] - last_clear
    weights = [loss_weight_of(*w) for w in r.get("weights") or []]
    used = weights[last_clear:] if len(weights) == len(before) else weights
    out: dict[str, Any] = {
        "kind": "step",
        "step": r["step"],
        "deep": r["deep"],
        "backwards": r["backwards"],
        "micro_batches": effective,
        "cleared_before": (before[0] == 0.0) if before and before[0] is not None else None,
        "cleared_within": sum(1 for i in clears if i > 0) if before and len(known) == len(before) else None,
        "train_forwards": r["train_forwards"],
        "train_in_eval_mode": r["train_in_eval_mode"],
        "eval_forwards": r["eval_forwards"],
        "eval_in_train_mode": r["eval_in_train_mode"],
        "eval_with_grad": r["eval_with_grad"],
        "autocast": r.get("autocast"),
        "lrs": r.get("lrs", []),
        "tokens": r.get("tokens", 0),
        "fingerprints": r.get("fingerprints", []),
        **({"eval_fingerprints": r["eval_fingerprints"]} if r.get("eval_fingerprints") else {}),
        "targets": r.get("targets"),
        "seconds": r.get("seconds"),
        "closure": r.get("closure", False),
    }
    present = r.get("grads_present", 0)
    at_step = r.get("grad_norm_at_step")
    out["grads_at_step"] = "none" if present == 0 else ("zero" if at_step == 0.0 else "present")
    if r.get("relation") is not None:  # [the micro-batches' counts, what each is out of]
        out["targets_equal"], out["targets_shifted"] = relation_shares(*r["relation"])
    loss = r.get("loss")
    if isinstance(loss, list):  # one per micro-batch (the watch averages them here, on the host)
        loss = sum(loss) / len(loss)
    if loss is not None:
        out["loss"] = loss
    if used:
        out["loss_weight"] = sum(w[0] for w in used)
        out["loss_weight_misfit"] = max(w[1] for w in used)
        out["loss_from_logits"] = sum(w[2] for w in used) / len(used)
        out["loss_from_logits_se"] = math.sqrt(sum(w[4] * w[4] for w in used)) / len(used)
        if r.get("loss_scale"):
            out["loss_scale"] = r["loss_scale"]
            out["loss_weight"] /= r["loss_scale"]
    if r["deep"]:
        out["grad_norm_at_step"] = at_step
        after, probe_at = r.get("probe_after"), r.get("probe_at_step")
        if after and probe_at and at_step and not r.get("closure"):  # no gradients at the step: no clip to read
            factor = probe_at / after
            if r.get("loss_scale"):
                factor *= r["loss_scale"]  # the scaler's unscale is not a clip
            out["clip_factor"] = factor
            out["clipped"] = factor < 1 - CLIP_EPS
            if factor > 0 and at_step is not None:
                out["grad_norm_before_clip"] = at_step / factor
        out["outside_optimizer"] = r.get("outside_optimizer", [])
        out["memory"], out["memory_source"] = r.get("memory"), r.get("memory_source")
        out["old_graphs_alive"] = r.get("old_graphs_alive", 0)
    return out


def relation_shares(counts: list[list[int]], totals: list[list[int]]) -> list[float]:
    """[share equal, share shifted] of the micro-batches' `probes.target_relation`s, pooled."""
    return [sum(c[i] for c in counts) / max(1, sum(t[i] for t in totals)) for i in range(2)]


def loss_weight_of(sums: list[float], n_rows: int, n_total: int) -> list[float]:
    """[weight, misfit, loss, share, loss_se] of one backward from `probes.loss_weight_sums`'s sums (on
    the host): `loss` is the cross-entropy of the sampled rows, `loss_se` its standard error as an
    estimate of the whole batch's."""
    c, misfit_sum, loss_sum, n_has, loss_sq_sum = sums
    share = n_has / n_rows
    n = max(n_has, 1.0)
    mean = loss_sum / n
    variance = max(loss_sq_sum / n - mean * mean, 0.0)
    return [c * share * n_total, misfit_sum / n, mean, share, math.sqrt(variance / n)]


def loss_factor(step: dict, previous: float) -> float:
    """What the model's own loss must be multiplied by to be the mean cross-entropy of the step.

    Usually 1. A model that divides its loss itself (Hugging Face models given `num_items_in_batch`
    by the Trainer return sum / all tokens of the accumulated step, about loss / K per micro-batch)
    returns a fraction: the cross-entropy read at the logits says which. That reading is of up to 128
    sampled rows, 5-15 % off the batch's mean on a healthy run: only a difference beyond four of its
    standard errors (and 5 %) is a factor; within them the model's loss is taken as it is. A factor
    that the gradient's own weight explains (a backward of loss / K carries 1/K of a mean: the model
    divided, the loop did not) is that weight's inverse, exact; another is the ratio read. Kept from
    the last full reading that had both."""
    model, at_logits = step.get("loss"), step.get("loss_from_logits")
    if model is None or at_logits is None or not model or step.get("loss_weight_misfit", 1.0) > 0.25:
        return previous
    se = step.get("loss_from_logits_se") or 0.0

    def explains(factor: float) -> bool:  # the model's loss times `factor` is the sampled one, within its noise
        return abs(at_logits - model * factor) <= max(0.05 * abs(model * factor), 4 * se)

    if explains(1.0):
        return 1.0
    per_backward = (step.get("loss_weight") or 0.0) / max(1, step.get("micro_batches") or 1)
    if per_backward > 0 and explains(1.0 / per_backward):
        return 1.0 / per_backward
    return at_logits / model


def metrics_record(step: dict, r: dict, logged_loss: bool, t0: float, factor: float = 1.0) -> MetricsRecord:
    """The metrics.jsonl record of one step; every number names its source."""
    line: MetricsRecord = {"step": step["step"]}
    if step.get("loss") is not None and factor != 1.0:
        line["train_loss"] = step["loss"] * factor
        line["loss_source"] = _factor_source(factor)
    elif step.get("loss") is not None:
        line["train_loss"], line["loss_source"] = step["loss"], "model"
    elif not logged_loss and step.get("loss_from_logits") is not None:
        line["train_loss"], line["loss_source"] = step["loss_from_logits"], "logits sample (backward hook)"
    lrs = step.get("lrs") or []
    if lrs:
        line["lr"] = lrs[0]
        if len(lrs) > 1:
            line["lrs"] = lrs
    if step.get("grad_norm_before_clip") is not None:
        line["grad_norm"] = step["grad_norm_before_clip"]
    if step.get("grad_norm_at_step") is not None:
        line["grad_norm_after_clip"] = step["grad_norm_at_step"]
    line["tokens"] = step.get("tokens", 0)
    seconds = r.get("seconds")
    if seconds and step.get("tokens"):
        line["tokens_per_s"] = step["tokens"] / seconds
    line["elapsed_s"] = r["time"] - t0
    line["time"] = r["time"]
    if step.get("memory") is not None:
        line["memory_bytes"], line["memory_source"] = step["memory"], step["memory_source"]
    return line


_SHORT_METRICS = line_template("step", "train_loss", "loss_source", "lr", "tokens", "tokens_per_s", "elapsed_s", "time")
_isfinite = math.isfinite


def short_metrics_line(step: dict, at: float, t0: float, factor: float) -> str | None:
    """`metrics_record`'s line of a step between full readings whose model returned its loss, one
    learning rate and its tokens, made by a template: the flush writes one a step, and the JSON
    encoder costs twice as much. The same text as `json_line(metrics_record(...))` (a test holds
    them equal); None for anything else (then `metrics_record` makes it)."""
    loss, lrs, tokens, seconds = step.get("loss"), step["lrs"], step["tokens"], step["seconds"]
    if type(loss) is not float or len(lrs) != 1 or type(lrs[0]) is not float or not tokens or not seconds:
        return None
    if factor != 1.0:
        loss *= factor
    tokens_per_s = tokens / seconds
    if not (_isfinite(loss) and _isfinite(lrs[0]) and _isfinite(tokens_per_s)):
        return None
    return _SHORT_METRICS % (step["step"], loss, _loss_source(factor), lrs[0], tokens, tokens_per_s, at - t0, at)


def _loss_source(factor: float) -> str:
    return '"model"' if factor == 1.0 else compact_json(_factor_source(factor))


def _factor_source(factor: float) -> str:
    return f"model x {factor:.3g} (its loss came pre-divided; the factor is read at the logits)"


def grads_record(step: dict, g: dict) -> dict:
    """A grads.jsonl record (the gradients pane's format): norms as the optimizer step saw them,
    scaled back to before clipping when the step was clipped, and whether it was (`clipped`, with
    `clip` the norm it was cut to)."""
    factor = step.get("clip_factor") or 1.0
    rows = []
    for i, name in enumerate(g["names"]):
        gn, wn, un = g["grad_norms"][i], g["weight_norms"][i], g["update_norms"][i]
        grad = None if gn < 0 else gn / factor if factor > 0 else gn
        flags = grad_flags(g["requires_grad"][i], grad)
        if grad is not None and not g["in_optimizer"][i]:
            flags.append("not_in_optimizer")
        numel = math.prod(g["shapes"][i])
        rows.append(
            {
                "name": name,
                "shape": g["shapes"][i],
                "numel": numel,
                "grad_norm": grad if grad is None or math.isfinite(grad) else str(grad),
                "weight_norm": wn,
                "update_ratio": un / wn if wn else None,
                "flags": flags,
            }
        )
    # the clip as measured: a clipped step's gradient was cut to the loop's max_norm; `clipped` None: not read
    clipped = step.get("clipped")
    clip = step.get("grad_norm_at_step") if clipped else None
    return {
        "step": step["step"],
        "global_norm": step.get("grad_norm_before_clip"),
        "clip": clip,
        "clipped": clipped,
        "rows": rows,
    }
