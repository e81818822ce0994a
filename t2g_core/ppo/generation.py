"""Rollout generation backends (``exact``, ``hf``, ``vllm``), chosen by ``ppo.generation_backend`` through
:data:`BACKENDS`; all sample ``ppo.sampling`` exactly. What each guarantees: docs/ppo.md, "Generation backends".
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor

from t2g_core.models.loading import dtype_name, split_revision
from t2g_core.ppo.sampling import sample_responses, sample_seed


class Backend(Protocol):
    def sync(self, policy) -> None:
        """Make the generator sample from ``policy``'s current weights."""
        ...

    def generate(
        self, model, query_ids: Tensor, query_mask: Tensor, seeds: list[int], stream: int
    ) -> Tensor:  # (B, Lq), (B, Lq) -> response ids (B, T), PAD after the first EOS
        """``seeds``: one per sample (global index); ``stream``: one per call (step and process)."""
        ...


class ExactBackend:
    def __init__(self, cfg, tokenizer, **_):
        self.cfg, self.tok = cfg, tokenizer

    def sync(self, policy) -> None:  # samples from the policy itself
        return None

    def generate(self, model, query_ids: Tensor, query_mask: Tensor, seeds: list[int], stream: int) -> Tensor:
        return sample_responses(
            model,
            query_ids,
            query_mask,
            max_new_tokens=self.cfg.sampling.max_new_tokens,
            sampling=self.cfg.sampling,
            eos_token_id=self.tok.eos_token_id,
            pad_token_id=self.tok.pad_token_id,
            seeds=seeds,
        )


def rollout_sampling(cfg, tokenizer):
    """A ``GenerationConfig`` that samples ``cfg.sampling`` exactly (temperature, then top-k, then top-p: transformers'
    own warper order): every other warper is set to its neutral value, so a model's own ``generation_config.json``
    (Llama 3.1 Instruct ships temperature 0.6, top_p 0.9) cannot change the rollout distribution."""
    from transformers import GenerationConfig

    sampling = cfg.sampling
    return GenerationConfig(
        do_sample=True,
        temperature=sampling.temperature,
        top_k=sampling.top_k,
        top_p=sampling.top_p,
        min_p=None,
        typical_p=1.0,
        epsilon_cutoff=0.0,
        eta_cutoff=0.0,
        repetition_penalty=1.0,
        no_repeat_ngram_size=0,
        num_beams=1,
        max_new_tokens=cfg.sampling.max_new_tokens,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        use_cache=True,
    )


def pad_after_eos(rows: Sequence[Sequence[int]], eos: int, pad: int, device=None) -> Tensor:  # -> (B, T)
    """Token lists (each cut after its first EOS) as a right-padded (B, T) tensor."""
    cut = [ids[: ids.index(eos) + 1] if eos in ids else ids for ids in map(list, rows)]
    width = max((len(r) for r in cut), default=0) or 1
    out = torch.full((len(cut), width), pad, dtype=torch.long, device=device)
    for i, ids in enumerate(cut):
        out[i, : len(ids)] = torch.tensor(ids, dtype=torch.long, device=device)
    return out


class HFBackend:
    def __init__(self, cfg, tokenizer, **_):
        self.cfg, self.tok = cfg, tokenizer
        self.generation_config = rollout_sampling(cfg, tokenizer)

    def sync(self, policy) -> None:  # samples from the policy itself
        return None

    @torch.no_grad()
    def generate(self, model, query_ids: Tensor, query_mask: Tensor, seeds: list[int], stream: int) -> Tensor:
        torch.manual_seed(stream)  # seeds every device's default generator, the one generate samples from
        out = model.generate(
            input_ids=query_ids, attention_mask=query_mask.long(), generation_config=self.generation_config
        )
        new = out[:, query_ids.shape[1] :]
        return pad_after_eos(new.tolist(), self.tok.eos_token_id, self.tok.pad_token_id, device=query_ids.device)


VLLM_DTYPES = {torch.bfloat16: "bfloat16", torch.float16: "float16"}  # the dtypes vLLM's LoRA kernels take


def vllm_dtype(dtype: torch.dtype) -> str:
    """vLLM's name for the policy's weights dtype; float32 (and anything else) is refused with the way out, never
    replaced: vLLM would load the checkpoint's own dtype and sample from weights the trainer does not have."""
    if dtype in VLLM_DTYPES:
        return VLLM_DTYPES[dtype]
    raise ValueError(
        f"ppo.generation_backend=vllm cannot sample in models.dtype={dtype_name(dtype)}: vLLM's LoRA kernels take "
        f"{' or '.join(VLLM_DTYPES.values())} only; set models.dtype=bfloat16 (float16 on a GPU without bfloat16), "
        "or use generation_backend=hf"
    )


