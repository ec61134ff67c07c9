"""How far below its peers a healthy parameter's gradient and update fall, over every healthy design
in the zoo (tests/fixtures/zoo: public codebases and transformers' causal LMs; tests/fixtures/designs):
the measurement behind `gradients`' and `optimizer_update`'s "far below its peers" thresholds.

For each design it runs the two checks on a fresh model (the check's own batch and learning rate)
and prints, per design, the smallest ratio of a parameter's gradient RMS to the median of its kind,
and of its update/weight ratio to the median (over the rows its gradient reached, for an
embedding), with the parameter that holds it: the checks' own `lowest_to_peers` values.

    python benchmarks/peer_ratios.py          # all designs (transformers ones where it installs)
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from minigpt.checks import CheckContext, CheckOptions, run_checks  # noqa: E402
from minigpt.data.tokenizer import CharTokenizer  # noqa: E402


def main() -> None:
    from tests import test_checks_designs as designs
    from tests import test_checks_zoo as zoo

    root = Path(tempfile.mkdtemp())
    ws = zoo.prose_workspace(root)
    vocab = CharTokenizer.from_file(ws / "tokenizer" / "char_tokenizer.json").vocab_size
    cases = [(f"zoo/{d.id}", d.resolved(), d.shape) for d in zoo.DESIGNS]
    cases += [(f"designs/{d.id}", f"{designs.DESIGNS_DIR / d.file}:{d.cls}", d.shape) for d in designs.DESIGNS]
    lowest = {"grad": (1.0, ""), "update": (1.0, "")}
    print(f"{'design':34} {'min grad/peers':>15}  parameter{'':28} {'min upd/peers':>14}  parameter")
    for name, spec, shape in cases:
        if spec.startswith("transformers:"):
            try:
                import transformers  # noqa: F401
            except ImportError:
                continue
        config = root / "config.json"
        config.write_text(json.dumps({"vocab_size": vocab, **shape}))
        opts = CheckOptions(workspace=ws, checkpoint="none", model_spec=spec, config_path=config, device="cpu")
        report = run_checks(CheckContext(opts), only=["optimizer_update"]).by_id()
        g = report["gradients"].values.get("lowest_to_peers")
        u = report["optimizer_update"].values.get("lowest_to_peers")
        if not g or not u:
            print(f"{name:34} (not measured: {report['optimizer_update'].summary[:60]})")
            continue
        print(f"{name:34} {g[1]:15.2e}  {g[0][:36]:36} {u[1]:14.2e}  {u[0][:40]}")
        for key, (ratio, param) in (("grad", g[::-1]), ("update", u[::-1])):
            if ratio < lowest[key][0]:
                lowest[key] = (ratio, f"{name} {param}")
    print(f"lowest healthy gradient/peers: {lowest['grad'][0]:.2e} ({lowest['grad'][1]})")
    print(f"lowest healthy update/peers:   {lowest['update'][0]:.2e} ({lowest['update'][1]})")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
