"""`minigpt sample`: stream generated text from a checkpoint to stdout; notices go to stderr."""

from __future__ import annotations

import argparse
import sys

from minigpt.device import DEVICE_CHOICES


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--checkpoint", help="checkpoint file (default: workspace best, else latest)")
    p.add_argument(
        "--tokenizer", metavar="PATH|tiktoken:NAME", help="what wrote the run's IDs (default: the workspace's)"
    )
    # a newline starts a fresh line/paragraph and is in nearly every character vocabulary
    p.add_argument("--prompt", default="\n", help="text to continue (default: a newline)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument("--temperature", type=float, default=1.0, help="0 = greedy (so is anything below 1e-30)")
    p.add_argument("--top-k", type=int, help="keep the k most likely tokens (0 = off)")
    p.add_argument("--top-p", type=float, default=1.0, help="nucleus mass in (0, 1] (1 = off)")
    p.add_argument("--repetition-penalty", type=float, default=1.0, help="in [1e-6, 1e6] (1 = off)")
    p.add_argument("--seed", type=int, help="seed for reproducible samples")
    p.add_argument("--device", choices=DEVICE_CHOICES, default="auto")
    p.add_argument("--no-cache", action="store_true", help="recompute the context every step (no KV cache)")
    p.add_argument(
        "--no-stop", action="store_true", help="go on past the end-of-text token (by default a sample stops at it)"
    )


def run(args: argparse.Namespace) -> int:
    from minigpt.data.tokenizer_load import load_tokenizer, workspace_tokenizer
    from minigpt.data.tokenizer_stream import TextStream
    from minigpt.device import resolve_device
    from minigpt.errors import CheckpointError, TokenizerError
    from minigpt.io.workspace import Workspace, settle
    from minigpt.model.checkpoint import load_checkpoint, read_checkpoint, require_finite
    from minigpt.sample.generate import SamplerSettings, encode_prompt, generate, unusual_settings, validate
    from minigpt.threads import apply as apply_thread_policy

    # one sequence, a token at a time: under load 200 characters took 44.9 s with 2 threads, 4.6 s with 1
    apply_thread_policy("sample")

    ws = Workspace(args.workspace)
    # an update a killed prepare or import left half done is finished first, and said
    settled = settle(ws, "sample").notices
    settings = SamplerSettings(
        temperature=args.temperature,
        top_k=args.top_k,
        top_p=args.top_p,
        repetition_penalty=args.repetition_penalty,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
    )
    tokenizer = load_tokenizer(args.tokenizer or workspace_tokenizer(ws.tokenizer))
    # validate and encode before loading the model: bad flags or prompts fail fast
    notices = validate(settings, tokenizer.vocab_size) + unusual_settings(settings)
    ids = encode_prompt(tokenizer, args.prompt)

    path = args.checkpoint
    if path is None:
        path = next((p for p in (ws.best_checkpoint, ws.latest_checkpoint) if p.is_file()), None)
        if path is None:
            raise CheckpointError(
                f"No checkpoint in {ws.checkpoints}: expected {ws.best_checkpoint.name} or {ws.latest_checkpoint.name}",
                path=ws.checkpoints,
                causes=["run `minigpt train` first", "pass --checkpoint or --workspace"],
            )
    raw = read_checkpoint(path)
    require_finite(raw["model_state_dict"], path, use="sample from")  # NaN weights print garbage or crash
    loaded = load_checkpoint(path, resolve_device(args.device), tokenizer=tokenizer, data=raw)
    if loaded.fingerprint_mismatch:
        # decoding with another vocabulary prints wrong characters silently, so refuse
        raise TokenizerError(
            f"{loaded.fingerprint_mismatch} (checkpoint {path}, tokenizer {tokenizer.path})",
            path=tokenizer.path,
            causes=["pass --tokenizer with the file the model was trained with"],
        )
    for notice in settled + loaded.notices + notices:
        print(f"note: {notice}", file=sys.stderr)

    out = sys.stdout
    out.write(args.prompt)
    out.flush()
    # a vocabulary padded past the tokenizer (nanoGPT's 50304 for GPT-2's 50257): sample only IDs it decodes
    vocab = loaded.config.get("vocab_size")
    padded = isinstance(vocab, int) and vocab > tokenizer.vocab_size
    stream = TextStream(tokenizer)
    eot = None if args.no_stop else tokenizer.eot_id

    def on_token(token: int) -> bool:
        if token == eot:
            return False  # the end of a document: the sample is complete
        out.write(stream.push(token))
        out.flush()  # stream as generated
        return True

    new = generate(
        loaded.model,
        ids,
        settings,
        on_token=on_token,
        use_cache=not args.no_cache,
        vocab_limit=tokenizer.vocab_size if padded else None,
    )
    out.write(stream.rest() + "\n")
    if eot is not None and new and new[-1] == eot:
        print(f"note: stopped at the end-of-text token {eot} after {len(new) - 1} tokens", file=sys.stderr)
    out.flush()
    return 0
