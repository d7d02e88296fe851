"""Generation cases on a local DeepSeek-V2/V3 checkpoint, checked against transformers' own implementation.

Two tiny random models are built with transformers (DeepseekV3: q_lora_rank set, sigmoid router with its
bias and groups; DeepseekV2: one q_proj as V2-Lite, softmax group-limited router; both 16 heads, the
kernel's 512 + 64 geometry, 3 layers of which the last two are MoE with a shared expert, YaRN with
factor 8 and mscale != mscale_all_dim) and saved as bf16 safetensors; ddbench reads them back and must give
transformers' logits and greedy tokens. The V3 folder's config is rewritten the way DeepSeek's checkpoints
write it (`rope_theta` + `rope_scaling`), the V2 one keeps transformers 5's `rope_parameters`.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import math
import shutil
from pathlib import Path

import jsonschema
import pytest
import torch
from click.testing import CliRunner
from safetensors import safe_open
from safetensors.torch import load_file, save_file
from transformers import DeepseekV2Config, DeepseekV2ForCausalLM, DeepseekV3Config, DeepseekV3ForCausalLM

from ddbench.backends.cost import generation_calls, model_bytes
from ddbench.backends.reference import ReferenceBackend
from ddbench.cli.main import cli
from ddbench.generation import checkpoint as checkpoint_module
from ddbench.generation.checkpoint import CheckpointError, load_checkpoint_model
from ddbench.generation.decode import Workload, decode, prompts
from ddbench.generation.deepseek_rope import DeepseekRope
from ddbench.generation.eagle_tree import eagle_tree_builder
from ddbench.generation.greedy_accept import accept_greedy
from ddbench.inputs.suite_file import load_suite_file
from ddbench.metrics.generation_gates import agreement
from ddbench.mla import KV_LORA_RANK
from ddbench.trees import tree_q_len

EAGLE_BUILD, _ = eagle_tree_builder()  # the loop needs one; these trees are DDTree

RESULTS_SCHEMA = json.loads((Path(__file__).parents[1] / "ddbench/results/results.schema.json").read_text())
# factor 8 over an original context of 16 tokens: every rope pair past the 4th is interpolated at these
# positions, so a loader that ignores the scaling moves the logits a lot; mscale != mscale_all_dim puts a
# factor of 1.053 on cos and sin.
YARN = {
    "rope_type": "yarn",
    "rope_theta": 10000.0,
    "factor": 8.0,
    "original_max_position_embeddings": 16,
    "beta_fast": 32.0,
    "beta_slow": 1.0,
    "mscale": 1.0,
    "mscale_all_dim": 0.707,
}
COMMON = {
    "vocab_size": 256,
    "hidden_size": 128,
    "intermediate_size": 256,
    "moe_intermediate_size": 64,
    "num_hidden_layers": 3,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "n_shared_experts": 1,
    "n_routed_experts": 4,
    "num_experts_per_tok": 2,
    "first_k_dense_replace": 1,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "qk_nope_head_dim": 32,
    "v_head_dim": 32,
    "max_position_embeddings": 128,
    "bos_token_id": 0,
    "eos_token_id": None,
    # 0.1 (not 0.02): the attention peaks as a trained model's does, so the rope's mistakes show clearly.
    "initializer_range": 0.1,
}
HEADS = 16
SEQ = 40
FP32_TOL = 1e-4  # float32 end to end (observed below 1e-5): rounding, nothing else
# bf16 keeps 8 significant bits: the queries and KV rows the kernel gets are each rounded by up to 2^-9
# relative, which moves these logits by up to ~3 % of their standard deviation (measured: 0.031-0.033 on a
# std of 1.12); the bound is 2^-4 (6 %) of it. Each mistake below moves them by 50 % or more.
BF16_TOL_OF_STD = 2**-4


def _v3() -> torch.nn.Module:
    config = DeepseekV3Config(
        **COMMON,
        rope_parameters=dict(YARN),
        q_lora_rank=96,
        n_group=2,
        topk_group=1,
        norm_topk_prob=True,
        routed_scaling_factor=2.5,
        num_mtp_layers=0,
    )
    model = DeepseekV3ForCausalLM(config)
    with torch.no_grad():  # a non-zero selection bias, so ignoring it (or using it as a weight) shows
        for layer in model.model.layers[1:]:
            layer.mlp.gate.e_score_correction_bias.normal_(0, 0.1)
    return model


def _v2() -> torch.nn.Module:
    config = DeepseekV2Config(
        **COMMON,
        rope_parameters=dict(YARN),
        q_lora_rank=None,
        n_group=2,
        topk_group=1,
        topk_method="group_limited_greedy",
        norm_topk_prob=False,  # transformers' V2 router never normalizes: the one setting both read alike
        routed_scaling_factor=1.5,
    )
    return DeepseekV2ForCausalLM(config)


def _v2_lite() -> torch.nn.Module:
    """DeepSeek-V2-Lite's choices: one q_proj, plain greedy top-k over softmax scores."""
    config = DeepseekV2Config(
        **COMMON,
        rope_parameters=dict(YARN),
        q_lora_rank=None,
        n_group=1,
        topk_group=1,
        topk_method="greedy",
        norm_topk_prob=False,
        routed_scaling_factor=1.0,
    )
    return DeepseekV2ForCausalLM(config)


