"""A zoo of model code nobody here wrote: public GPT implementations, vendored unchanged in what
they compute (tests/fixtures/zoo/, each file names its source commit and licence), and Hugging Face
transformers' own causal LMs built from a tiny config offline.

Every healthy design passes every model check. Each broken variant is the public file with a
minimal edit (a few lines, applied here as text replacements so the diff is in plain sight) that
makes a bug people really write; it fails the check that measures the broken property, naming the
cause, and no unrelated check. A design whose forward the checks cannot call is refused, not judged.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import pytest

from minigpt.checks import CheckContext, CheckOptions, Status, catalog, run_checks
from minigpt.data.tokenizer import CharTokenizer
from minigpt.io.workspace import Workspace

ZOO = Path(__file__).parent / "fixtures" / "zoo"
ALARMS = (Status.FAIL, Status.ERROR, Status.WARN)
# data and tokenizer checks judge the workspace, not the model (the prose repeats some lines)
MODEL_STAGES = frozenset({"model", "gradients", "optimization", "training", "checkpoint", "generation"})


@dataclass(frozen=True)
class Design:
    id: str
    spec: str  # FILE.py:CLASS[:CONFIG] under tests/fixtures/zoo, or transformers:CLASS:CONFIG
    source: str  # where the code comes from
    shape: dict  # config fields besides vocab_size: n_layer 2, width 32, context 16
    own_loss: bool = True  # forward returns a loss of its own (else loss_matches_logits has none to compare)

    def resolved(self, folder: Path = ZOO) -> str:
        return self.spec if self.spec.startswith("transformers:") else f"{folder / self.spec}"


GPT2 = {"block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 32}
HF_LLAMA = {
    "max_position_embeddings": 16,
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "num_hidden_layers": 2,
}
DESIGNS = [
    Design("nanogpt", "nanogpt_model.py:GPT", "karpathy/nanoGPT model.py", {**GPT2, "dropout": 0.1, "bias": True}),
    Design("mingpt", "mingpt_model.py:GPT:GPTConfig", "karpathy/minGPT mingpt/model.py", GPT2),
    Design(
        "ng_video_lecture",
        "ngvideo_gpt.py:GPTLanguageModel",
        "karpathy/ng-video-lecture gpt.py",
        {"block_size": 16, "n_embd": 32, "n_head": 2, "n_layer": 2, "dropout": 0.2},
    ),
    Design("build_nanogpt", "buildnanogpt_gpt.py:GPT", "karpathy/build-nanogpt train_gpt2.py", GPT2),
    Design(
        "llama2c",
        "llama2c_model.py:Transformer:ModelArgs",
        "karpathy/llama2.c model.py",
        {"dim": 32, "n_layers": 2, "n_heads": 2, "n_kv_heads": 1, "multiple_of": 32, "max_seq_len": 16, "dropout": 0.1},
        own_loss=False,  # it keeps its loss in model.last_loss and returns the logits
    ),
    Design(
        "rasbt_gpt",
        "rasbt_gpt.py:GPTModel",
        "rasbt/LLMs-from-scratch ch03.py + ch04.py",
        {"context_length": 16, "emb_dim": 32, "n_heads": 2, "n_layers": 2, "drop_rate": 0.1, "qkv_bias": False},
        own_loss=False,  # forward(in_idx) -> logits; the book computes the loss outside
    ),
    Design(
        "rasbt_llama3",
        "rasbt_llama3.py:Llama3Model",
        "rasbt/LLMs-from-scratch llama3.py",
        {"context_length": 16, "emb_dim": 32, "n_heads": 4, "n_layers": 2, "hidden_dim": 64, "n_kv_groups": 2},
        own_loss=False,
    ),
    Design(
        "hf_gpt2",
        "transformers:GPT2LMHeadModel:GPT2Config",
        "huggingface/transformers GPT2LMHeadModel",
        {"n_positions": 16, "n_embd": 32, "n_head": 2, "n_layer": 2},
    ),
    Design(
        "hf_llama", "transformers:LlamaForCausalLM:LlamaConfig", "huggingface/transformers LlamaForCausalLM", HF_LLAMA
    ),
    Design(
        "hf_gpt_neox",
        "transformers:GPTNeoXForCausalLM:GPTNeoXConfig",
        "huggingface/transformers GPTNeoXForCausalLM",
        {**HF_LLAMA, "num_attention_heads": 2, "num_key_value_heads": None},
    ),
    Design(
        "hf_mistral",
        "transformers:MistralForCausalLM:MistralConfig",
        "huggingface/transformers MistralForCausalLM",
        {**HF_LLAMA, "sliding_window": None},
    ),
    Design(
        "hf_bloom",
        "transformers:BloomForCausalLM:BloomConfig",
        "huggingface/transformers BloomForCausalLM (ALiBi, no context limit in its config)",
        {"hidden_size": 32, "n_head": 2, "n_layer": 2},
    ),
    Design(
        "hf_opt",
        "transformers:OPTForCausalLM:OPTConfig",
        "huggingface/transformers OPTForCausalLM (learned positions offset by 2)",
        {
            "max_position_embeddings": 16,
            "hidden_size": 32,
            "ffn_dim": 64,
            "num_attention_heads": 2,
            "num_hidden_layers": 2,
            "word_embed_proj_dim": 32,
            "pad_token_id": None,
        },
    ),
    Design(
        "hf_qwen2", "transformers:Qwen2ForCausalLM:Qwen2Config", "huggingface/transformers Qwen2ForCausalLM", HF_LLAMA
    ),
    Design(
        "hf_phi",
        "transformers:PhiForCausalLM:PhiConfig",
        "huggingface/transformers PhiForCausalLM (partial rotary, parallel block)",
        {**HF_LLAMA, "num_key_value_heads": 4},
    ),
    Design(
        "hf_olmo",
        "transformers:OlmoForCausalLM:OlmoConfig",
        "huggingface/transformers OlmoForCausalLM (non-parametric layer norm)",
        {**HF_LLAMA, "pad_token_id": None},
    ),
    Design(
        "hf_falcon",
        "transformers:FalconForCausalLM:FalconConfig",
        "huggingface/transformers FalconForCausalLM",
        {"hidden_size": 32, "num_attention_heads": 2, "num_hidden_layers": 2, "max_position_embeddings": 16},
    ),
    Design(
        "hf_mpt",
        "transformers:MptForCausalLM:MptConfig",
        "huggingface/transformers MptForCausalLM (ALiBi)",
        {"d_model": 32, "n_heads": 2, "n_layers": 2, "max_seq_len": 16},
    ),
    Design(
        "hf_gptj",
        "transformers:GPTJForCausalLM:GPTJConfig",
        "huggingface/transformers GPTJForCausalLM",
        {"n_positions": 16, "n_embd": 32, "n_head": 2, "n_layer": 2, "rotary_dim": 8},
    ),
    Design(
        "hf_mixtral_router_loss",
        "transformers:MixtralForCausalLM:MixtralConfig",
        "huggingface/transformers MixtralForCausalLM, trained as its docs say: with the load-balancing loss",
        {**HF_LLAMA, "num_local_experts": 4, "num_experts_per_tok": 2, "output_router_logits": True},
    ),
    Design(
        "hf_gemma",
        "transformers:GemmaForCausalLM:GemmaConfig",
        "huggingface/transformers GemmaForCausalLM",
        # no padding token: this tokenizer has none, and Gemma's default (ID 0) is a real character here
        {**HF_LLAMA, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 16, "pad_token_id": None},
    ),
    # kinds beyond attention: recurrent, state-space, convolutional hybrids; and attention variants
    # (local windows, multi-query, QK-norm, parallel blocks) not above
    Design(
        "hf_rwkv",
        "transformers:RwkvForCausalLM:RwkvConfig",
        "huggingface/transformers RwkvForCausalLM (RWKV-4: recurrent, attention-free)",
        {"context_length": 16, "hidden_size": 32, "num_hidden_layers": 2, "attention_hidden_size": 32},
    ),
    Design(
        "hf_mamba",
        "transformers:MambaForCausalLM:MambaConfig",
        "huggingface/transformers MambaForCausalLM (selective state space, attention-free)",
        {"hidden_size": 32, "num_hidden_layers": 2, "state_size": 8, "expand": 2, "conv_kernel": 4},
    ),
    Design(
        "hf_mamba2",
        "transformers:Mamba2ForCausalLM:Mamba2Config",
        "huggingface/transformers Mamba2ForCausalLM (state space duality, chunked scan)",
        {
            "hidden_size": 32,
            "num_hidden_layers": 2,
            "state_size": 8,
            "expand": 2,
            "num_heads": 4,
            "head_dim": 16,
            "n_groups": 1,
            "conv_kernel": 4,
            "chunk_size": 8,
        },
    ),
    Design(
        "hf_falcon_mamba",
        "transformers:FalconMambaForCausalLM:FalconMambaConfig",
        "huggingface/transformers FalconMambaForCausalLM (Mamba with RMS-normalised B, C and dt)",
        {"hidden_size": 32, "num_hidden_layers": 2, "state_size": 8, "expand": 2, "conv_kernel": 4},
    ),
    Design(
        "hf_recurrent_gemma",
        "transformers:RecurrentGemmaForCausalLM:RecurrentGemmaConfig",
        "huggingface/transformers RecurrentGemmaForCausalLM (Griffin: gated linear recurrence + local attention)",
        {
            "hidden_size": 32,
            "intermediate_size": 64,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "num_hidden_layers": 3,
            "lru_width": 32,
            "attention_window_size": 16,
            "conv1d_width": 4,
            "pad_token_id": None,
        },
    ),
    Design(
        "hf_lfm2",
        "transformers:Lfm2ForCausalLM:Lfm2Config",
        "huggingface/transformers Lfm2ForCausalLM (short gated convolutions beside attention)",
        {**HF_LLAMA, "layer_types": ["conv", "full_attention"], "pad_token_id": None},
    ),
    Design(
        "hf_gpt_neo",
        "transformers:GPTNeoForCausalLM:GPTNeoConfig",
        "huggingface/transformers GPTNeoForCausalLM (local and global attention layers)",
        {
            "max_position_embeddings": 16,
            "hidden_size": 32,
            "num_layers": 2,
            "num_heads": 2,
            "attention_types": [[["global", "local"], 1]],
            "window_size": 8,
        },
    ),
    Design(
        "hf_codegen",
        "transformers:CodeGenForCausalLM:CodeGenConfig",
        "huggingface/transformers CodeGenForCausalLM (fused qkv in its own order, partial rotary)",
        {"n_positions": 16, "n_embd": 32, "n_head": 2, "n_layer": 2, "rotary_dim": 8},
    ),
    Design(
        "hf_gpt_bigcode",
        "transformers:GPTBigCodeForCausalLM:GPTBigCodeConfig",
        "huggingface/transformers GPTBigCodeForCausalLM (multi-query attention)",
        {"n_positions": 16, "n_embd": 32, "n_head": 2, "n_layer": 2},
    ),
    Design(
        "hf_starcoder2",
        "transformers:Starcoder2ForCausalLM:Starcoder2Config",
        "huggingface/transformers Starcoder2ForCausalLM (grouped-query attention, biases, GELU MLP)",
        HF_LLAMA,
    ),
    Design(
        "hf_qwen3",
        "transformers:Qwen3ForCausalLM:Qwen3Config",
        "huggingface/transformers Qwen3ForCausalLM (RMS norm on queries and keys)",
        {**HF_LLAMA, "head_dim": 8},
    ),
    Design(
        "hf_olmo2",
        "transformers:Olmo2ForCausalLM:Olmo2Config",
        "huggingface/transformers Olmo2ForCausalLM (norms after each block, QK-norm)",
        {**HF_LLAMA, "pad_token_id": None},
    ),
    Design(
        "hf_cohere",
        "transformers:CohereForCausalLM:CohereConfig",
        "huggingface/transformers CohereForCausalLM (parallel attention and MLP, scaled logits)",
        {**HF_LLAMA, "pad_token_id": None},
    ),
]
BY_ID = {d.id: d for d in DESIGNS}


def prose_workspace(base: Path) -> Path:
    """A workspace of deduplicated English prose (Python's pydoc topics) under `base`, as
    test_checks_designs builds it; benchmarks/peer_ratios.py measures the zoo on it too."""
    from pydoc_data.topics import topics

    from minigpt.data.prepare import prepare_workspace

    seen: set[str] = set()
    lines = []
    for line in "".join(topics[k] for k in sorted(topics)).splitlines():
        if len(line.strip()) >= 20 and line.strip() in seen:
            continue
        seen.add(line.strip())
        lines.append(line)
    corpus = base / "prose.txt"
    corpus.write_text("\n".join(lines)[:200_000], encoding="utf-8")
    prepare_workspace(corpus, base / "ws")
    return base / "ws"


@pytest.fixture(scope="session")
def _zoo_template(tmp_path_factory) -> Path:
    return prose_workspace(tmp_path_factory.mktemp("zoo"))


@pytest.fixture
def workspace(tmp_path, _zoo_template) -> Workspace:
    root = tmp_path / "ws"
    shutil.copytree(_zoo_template, root)
    return Workspace(root)


def needs(design: Design) -> None:
    if design.spec.startswith("transformers:"):
        pytest.importorskip("transformers", reason="the [hf] extra (transformers) is not installed")


def run(ws: Workspace, spec: str, shape: dict, tmp_path: Path, only=None):
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": CharTokenizer.from_file(ws.tokenizer).vocab_size, **shape}))
    opts = CheckOptions(
        workspace=ws.root, checkpoint="none", model_spec=spec, config_path=config, device="cpu", skip_overfit=True
    )
    return run_checks(CheckContext(opts), only=only)


def model_alarms(report) -> dict[str, str]:
    stages = catalog()
    return {
        r.id: f"{r.status.value}: {r.summary}"
        for r in report.results
        if r.status in ALARMS and (r.status is not Status.WARN or stages[r.id].stage in MODEL_STAGES)
    }


# -- healthy designs ---------------------------------------------------------------------------------


def slow_if_hf(value, design: Design):
    """transformers takes seconds to import: its designs run in the slow tier."""
    return pytest.param(value, marks=pytest.mark.slow if design.spec.startswith("transformers:") else ())


@pytest.mark.parametrize("design", [slow_if_hf(d, d) for d in DESIGNS], ids=lambda d: d.id)
def test_public_design_passes_every_model_check(workspace, tmp_path, design):
    needs(design)
    report = run(workspace, design.resolved(), design.shape, tmp_path)
    assert model_alarms(report) == {}
    model_checks = [r for r in report.results if catalog()[r.id].stage in {"model", "gradients", "optimization"}]
    honest = {"lr_probe"} | (set() if design.own_loss else {"loss_matches_logits"})  # opt-in; nothing to compare
    skipped = {r.id: r.summary for r in model_checks if r.status is Status.SKIP and r.id not in honest}
    assert skipped == {}, "every model check ran"


@pytest.mark.slow
@pytest.mark.parametrize("design", DESIGNS, ids=lambda d: d.id)
def test_public_design_memorises_one_batch(workspace, tmp_path, design):
    needs(design)
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps({"vocab_size": CharTokenizer.from_file(workspace.tokenizer).vocab_size, **design.shape})
    )
    opts = CheckOptions(
        workspace=workspace.root, checkpoint="none", model_spec=design.resolved(), config_path=config, device="cpu"
    )
    result = run_checks(CheckContext(opts), only=["single_batch_overfit"]).by_id()["single_batch_overfit"]
    assert result.status is Status.PASS, result.summary


@pytest.mark.slow
def test_a_mixture_of_experts_load_balancing_loss_is_named_not_failed(workspace, tmp_path):
    design = BY_ID["hf_mixtral_router_loss"]
    needs(design)
    report = run(workspace, design.resolved(), design.shape, tmp_path, only=["loss_matches_logits"])
    loss = report.by_id()["loss_matches_logits"]
    assert loss.status is Status.PASS and "does not depend on the logits" in loss.summary, loss.summary
    assert loss.values["known_terms"]["independent_of_logits"] > 0


NO_SHIFT_HF = """
import torch.nn.functional as F
from transformers import GPT2Config, GPT2LMHeadModel


class NoShiftGPT2(GPT2LMHeadModel):
    # the causal-LM loss written by hand, without the shift ForCausalLMLoss does
    def loss_function(self, logits, labels, vocab_size, **kwargs):
        return F.cross_entropy(logits.float().view(-1, vocab_size), labels.view(-1))


NoShiftGPT2Config = GPT2Config
"""


@pytest.mark.slow
def test_a_labels_loss_that_does_not_shift_is_named_from_what_was_measured(workspace, tmp_path):
    design = BY_ID["hf_gpt2"]
    needs(design)
    file = tmp_path / "no_shift_gpt2.py"
    file.write_text(NO_SHIFT_HF, encoding="utf-8")
    report = run(workspace, f"{file}:NoShiftGPT2", design.shape, tmp_path)
    loss = report.by_id()["loss_matches_logits"]
    assert loss.status is Status.FAIL and "labels are not shifted inside forward" in loss.summary, loss.summary
    assert set(model_alarms(report)) == {"loss_matches_logits"}, model_alarms(report)


def test_a_lecture_forward_that_flattens_its_logits_for_the_loss_is_read_back(workspace, tmp_path):
    # GIVEN Karpathy's lecture GPT: forward(idx, targets) returns logits viewed as (B*T, V)
    design = BY_ID["ng_video_lecture"]
    report = run(workspace, design.resolved(), design.shape, tmp_path, only=["forward_shapes"])
    shapes = report.by_id()["forward_shapes"]
    # THEN they are read as (B, T, V), and that is said
    assert shapes.status is Status.PASS, shapes.summary
    assert any("flattened to (B*T, V)" in n for n in shapes.values["notes"])


@pytest.mark.parametrize("design_id", ["mingpt", "llama2c", "rasbt_gpt"])
def test_a_model_without_a_config_attribute_is_sampled_at_the_runs_shape(workspace, tmp_path, design_id):
    # minGPT keeps no config, llama2.c calls it `params`, the book's GPT keeps none: the checks use the
    # config the model was built from
    design = BY_ID[design_id]
    report = run(workspace, design.resolved(), design.shape, tmp_path, only=["generation_repetition"])
    result = report.by_id()["generation_repetition"]
    assert result.status in (Status.PASS, Status.WARN) and "model contract" not in result.summary, result.summary


# -- broken variants: one public file, a minimal edit -------------------------------------------------


@dataclass(frozen=True)
class Broken:
    id: str
    design: str
    edits: tuple[tuple[str, str, int], ...]  # (old, new, how many times old occurs) applied to the file
    check: str
    phrase: str  # in the check's summary or its first cause
    shape: dict | None = None  # config changes, where the bug is in the config
    also: tuple[str, ...] = ()  # other checks the same bug rightly fails

    def apply(self, tmp_path: Path) -> str:
        design = BY_ID[self.design]
        if not self.edits:
            return design.resolved()
        file, _, rest = design.spec.partition(":")
        text = (ZOO / file).read_text(encoding="utf-8")
        for old, new, count in self.edits:
            assert text.count(old) == count, f"{old!r} occurs {text.count(old)} times in {file}"
            text = text.replace(old, new)
        folder = tmp_path / "edited"
        folder.mkdir(exist_ok=True)
        (folder / file).write_text(text, encoding="utf-8")
        return f"{folder / file}:{rest}"


BROKEN = [
    Broken(
        "nanogpt_repeated_block",
        "nanogpt",
        (
            (
                "nn.ModuleList([Block(config) for _ in range(config.n_layer)])",
                "nn.ModuleList([Block(config)] * config.n_layer)",
                1,
            ),
        ),
        "shared_modules",
        "transformer.h.0 = transformer.h.1",
    ),
    Broken(
        "nanogpt_attention_along_batch",
        "nanogpt",
        (("transpose(1, 2)", "transpose(0, 2)", 4),),  # heads and batch swapped: attention runs over rows
        "batch_independence",
        "rows of a batch see each other",
    ),
    Broken(
        "nanogpt_tie_on_the_tensors",
        "nanogpt",
        (
            (
                "self.transformer.wte.weight = self.lm_head.weight",
                "self.transformer.wte.weight.data = self.lm_head.weight.data",
                1,
            ),
        ),
        "shared_modules",
        "distinct parameters over the same memory",
    ),
    Broken(
        "nanogpt_dropout_as_keep_probability",
        "nanogpt",
        (),
        "dropout_rates",
        "keep probability",
        shape={"dropout": 0.9},
    ),
    Broken(
        "mingpt_mask_off_by_one",
        "mingpt",
        (
            (
                "torch.tril(torch.ones(config.block_size, config.block_size))",
                "torch.tril(torch.ones(config.block_size, config.block_size), diagonal=1)",
                1,
            ),
        ),
        "causal_independence",
        "sees the future",
    ),
    Broken(
        "mingpt_loss_on_probabilities",
        "mingpt",
        (
            (
                "F.cross_entropy(logits.view(-1, logits.size(-1))",
                "F.cross_entropy(F.softmax(logits, dim=-1).view(-1, logits.size(-1))",
                1,
            ),
        ),
        "loss_matches_logits",
        "probabilities",
    ),
    Broken(
        "ng_video_lecture_no_mask",
        "ng_video_lecture",
        (('wei = wei.masked_fill(self.tril[:T, :T] == 0, float("-inf"))', "pass", 1),),
        "causal_independence",
        "sees the future",
    ),
    Broken(
        "ng_video_lecture_softmax_over_queries",
        "ng_video_lecture",
        (("wei = F.softmax(wei, dim=-1)", "wei = F.softmax(wei, dim=1)", 1),),
        "causal_independence",
        "sees the future",
    ),
    Broken(
        "ng_video_lecture_norm_left_out",
        "ng_video_lecture",
        (("x = x + self.ffwd(self.ln2(x))", "x = x + self.ffwd(x)", 1),),
        "gradients",
        "ln2",
    ),
    Broken(
        "ng_video_lecture_logits_always_flat",
        "ng_video_lecture",
        (
            ("logits = self.lm_head(x)  # (B,T,vocab_size)", "logits = self.lm_head(x).flatten(0, 1)", 1),
            ("            B, T, C = logits.shape\n            logits = logits.view(B * T, C)\n", "", 1),
        ),
        "forward_shapes",
        "without targets returns logits of shape",
        also=("generation_repetition",),  # generation cannot read them either
    ),
    Broken(
        "build_nanogpt_double_shift",
        "build_nanogpt",
        (
            (
                "F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))",
                "F.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), targets[:, 1:].reshape(-1))",
                1,
            ),
        ),
        "loss_matches_logits",
        "double shift",
    ),
    Broken(
        "llama2c_zero_init",
        "llama2c",
        (("torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)", "torch.nn.init.zeros_(module.weight)", 2),),
        "gradients",
        "zero",
    ),
    Broken(
        "rasbt_gpt_position_table_as_plain_tensor",
        "rasbt_gpt",
        (
            (
                'self.pos_emb = nn.Embedding(cfg["context_length"], cfg["emb_dim"])',
                'self.pos_emb = torch.randn(cfg["context_length"], cfg["emb_dim"])',
                1,
            ),
            (
                "pos_embeds = self.pos_emb(torch.arange(seq_len, device=in_idx.device))",
                "pos_embeds = self.pos_emb[:seq_len]",
                1,
            ),
        ),
        "state_dict_complete",
        "pos_emb differs between the two builds",
    ),
    Broken(
        "rasbt_gpt_dropout_as_keep_probability",
        "rasbt_gpt",
        (('self.drop_emb = nn.Dropout(cfg["drop_rate"])', 'self.drop_emb = nn.Dropout(1 - cfg["drop_rate"])', 1),),
        "dropout_rates",
        "keep probability",
    ),
    Broken(
        "rasbt_llama3_frozen_embedding",
        "rasbt_llama3",
        (
            (
                'self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])',
                'self.tok_emb = nn.Embedding(cfg["vocab_size"], cfg["emb_dim"], dtype=cfg["dtype"])'
                ".requires_grad_(False)",
                1,
            ),
        ),
        "gradients",
        "tok_emb",
    ),
    Broken(
        "hf_gemma_pad_id_on_a_real_token",
        "hf_gemma",
        (),
        "gradients",
        "padding_idx=0 is a real token",
        shape={"pad_token_id": 0},  # Gemma's default: here ID 0 is '\n'
    ),
]


@pytest.mark.parametrize("broken", [slow_if_hf(b, BY_ID[b.design]) for b in BROKEN], ids=lambda b: b.id)
def test_a_minimal_edit_of_public_code_fails_the_check_that_names_it(workspace, tmp_path, broken):
    design = BY_ID[broken.design]
    needs(design)
    # GIVEN the public file with one bug edited in (or its config set the wrong way)
    spec = broken.apply(tmp_path)
    # WHEN every check runs on it
    report = run(workspace, spec, {**design.shape, **(broken.shape or {})}, tmp_path)
    # THEN the check that measures the broken property fails, naming it, and nothing unrelated does
    result = report.by_id()[broken.check]
    said = " ".join([result.summary, *result.causes[:1]])
    assert result.status is Status.FAIL and broken.phrase in said, f"{result.status.value}: {said}"
    assert set(model_alarms(report)) == {broken.check, *broken.also}, model_alarms(report)


# -- a forward the checks cannot call is refused, not judged ------------------------------------------


def test_a_forward_that_needs_positions_is_refused_saying_what_to_write(workspace, tmp_path, capsys):
    import importlib.util

    import torch

    from minigpt.cli import main

    # GIVEN Mistral's one-file reference: a working model whose forward needs the positions too
    file = ZOO / "mistral_one_file_ref.py"
    shape = {
        "dim": 32,
        "n_layers": 2,
        "head_dim": 16,
        "hidden_dim": 64,
        "n_heads": 2,
        "n_kv_heads": 1,
        "norm_eps": 1e-5,
    }
    vocab = CharTokenizer.from_file(workspace.tokenizer).vocab_size
    loader = importlib.util.spec_from_file_location("mistral_one_file_ref", file)
    assert loader is not None and loader.loader is not None
    mistral = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(mistral)
    # run as its own loader runs it: half precision, a cache for one sequence
    model = mistral.Transformer(mistral.ModelArgs(vocab_size=vocab, max_batch_size=1, **shape)).half()
    assert model(torch.zeros(1, 8, dtype=torch.long), torch.arange(8)).shape == (1, 8, vocab)
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"vocab_size": vocab, **shape}))
    # WHEN it is checked
    argv = ["check", "--workspace", str(workspace.root), "--model", f"{file}:Transformer:ModelArgs"]
    code = main([*argv, "--config", str(config), "--device", "cpu", "--skip-overfit"])
    out = capsys.readouterr().out
    # THEN it is refused before anything runs, saying what the checks would need and what to write
    assert code == 2
    assert "needs positions, which the checks cannot supply" in out, out
    assert "wrap the model" in out


# -- parameters over one memory: a tie is one Parameter, never two over the same memory ----------------


def test_parameters_that_are_disjoint_views_of_one_buffer_are_not_aliases():
    import torch
    import torch.nn as nn

    from minigpt.checks.invariant_checks import _aliased

    # GIVEN parameters carved out of one flat buffer without overlap (as FSDP's flat parameters are)
    flat = torch.zeros(20)
    model = nn.Module()
    model.a = nn.Parameter(flat[:10])
    model.b = nn.Parameter(flat[10:])
    assert _aliased(model) == []
    # WHEN one overlaps another, THEN the pair is named
    model.c = nn.Parameter(flat[5:15])
    assert _aliased(model) == [["a", "c"], ["c", "b"]]
