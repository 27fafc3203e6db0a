"""A Llama-style decoder stack in plain PyTorch, sized from a catalog model, for timing only.

Each layer is RMSNorm, a fused QKV projection with grouped-query heads, rotary embedding,
attention through `scaled_dot_product_attention`, the output projection, RMSNorm and a gated
(SiLU) MLP, with residual adds: the operator mix of Llama-2/3 and Mistral. Weights are random (no
downloads); values do not change the time of dense kernels. Only a few layers are built; the
benchmark times them and scales to the model's depth (`calibration.bench`).

`ModelDims` adds what `sim.costs.catalog.ModelSpec` leaves out: the MLP width (from the published
configs) and the vocabulary, which is derived from the catalog's parameter count so the LM head
has the right size. `CPU_EXAMPLE` is a ~56M-parameter configuration that is not in the catalog;
the committed CPU profile was measured with it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.nn.functional as F

from sim.costs.catalog import MODELS

# MLP widths from each model's Hugging Face config.json (intermediate_size)
INTERMEDIATE_SIZE = {
    "llama-2-7b": 11008,
    "llama-2-13b": 13824,
    "llama-3-8b": 14336,
    "llama-3-70b": 28672,
    "mistral-7b": 14336,
}


@dataclass(frozen=True)
class ModelDims:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int

    def layer_parameters(self) -> int:
        qkv = self.hidden_size * (self.num_attention_heads + 2 * self.num_kv_heads) * self.head_dim
        out = self.num_attention_heads * self.head_dim * self.hidden_size
        return qkv + out + 3 * self.hidden_size * self.intermediate_size + 2 * self.hidden_size

    def num_parameters(self) -> int:
        # untied embedding and LM head, as in every model of the catalog
        layers = self.num_layers * self.layer_parameters()
        return layers + 2 * self.vocab_size * self.hidden_size + self.hidden_size

    def as_dict(self) -> dict[str, Any]:
        return asdict(self) | {"num_parameters": self.num_parameters()}


def dims_for(model: str) -> ModelDims:
    """Dimensions of a catalog model, with its vocabulary solved from the parameter count."""
    spec = MODELS[model]
    dims = ModelDims(
        name=spec.name,
        num_layers=spec.num_layers,
        hidden_size=spec.hidden_size,
        num_attention_heads=spec.num_attention_heads,
        num_kv_heads=spec.num_kv_heads,
        head_dim=spec.head_dim,
        intermediate_size=INTERMEDIATE_SIZE.get(spec.name, 256 * round(8 * spec.hidden_size / 768)),
        vocab_size=1,
    )
    rest = spec.num_parameters - spec.num_layers * dims.layer_parameters() - spec.hidden_size
    return ModelDims(**{**asdict(dims), "vocab_size": max(rest // (2 * spec.hidden_size), 1)})


CPU_EXAMPLE = ModelDims("llama-56m-example", 8, 512, 8, 4, 64, 1408, 32000)
TINY = ModelDims("llama-tiny-test", 2, 64, 4, 2, 16, 128, 256)


class DecoderStack:
    """`num_layers` decoder layers plus embedding and LM head, with random weights."""

    def __init__(self, dims: ModelDims, num_layers: int, device: str, dtype: torch.dtype) -> None:
        self.dims = dims
        h, d = dims.hidden_size, dims.head_dim
        qkv_out = (dims.num_attention_heads + 2 * dims.num_kv_heads) * d

        def weight(*shape: int) -> torch.Tensor:
            return torch.randn(*shape, device=device, dtype=dtype) * 0.02

        self.layers = [
            {
                "norm1": torch.ones(h, device=device, dtype=dtype),
                "qkv": weight(qkv_out, h),
                "o": weight(h, dims.num_attention_heads * d),
                "norm2": torch.ones(h, device=device, dtype=dtype),
                "gate_up": weight(2 * dims.intermediate_size, h),
                "down": weight(h, dims.intermediate_size),
            }
            for _ in range(num_layers)
        ]
        self.embed = weight(dims.vocab_size, h)
        self.final_norm = torch.ones(h, device=device, dtype=dtype)
        self.lm_head = weight(dims.vocab_size, h)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device=device).float() / d))
        self.inv_freq = inv_freq

    def rotary(self, positions: torch.Tensor, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """cos and sin tables for the given positions, shaped (tokens, 1, head_dim)."""
        angles = positions.float()[:, None] * self.inv_freq[None, :]
        angles = torch.cat([angles, angles], dim=-1)[:, None, :]
        return angles.cos().to(dtype), angles.sin().to(dtype)

    @staticmethod
    def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        half = x.shape[-1] // 2
        rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
        return x * cos + rotated * sin

    def layers_forward(self, x: torch.Tensor, rope: tuple[torch.Tensor, ...], attend: Any) -> Any:
        """All layers over flattened tokens x (T, hidden); `attend(q, k, v)` does attention."""
        dims = self.dims
        heads, kv_heads, d = dims.num_attention_heads, dims.num_kv_heads, dims.head_dim
        cos, sin = rope
        for w in self.layers:
            hidden = F.rms_norm(x, (dims.hidden_size,), w["norm1"])
            q, k, v = F.linear(hidden, w["qkv"]).split([heads * d, kv_heads * d, kv_heads * d], -1)
            q = self._rope(q.view(-1, heads, d), cos, sin)
            k = self._rope(k.view(-1, kv_heads, d), cos, sin)
            x = x + F.linear(attend(q, k, v.view(-1, kv_heads, d)), w["o"])
            hidden = F.rms_norm(x, (dims.hidden_size,), w["norm2"])
            gate, up = F.linear(hidden, w["gate_up"]).chunk(2, dim=-1)
            x = x + F.linear(F.silu(gate) * up, w["down"])
        return x

    def outer_forward(self, ids: torch.Tensor, last_hidden: torch.Tensor) -> torch.Tensor:
        """Embedding lookup and the LM head with greedy sampling on each sequence's last token."""
        self.embed.index_select(0, ids)
        normed = F.rms_norm(last_hidden, (self.dims.hidden_size,), self.final_norm)
        return F.linear(normed, self.lm_head).argmax(dim=-1)