def _deepseek_config(folder: Path) -> None:
    """Rewrite transformers' `rope_parameters` as DeepSeek's own config.json writes it."""
    config = json.loads((folder / "config.json").read_text())
    rope = config.pop("rope_parameters")
    config["rope_theta"] = rope.pop("rope_theta")
    rope["type"] = rope.pop("rope_type")
    config["rope_scaling"] = rope
    (folder / "config.json").write_text(json.dumps(config, indent=1))


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, tuple[torch.nn.Module, Path]]:
    """kind -> (transformers' float32 model, its folder in bf16); the weights are bf16 values in both."""
    out = {}
    for kind, build in (("v3", _v3), ("v2", _v2), ("v2-lite", _v2_lite)):
        torch.manual_seed(0)
        model = build().eval()
        with torch.no_grad():
            for tensor in model.state_dict().values():  # parameters and saved buffers, not inv_freq
                tensor.copy_(tensor.bfloat16().float())
        folder = tmp_path_factory.mktemp(kind) / "ckpt"
        copy.deepcopy(model).to(torch.bfloat16).save_pretrained(folder)
        if kind == "v3":
            _deepseek_config(folder)
        out[kind] = (model, folder)
    return out


def _exact(sm_scale: float):
    """Causal attention over the call's own rows, in float64: the model's error, not a kernel's."""

    def attend(layer: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        scores = torch.einsum("nhd,kd->hnk", q.double(), kv.double()) * sm_scale
        n = q.shape[0]
        scores = scores.masked_fill(~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
        return torch.einsum("hnk,kd->nhd", scores.softmax(-1), kv.double()[:, :KV_LORA_RANK])

    return attend


def _sequence() -> torch.Tensor:
    g = torch.Generator().manual_seed(1)
    return torch.cat([torch.tensor([0]), torch.randint(1, 256, (SEQ - 1,), generator=g)])


def _reference_logits(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        return model(_sequence()[None]).logits[0].float()


def _logits(model, kv_dtype: torch.dtype = torch.float32) -> torch.Tensor:
    model.kv_dtype = kv_dtype
    return model.forward(_sequence(), torch.arange(SEQ), _exact(model.shape.sm_scale))


@pytest.mark.parametrize("kind", ["v3", "v2", "v2-lite"])
def test_logits_equal_transformers_in_float32_and_within_bf16_rounding_in_the_kernel_layout(
    checkpoints, kind
):
    hf, folder = checkpoints[kind]
    reference = _reference_logits(hf)
    model = load_checkpoint_model(folder, None, HEADS)
    assert model.shape.sm_scale == pytest.approx(hf.model.layers[0].self_attn.scaling, rel=1e-12)
    assert (_logits(model) - reference).abs().max() < FP32_TOL
    bf16 = (_logits(model, torch.bfloat16) - reference).abs().max()
    assert bf16 < BF16_TOL_OF_STD * reference.std()


def test_a_sharded_checkpoint_and_kimi_k2_s_model_type_read_the_same_model(checkpoints, tmp_path):
    hf, folder = checkpoints["v3"]
    sharded = tmp_path / "sharded"
    copy.deepcopy(hf).to(torch.bfloat16).save_pretrained(sharded, max_shard_size="1MB")
    _deepseek_config(sharded)
    index = json.loads((sharded / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2 and not (sharded / "model.safetensors").exists()
    config = json.loads((sharded / "config.json").read_text())
    (sharded / "config.json").write_text(json.dumps(config | {"model_type": "kimi_k2"}))
    model = load_checkpoint_model(sharded, None, HEADS)
    assert torch.equal(_logits(model), _logits(load_checkpoint_model(folder, None, HEADS)))
    del index["weight_map"][KV_B]
    (sharded / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(CheckpointError, match="the index names no shard") as err:
        load_checkpoint_model(sharded, None, HEADS)
    assert err.value.path == KV_B and err.value.file.endswith("model.safetensors.index.json")


def _without_rope_scaling(folder: Path, tmp: Path) -> Path:
    other = tmp / "no-rope-scaling"
    shutil.copytree(folder, other)
    config = json.loads((other / "config.json").read_text())
    config.pop("rope_scaling", None)
    config["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
    (other / "config.json").write_text(json.dumps(config))
    return other


def _neox(model):
    model.rope = DeepseekRope(dataclasses.replace(model.rope.config, interleaved=False))


def _no_cos_scale(model):
    class Unscaled(DeepseekRope):
        def cos_sin_scale(self) -> float:
            return 1.0

    model.rope = Unscaled(model.rope.config)


def _no_mscale(model):
    model.shape = dataclasses.replace(model.shape, sm_scale=model.config.qk_head_dim**-0.5)


@pytest.mark.parametrize(
    "mistake",
    ["rope_scaling ignored", "rope not interleaved", "yarn cos/sin scale dropped", "sm_scale without mscale"],
)
@pytest.mark.parametrize("kind", ["v3", "v2"])
def test_a_model_with_the_rope_or_scale_wrong_fails_the_same_comparison(checkpoints, kind, mistake, tmp_path):
    hf, folder = checkpoints[kind]
    reference = _reference_logits(hf)
    if mistake == "rope_scaling ignored":
        model = load_checkpoint_model(_without_rope_scaling(folder, tmp_path), None, HEADS)
    else:
        model = load_checkpoint_model(folder, None, HEADS)
        {"rope not interleaved": _neox, "yarn cos/sin scale dropped": _no_cos_scale}.get(mistake, _no_mscale)(
            model
        )
    assert (_logits(model) - reference).abs().max() > 100 * FP32_TOL
    assert (_logits(model, torch.bfloat16) - reference).abs().max() > 4 * BF16_TOL_OF_STD * reference.std()


class _Recording(ReferenceBackend):
    """The float32 reference, noting the heads and sm_scale of every call it gets."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: set[tuple[int, float]] = set()

    def run(self, inputs):
        self.calls.add((inputs.q_extend.shape[1], inputs.sm_scale))
        return super().run(inputs)


def _walk(drafts, predicts):
    return [accept_greedy(d, p) for d, p in zip(drafts, predicts, strict=True)]


def _generate(hf, prompt: list[int], new_tokens: int) -> tuple[list[int], list[float]]:
    ids = torch.tensor([prompt])
    with torch.no_grad():
        out = hf.generate(
            ids,
            attention_mask=torch.ones_like(ids),  # BOS is token 0: never let it be taken for padding
            do_sample=False,
            max_new_tokens=new_tokens,
            eos_token_id=None,
            pad_token_id=None,
            output_logits=True,
            return_dict_in_generate=True,
        )
    top = torch.stack([step[0] for step in out.logits]).topk(2, dim=-1).values
    return out.sequences[0, len(prompt) :].tolist(), (top[:, 0] - top[:, 1]).tolist()


@pytest.mark.parametrize("kind", ["v3", "v2"])
def test_speculative_decoding_generates_transformers_greedy_tokens(checkpoints, kind):
    """Through decode.py (pool, tree drafts, verify calls, acceptance, BOS from the config): exactly
    transformers' tokens with a float32 pool, where the only difference is rounding; with the kernel's bf16
    layout, the same tokens up to the first near-tie (both top-2 margins below the bf16 bound)."""
    hf, folder = checkpoints[kind]
    tree = {"kind": "ddtree", "budget": 8}
    workload = Workload((9, 17), 16, tree, tree_q_len(tree), 1, 0.25, 0)
    model = load_checkpoint_model(folder, None, HEADS // 2)
    expected = [_generate(hf, p, 16) for p in prompts(workload, model.shape.vocab, model.bos)]
    tokens, margins = [t for t, _ in expected], [m for _, m in expected]
    assert min(min(m) for m in margins) > 10 * FP32_TOL  # the comparison can tell a flip from rounding
    model.kv_dtype = torch.float32
    backend = _Recording()
    exact = decode(model, workload, backend, _walk, EAGLE_BUILD, torch.device("cpu"))
    assert exact.error is None and exact.tokens == tokens
    # every verify call: one TP rank's 8 heads, the checkpoint's own softmax scale (the one transformers uses)
    assert backend.calls == {(HEADS // 2, hf.model.layers[0].self_attn.scaling)}
    assert exact.steps < 32  # drafts were accepted: the speculative path ran, not one token a step
    model.kv_dtype = torch.bfloat16
    served = decode(model, workload, ReferenceBackend(), _walk, EAGLE_BUILD, torch.device("cpu"))
    tau = 2 * BF16_TOL_OF_STD * float(_reference_logits(hf).std())
    found = agreement(served.tokens, served.margins, tokens, margins, tau)
    assert served.error is None and (found.divergence is None or found.tie), found


def test_head_groups_of_tp2_give_the_logits_of_one_group(checkpoints):
    _, folder = checkpoints["v3"]
    whole, split = load_checkpoint_model(folder, None, HEADS), load_checkpoint_model(folder, None, HEADS // 2)
    calls = []

    def counting(layer: int, q: torch.Tensor, kv: torch.Tensor) -> torch.Tensor:
        calls.append((layer, q.shape[1]))
        return _exact(split.shape.sm_scale)(layer, q, kv)

    split.kv_dtype = torch.float32
    assert torch.equal(split.forward(_sequence(), torch.arange(SEQ), counting), _logits(whole))
    assert calls == [(layer, HEADS // 2) for layer in range(3) for _ in range(2)]
    assert split.head_groups == 2


def _fp8_blocks(weight: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(fp8 weight, float32 scale_inv per block, the bf16 the pair stands for), as DeepSeek-V3 stores them."""
    rows, cols = weight.shape
    br, bc = -(-rows // block), -(-cols // block)
    padded = torch.zeros(br * block, bc * block)
    padded[:rows, :cols] = weight.float()
    scale = padded.view(br, block, bc, block).abs().amax(dim=(1, 3)).clamp(min=1e-12) / 448.0
    full = scale.repeat_interleave(block, 0)[:rows].repeat_interleave(block, 1)[:, :cols]
    quantized = (weight.float() / full).to(torch.float8_e4m3fn)
    return quantized, scale, (quantized.float() * full).to(torch.bfloat16)


def _fp8_folders(folder: Path, tmp: Path) -> tuple[Path, Path]:
    """The checkpoint with every projection and expert in fp8 (the router, norms, embedding and head stay
    bf16, as DeepSeek-V3 keeps them), and a bf16 twin holding exactly the values the fp8 blocks stand for."""
    fp8, twin = tmp / "fp8", tmp / "twin"
    shutil.copytree(folder, fp8)
    shutil.copytree(folder, twin)
    tensors = load_file(folder / "model.safetensors")
    quantized, dequantized = {}, {}
    for name, weight in tensors.items():
        skip = ("embed_tokens", "lm_head", "layernorm", "model.norm", "mlp.gate.")
        if weight.dim() != 2 or any(s in name for s in skip):
            quantized[name] = dequantized[name] = weight
            continue
        quantized[name], quantized[name + "_scale_inv"], dequantized[name] = _fp8_blocks(weight)
    save_file(quantized, fp8 / "model.safetensors", metadata={"format": "pt"})
    save_file(dequantized, twin / "model.safetensors", metadata={"format": "pt"})
    config = json.loads((fp8 / "config.json").read_text())
    config["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}
    (fp8 / "config.json").write_text(json.dumps(config))
    return fp8, twin


def test_an_fp8_block_checkpoint_dequantizes_exactly_and_stays_within_fp8_error(checkpoints, tmp_path):
    hf, folder = checkpoints["v3"]
    fp8, twin = _fp8_folders(folder, tmp_path)
    with safe_open(str(fp8 / "model.safetensors"), "pt") as f:
        kv_b = "model.layers.1.self_attn.kv_b_proj.weight"
        assert f.get_tensor(kv_b).dtype == torch.float8_e4m3fn
        assert f.get_tensor(kv_b + "_scale_inv").shape == (8, 4)  # blocks both ways: orientation shows
    logits = _logits(load_checkpoint_model(fp8, None, HEADS))
    assert torch.equal(logits, _logits(load_checkpoint_model(twin, None, HEADS)))
    # Against the unquantized weights: e4m3 keeps 4 significant bits (up to 2^-4 relative per weight), which
    # moves this small, sensitive model's logits by 0.14 on average (12 % of their std; max 1.16). Dequantized
    # with its scales a block row off, flipped, or averaged, the mean is 0.29-0.36: the bound sits between;
    # the exact comparison with the twin above is the sharp one.
    reference = _reference_logits(hf)
    assert (logits - reference).abs().mean() < 0.2 * reference.std()


def test_only_the_capped_layers_are_read_and_the_estimate_counts_their_bytes(checkpoints, tmp_path):
    _, folder = checkpoints["v3"]
    partial = tmp_path / "ckpt"
    shutil.copytree(folder, partial)
    tensors = load_file(partial / "model.safetensors")
    kept = {n: t for n, t in tensors.items() if not n.startswith("model.layers.2.")}
    save_file(kept, partial / "model.safetensors", metadata={"format": "pt"})
    model = load_checkpoint_model(partial, 2, HEADS)
    assert model.shape.layers == 2
    with pytest.raises(CheckpointError, match="missing") as err:
        load_checkpoint_model(partial, None, HEADS)  # all 3 layers
    assert err.value.path.startswith("model.layers.2.")
    suite = _suite(tmp_path, generation={"checkpoint": "ckpt", "layers": 2, "new_tokens": 4})
    (case,) = load_suite_file(suite).cases
    held = sum(t.numel() * t.element_size() for t in kept.values())
    info = case.generation.checkpoint
    assert model_bytes(case) == held + info.working_bytes
    assert generation_calls(case) == 2 * 2 * 2 * math.ceil(4 / 1.5)  # twice, 2 layers, 2 head groups, steps
    assert case.heads_per_rank == HEADS // 2 and case.model.sm_scale == model.shape.sm_scale


def _suite(tmp_path: Path, **fields: object) -> Path:
    case = {
        "label": "tiny",
        "layout": {"tp": 2},
        "batch_size": 2,
        "prefix": [9, 17],
        "page_size": 1,
        "seed": 3,
        "tree": {"kind": "ddtree", "budget": 8},
        "generation": {"checkpoint": "ckpt", "new_tokens": 8, "min_accept_length": 1.5},
        "backends": ["reference-fp64", "reference", "cuda-emu"],
        "parity": [{"candidate": "*", "against": "reference-fp64", "max_logit_abs": 0.25}],
    }
    case.update(fields)
    path = tmp_path / "suite.json"
    path.write_text(json.dumps({"name": "ckpt", "cases": [case]}))
    return path


def _edit_config(**changes: object):
    def edit(folder: Path) -> None:
        config = json.loads((folder / "config.json").read_text())
        for key, value in changes.items():
            if value is ...:
                config.pop(key)
            else:
                config[key] = value
        (folder / "config.json").write_text(json.dumps(config))

    return edit


def _edit_tensor(name: str, replacement: torch.Tensor | None):
    def edit(folder: Path) -> None:
        tensors = load_file(folder / "model.safetensors")
        if replacement is None:
            del tensors[name]
        else:
            tensors[name] = replacement
        save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})

    return edit


def _truncate(path: Path, cut: int) -> None:
    with path.open("r+b") as f:
        f.truncate(path.stat().st_size - cut)


KV_B = "model.layers.1.self_attn.kv_b_proj.weight"
REFUSALS = [
    ("absent", {"generation": {"checkpoint": "nowhere"}}, None, "generation.checkpoint", "no such folder"),
    (
        "hub-id",
        {"generation": {"checkpoint": "deepseek-ai/DeepSeek-V2-Lite"}},
        None,
        "generation.checkpoint",
        "ddbench never downloads weights: give a local folder",
    ),
    (
        "url",
        {"generation": {"checkpoint": "https://huggingface.co/deepseek-ai/DeepSeek-V2-Lite"}},
        None,
        "generation.checkpoint",
        "is not a local folder; ddbench never downloads weights",
    ),
    ("no-config", {}, lambda f: (f / "config.json").unlink(), "generation.checkpoint", "no config.json"),
    (
        "no-weights",
        {},
        lambda f: (f / "model.safetensors").unlink(),
        "generation.checkpoint",
        "no model.safetensors",
    ),
    ("model-type", {}, _edit_config(model_type="llama"), "model_type", "is not a model type ddbench reads"),
    ("missing-field", {}, _edit_config(num_attention_heads=...), "num_attention_heads", "missing"),
    ("wrong-type", {}, _edit_config(hidden_size="128"), "hidden_size", "must be an integer"),
    ("latent", {}, _edit_config(kv_lora_rank=256), "kv_lora_rank", "serves a 512-wide latent only"),
    (
        "rope-dim",
        {},
        _edit_config(qk_rope_head_dim=32),
        "qk_rope_head_dim",
        "serves a 64-wide rope part only",
    ),
    ("tensor-missing", {}, _edit_tensor(KV_B, None), KV_B, "missing"),
    (
        "tensor-shape",
        {},
        _edit_tensor(KV_B, torch.zeros(512, 512, dtype=torch.bfloat16)),
        KV_B,
        "has shape [512, 512]",
    ),
    ("tp", {"layout": {"tp": 3}}, None, "layout", "num_attention_heads 16 of checkpoint 'ckpt' do not split"),
    (
        "hidden",
        {"generation": {"checkpoint": "ckpt", "hidden": 64}},
        None,
        "generation.hidden",
        "comes from checkpoint 'ckpt' (128); leave it out",
    ),
    (
        "layers",
        {"generation": {"checkpoint": "ckpt", "layers": 4}},
        None,
        "generation.layers",
        "has 3 layers",
    ),
    ("truncated", {}, lambda f: _truncate(f / "model.safetensors", 4096), "model.safetensors", "truncated"),
    ("preset-typo", {"model": "kimi-k2.66"}, None, "model", "unknown model preset 'kimi-k2.66'"),
]


@pytest.mark.parametrize(
    ("fields", "edit", "where", "reason"), [r[1:] for r in REFUSALS], ids=[r[0] for r in REFUSALS]
)
def test_a_checkpoint_that_cannot_serve_is_refused_by_ddbench_run(
    checkpoints, tmp_path, fields, edit, where, reason
):
    shutil.copytree(checkpoints["v3"][1], tmp_path / "ckpt")
    if edit is not None:
        edit(tmp_path / "ckpt")
    suite = _suite(tmp_path, **fields)
    result = CliRunner().invoke(cli, ["run", str(suite)])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())  # the console wraps long lines
    assert str(suite) in text and "cases[0]" in text, text
    assert where in text and reason in text, text


def test_a_shard_that_changes_after_the_suite_loaded_is_refused_when_read(checkpoints, tmp_path, monkeypatch):
    """The suite loader checked the headers; the reader checks the bytes it reads; `ddbench run` exits 2."""
    shutil.copytree(checkpoints["v3"][1], tmp_path / "ckpt")
    planned = checkpoint_module.plan_tensors

    def plan_then_truncate(*args, **kwargs):
        plan = planned(*args, **kwargs)
        _truncate(tmp_path / "ckpt" / "model.safetensors", 1 << 20)
        return plan

    monkeypatch.setattr(checkpoint_module, "plan_tensors", plan_then_truncate)
    result = CliRunner().invoke(cli, ["run", str(_suite(tmp_path))])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "ckpt/model.safetensors: " in text and "truncated:" in text and "the file changed" in text, text


def test_a_whole_run_on_a_checkpoint_passes_its_gates_and_records_the_model(checkpoints, tmp_path):
    shutil.copytree(checkpoints["v3"][1], tmp_path / "ckpt")
    out = tmp_path / "results.json"
    # tau 0.2, not 0.05: in this small MoE model a token's experts can change between two correct runs whose
    # pools differ by rounding. Measured at tau 0.05: cuda-emu parts from fp64 at request 1 token 7 with
    # margins 0.002 and 0.15 while its teacher-forced error stays at 0.02; the same model without MoE layers
    # gives 16/16 equal tokens on seeds 3, 4 and 5.
    generation = {"checkpoint": "ckpt", "new_tokens": 8, "min_accept_length": 1.5, "tie_margin": 0.2}
    result = CliRunner().invoke(
        cli, ["run", str(_suite(tmp_path, generation=generation)), "--json", str(out)]
    )
    assert "Traceback" not in result.output, result.output
    document = json.loads(out.read_text())
    jsonschema.validate(document, RESULTS_SCHEMA)
    assert result.exit_code == 0, result.output
    (case,) = document["cases"]
    assert {p["candidate"]: p["status"] for p in case["pairs"]} == {"reference": "pass", "cuda-emu": "pass"}
    record = case["generation"]["checkpoint"]
    expected_scale = 96**-0.5 * (0.1 * 0.707 * math.log(8.0) + 1) ** 2
    assert record["sm_scale"] == pytest.approx(expected_scale, rel=1e-12)
    assert (record["heads"], record["heads_per_call"], record["head_groups"], record["layers"]) == (
        16,
        8,
        2,
        3,
    )
    assert case["case"]["model"] == {"name": "deepseek_v3", "heads": 16, "sm_scale": record["sm_scale"]}
    assert case["case"]["generation"]["checkpoint"] == {
        "path": "ckpt",
        "model_type": "deepseek_v3",
        "heads": 16,
    }