def vllm_sampling(cfg, eos_token_id: int, seed: int) -> dict:
    """vLLM ``SamplingParams`` arguments for one sample of ``cfg.sampling``: vLLM applies temperature, then top-k,
    then top-p, renormalised (as transformers does); its "no top-k" is -1."""
    sampling = cfg.sampling
    return {
        "temperature": sampling.temperature,
        "top_k": sampling.top_k or -1,
        "top_p": sampling.top_p,
        "min_p": 0.0,
        "repetition_penalty": 1.0,
        "max_tokens": cfg.sampling.max_new_tokens,
        "seed": seed,
        "ignore_eos": True,  # the model's own EOS list may differ from the tokenizer's EOS: stop on ours only
        "stop_token_ids": [eos_token_id],
    }


class VllmBackend:
    """A colocated vLLM engine sampling from the base (in the policy's dtype) + the policy's current LoRA adapter."""

    def __init__(self, cfg, tokenizer, *, model_ref: str, dtype: torch.dtype, workdir: Path, rank: int = 0):
        vllm_name = vllm_dtype(dtype)  # a dtype vLLM cannot honour is refused before vLLM is even imported
        try:
            from vllm import LLM
        except ImportError:
            raise ImportError(
                "ppo.generation_backend=vllm needs vLLM: pip install 'text2grad[vllm]' (GPU machines only; see "
                "docs/gpu.md), or use generation_backend=hf"
            ) from None

        name, revision = split_revision(model_ref)
        self.cfg, self.tok = cfg, tokenizer
        self.workdir = Path(workdir) / f"vllm-lora-rank{rank}"
        self.version, self.request = 0, None
        self.llm = LLM(
            model=name,
            revision=revision,
            tokenizer=name,
            dtype=vllm_name,
            enable_lora=True,
            max_lora_rank=max(cfg.lora.r, 8),
            max_loras=1,
            gpu_memory_utilization=cfg.vllm_gpu_memory_utilization,
            seed=cfg.seed,
        )

    def sync(self, policy) -> None:
        """Save the adapter and point a new ``LoRARequest`` at it (a new id makes vLLM load the new weights)."""
        from vllm.lora.request import LoRARequest

        self.version += 1
        folder = self.workdir / f"v{self.version}"
        policy.save_pretrained(folder, save_embedding_layers=False)
        self.request = LoRARequest(f"policy-v{self.version}", self.version, str(folder))
        shutil.rmtree(self.workdir / f"v{self.version - 1}", ignore_errors=True)

    def generate(self, model, query_ids: Tensor, query_mask: Tensor, seeds: list[int], stream: int) -> Tensor:
        from vllm import SamplingParams

        prompts = [{"prompt_token_ids": q[m].tolist()} for q, m in zip(query_ids, query_mask.bool(), strict=True)]
        params = [SamplingParams(**vllm_sampling(self.cfg, self.tok.eos_token_id, s)) for s in seeds]
        outs = self.llm.generate(prompts, params, lora_request=self.request, use_tqdm=False)
        rows = []
        for o in outs:
            ids = list(o.outputs[0].token_ids)
            if o.outputs[0].finish_reason == "stop" and (not ids or ids[-1] != self.tok.eos_token_id):
                ids.append(self.tok.eos_token_id)  # a stop token may be left out of the returned ids
            rows.append(ids)
        return pad_after_eos(rows, self.tok.eos_token_id, self.tok.pad_token_id, device=query_ids.device)


BACKENDS = {"exact": ExactBackend, "hf": HFBackend, "vllm": VllmBackend}


def make_backend(cfg, tokenizer, *, model_ref: str, dtype: torch.dtype, workdir: Path, rank: int = 0) -> Backend:
    """The ``ppo.generation_backend`` for a policy whose base weights are in ``dtype`` (a resolved ``torch.dtype``)."""
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype {dtype!r}: expected the policy's torch.dtype (a stage resolves models.dtype once)")
    return BACKENDS[cfg.generation_backend](
        cfg, tokenizer, model_ref=str(model_ref), dtype=dtype, workdir=workdir, rank=rank
    )


def stream_seed(seed: int, step: int, rank: int) -> int:
    """The seed of one backend call: distinct per (run seed, step, process)."""
    return sample_seed(seed + 17, step, rank) % (2**63 - 1)