def decode_attention(
    k_cache: torch.Tensor, v_cache: torch.Tensor, context: int
) -> Any:  # returns the attend callable for `layers_forward`
    """Attention of one new token per sequence over a cache (B, kv_heads, context + 1, head_dim).

    The new K/V are written at position `context` first, as a serving engine does."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        k_cache[:, :, context] = k
        v_cache[:, :, context] = v
        out = F.scaled_dot_product_attention(q[:, :, None, :], k_cache, v_cache, enable_gqa=True)
        return out.reshape(q.shape[0], -1)

    return attend


def prefill_attention(num_prompts: int) -> Any:
    """Causal attention within each of `num_prompts` equal prompts laid end to end."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        def by_prompt(t: torch.Tensor) -> torch.Tensor:
            return t.view(num_prompts, -1, t.shape[1], t.shape[2]).transpose(1, 2)

        out = F.scaled_dot_product_attention(
            by_prompt(q), by_prompt(k), by_prompt(v), is_causal=True, enable_gqa=True
        )
        return out.transpose(1, 2).reshape(q.shape[0], -1)

    return attend


def mixed_attention(chunk: int, k_cache: torch.Tensor, v_cache: torch.Tensor, context: int) -> Any:
    """A prefill chunk (the first `chunk` tokens) and decodes over a cache in one step."""
    prefill, decode = prefill_attention(1), decode_attention(k_cache, v_cache, context)

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        head = prefill(q[:chunk], k[:chunk], v[:chunk])
        return torch.cat([head, decode(q[chunk:], k[chunk:], v[chunk:])], dim=0)

    return attend


def no_attention() -> Any:
    """Attention left out (a `linear` point): the heads' queries go on as the attention output."""

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return q.reshape(q.shape[0], -1)

    return attend


def chunk_attention(k_cache: torch.Tensor, v_cache: torch.Tensor, prefix: int) -> Any:
    """One prompt chunk after `prefix` cached tokens, over a cache (1, kv_heads, prefix + chunk,
    head_dim): its K/V are written after the prefix, and each query attends to the prefix and to
    the chunk up to itself (causal, aligned at the bottom right)."""
    from torch.nn.attention.bias import causal_lower_right

    chunk = k_cache.shape[2] - prefix
    mask = causal_lower_right(chunk, prefix + chunk)
    groups = 0  # 0: not probed yet; 1: the kernel takes grouped KV heads; else heads to repeat

    def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        nonlocal groups
        k_cache[0, :, prefix:] = k.transpose(0, 1)
        v_cache[0, :, prefix:] = v.transpose(0, 1)
        query = q.transpose(0, 1)[None]
        if groups == 0:
            try:
                out = F.scaled_dot_product_attention(
                    query, k_cache, v_cache, attn_mask=mask, enable_gqa=True
                )
                groups = 1
                return out[0].transpose(0, 1).reshape(q.shape[0], -1)
            except (RuntimeError, TypeError):  # older kernels: repeat the KV heads instead
                groups = q.shape[1] // k.shape[1]
        if groups == 1:
            out = F.scaled_dot_product_attention(
                query, k_cache, v_cache, attn_mask=mask, enable_gqa=True
            )
        else:
            keys = k_cache.repeat_interleave(groups, 1)
            values = v_cache.repeat_interleave(groups, 1)
            out = F.scaled_dot_product_attention(query, keys, values, attn_mask=mask)
        return out[0].transpose(0, 1).reshape(q.shape[0], -1)

    return attend
