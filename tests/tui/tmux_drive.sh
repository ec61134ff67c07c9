#!/usr/bin/env bash
# Drive the real minigpt-tui in tmux like a person: open a workspace, press 1..7, read each pane,
# quit with q. Usage: tests/tui/tmux_drive.sh WORKSPACE [OUT_DIR]
# Exits 0 when every pane showed what it should and q ended the program; captures go to OUT_DIR.
set -euo pipefail

WS=${1:?usage: tmux_drive.sh WORKSPACE [OUT_DIR]}
OUT=${2:-$(mktemp -d)}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
SESSION="minigpt-tui-drive-$$"
mkdir -p "$OUT"
command -v tmux >/dev/null || { echo "tmux not found" >&2; exit 77; }
if command -v minigpt-tui >/dev/null; then
    CMD=(minigpt-tui)
else
    CMD=(env "PYTHONPATH=$ROOT${PYTHONPATH:+:$PYTHONPATH}" python3 -m minigpt_tui)
fi

cleanup() { tmux kill-session -t "$SESSION" 2>/dev/null || true; }
trap cleanup EXIT

capture() { tmux capture-pane -p -t "$SESSION"; }

wait_for() {  # wait_for TEXT SECONDS
    local deadline=$((SECONDS + $2))
    while ((SECONDS < deadline)); do
        if capture | grep -qF -- "$1"; then return 0; fi
        sleep 0.2
    done
    echo "FAIL: '$1' did not appear within $2 s; screen was:" >&2
    capture >&2
    return 1
}

printf -v LINE '%q ' "${CMD[@]}" --workspace "$WS" --skip-overfit
tmux new-session -d -s "$SESSION" -x 120 -y 40 "cd $(printf %q "$ROOT") && $LINE"

wait_for "1 Checks" 20
wait_for "done in" 120   # every check finished
capture > "$OUT/1-checks.txt"

declare -A EXPECT=([1]="tokenizer_roundtrip" [2]="selected device" [3]="vocab size" [4]="shift invariant"
                   [5]="global norm" [6]="metrics.jsonl" [7]="temperature")
for n in 1 2 3 4 5 6 7; do
    tmux send-keys -t "$SESSION" "$n"
    # pressing a pane's key twice is harmless: resend once if a busy machine lost the first
    wait_for "${EXPECT[$n]}" 10 2>/dev/null || { tmux send-keys -t "$SESSION" "$n"; wait_for "${EXPECT[$n]}" 20; }
    sleep 0.3
    capture > "$OUT/$n.txt"
done

tmux send-keys -t "$SESSION" "?"
wait_for "minigpt-tui keys" 10
tmux send-keys -t "$SESSION" Escape
sleep 0.5

tmux send-keys -t "$SESSION" q
for _ in $(seq 50); do
    tmux has-session -t "$SESSION" 2>/dev/null || { echo "ok: 7 panes shown, q quit; captures in $OUT"; exit 0; }
    sleep 0.2
done
echo "FAIL: still running 10 s after q" >&2
capture >&2
exit 1
