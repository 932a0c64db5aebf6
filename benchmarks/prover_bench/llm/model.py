"""The policy: a small causal transformer, written functionally (a dict of tensors; needs torch).

2 layers, d = 64, 4 heads, MLP 4d, pre-LayerNorm, learned positions. :func:`forward` runs whole
sequences (training); :func:`forward_cached` runs one new token per row against a key/value cache
(sampling). Both compute the same function (``tests/adapters/test_trl_llm_bench.py`` checks it).
"""

from __future__ import annotations

import math
from typing import Any

from prover_bench.llm.tasks import VOCAB

Tensor = Any
Params = dict[str, Tensor]

LAYERS, D, HEADS, CONTEXT = 2, 64, 4, 256


def init_params(seed: int, vocab: int = len(VOCAB)) -> Params:
    """Fresh weights (GPT-2 style scales), seeded."""
    import torch

    g = torch.Generator().manual_seed(seed)

    def normal(*shape: int, std: float = 0.02) -> Tensor:
        return (torch.randn(*shape, generator=g) * std).requires_grad_()

    p: Params = {"tok": normal(vocab, D), "pos": normal(CONTEXT, D)}
    for i in range(LAYERS):
        p[f"{i}.ln1.w"], p[f"{i}.ln1.b"] = torch.ones(D, requires_grad=True), torch.zeros(D, requires_grad=True)
        p[f"{i}.qkv"] = normal(D, 3 * D)
        p[f"{i}.out"] = normal(D, D, std=0.02 / math.sqrt(2 * LAYERS))
        p[f"{i}.ln2.w"], p[f"{i}.ln2.b"] = torch.ones(D, requires_grad=True), torch.zeros(D, requires_grad=True)
        p[f"{i}.fc"] = normal(D, 4 * D)
        p[f"{i}.fc.b"] = torch.zeros(4 * D, requires_grad=True)
        p[f"{i}.proj"] = normal(4 * D, D, std=0.02 / math.sqrt(2 * LAYERS))
    p["lnf.w"], p["lnf.b"] = torch.ones(D, requires_grad=True), torch.zeros(D, requires_grad=True)
    p["head"] = normal(D, vocab)
    return p


def clone(params: Params) -> Params:
    return {k: v.detach().clone().requires_grad_() for k, v in params.items()}


def _ln(p: Params, name: str, x: Tensor) -> Tensor:
    import torch.nn.functional as F

    return F.layer_norm(x, (D,), p[f"{name}.w"], p[f"{name}.b"])


def _mlp(p: Params, i: int, x: Tensor) -> Tensor:
    import torch.nn.functional as F

    return F.gelu(x @ p[f"{i}.fc"] + p[f"{i}.fc.b"]) @ p[f"{i}.proj"]


def forward(p: Params, tokens: Tensor) -> Tensor:
    """Logits ``[N, L, V]`` of the next token at every position of ``tokens`` ``[N, L]`` (causal)."""
    import torch.nn.functional as F

    n, length = tokens.shape
    if length > CONTEXT:
        raise ValueError(f"sequence of {length} tokens exceeds the context of {CONTEXT}")
    h = p["tok"][tokens] + p["pos"][:length]
    dh = D // HEADS
    for i in range(LAYERS):
        q, k, v = (_ln(p, f"{i}.ln1", h) @ p[f"{i}.qkv"]).split(D, dim=-1)
        q, k, v = (x.view(n, length, HEADS, dh).transpose(1, 2) for x in (q, k, v))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + a.transpose(1, 2).reshape(n, length, D) @ p[f"{i}.out"]
        h = h + _mlp(p, i, _ln(p, f"{i}.ln2", h))
    return _ln(p, "lnf", h) @ p["head"]


class Cache:
    """Keys and values of ``slots`` sequences of up to ``CONTEXT`` tokens, and each slot's length."""

    def __init__(self, slots: int) -> None:
        import torch

        dh = D // HEADS
        self.k = torch.zeros(LAYERS, slots, HEADS, CONTEXT, dh)
        self.v = torch.zeros(LAYERS, slots, HEADS, CONTEXT, dh)
        self.length = [0] * slots


def prefill(p: Params, cache: Cache, slot: int, tokens: list[int]) -> Tensor:
    """Fill ``slot`` with ``tokens`` (from position 0); the next-token logits ``[V]`` after the last."""
    import torch

    with torch.no_grad():
        return _prefill(p, cache, slot, tokens)


def _prefill(p: Params, cache: Cache, slot: int, tokens: list[int]) -> Tensor:
    import torch
    import torch.nn.functional as F

    length = len(tokens)
    if not 0 < length <= CONTEXT:
        raise ValueError(f"cannot prefill {length} tokens (context {CONTEXT})")
    x = torch.tensor(tokens)
    h = p["tok"][x] + p["pos"][:length]
    dh = D // HEADS
    for i in range(LAYERS):
        q, k, v = (_ln(p, f"{i}.ln1", h) @ p[f"{i}.qkv"]).split(D, dim=-1)
        q, k, v = (t.view(length, HEADS, dh).transpose(0, 1) for t in (q, k, v))
        cache.k[i, slot, :, :length] = k
        cache.v[i, slot, :, :length] = v
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        h = h + a.transpose(0, 1).reshape(length, D) @ p[f"{i}.out"]
        h = h + _mlp(p, i, _ln(p, f"{i}.ln2", h))
    cache.length[slot] = length
    return _ln(p, "lnf", h[-1]) @ p["head"]


def forward_cached(p: Params, cache: Cache, slots: list[int], tokens: list[list[int]]) -> Tensor:
    """Append ``m`` tokens to each of ``slots`` (distinct; the same ``m`` for all); the next-token logits
    ``[B, V]`` after each row's last token.

    Runs on the contiguous range ``min(slots)..max(slots)`` of the cache (views, no copies); rows of
    that range not in ``slots`` compute garbage at their current length, which their next tokens
    overwrite before anything attends to it.
    """
    import torch

    with torch.no_grad():
        return _forward_cached(p, cache, slots, tokens)


def _forward_cached(p: Params, cache: Cache, slots: list[int], tokens: list[list[int]]) -> Tensor:
    import torch

    m = len(tokens[0])
    lo, hi = min(slots), max(slots) + 1
    n = hi - lo
    rows = torch.tensor([s - lo for s in slots])
    starts = [cache.length[s] for s in slots]
    if max(starts) + m > CONTEXT:
        raise ValueError(f"a sequence would exceed the context of {CONTEXT} tokens")
    pos0 = torch.tensor([min(cache.length[s], CONTEXT - m) for s in range(lo, hi)])
    pos0[rows] = torch.tensor(starts)
    pos = pos0[:, None] + torch.arange(m)[None, :]  # [n, m]
    x = torch.zeros(n, m, dtype=torch.long)
    x[rows] = torch.tensor(tokens)
    span = int(pos.max()) + 1
    hidden = (torch.arange(span)[None, None, :] > pos[:, :, None])[:, None]  # [n, 1, m, span]
    h = p["tok"][x] + p["pos"][pos]  # [n, m, D]
    dh = D // HEADS
    scale = 1.0 / math.sqrt(dh)
    ar = torch.arange(n)[:, None]
    for i in range(LAYERS):
        q, k, v = (_ln(p, f"{i}.ln1", h) @ p[f"{i}.qkv"]).split(D, dim=-1)
        ck, cv = cache.k[i, lo:hi], cache.v[i, lo:hi]  # [n, H, CONTEXT, dh] views
        ck[ar, :, pos] = k.view(n, m, HEADS, dh)
        cv[ar, :, pos] = v.view(n, m, HEADS, dh)
        q = q.view(n, m, HEADS, dh).transpose(1, 2)  # [n, H, m, dh]
        scores = (q @ ck[:, :, :span].transpose(-1, -2)) * scale  # [n, H, m, span]
        w = torch.softmax(scores.masked_fill(hidden, float("-inf")), dim=-1)
        a = (w @ cv[:, :, :span]).transpose(1, 2).reshape(n, m, D)
        h = h + a @ p[f"{i}.out"]
        h = h + _mlp(p, i, _ln(p, f"{i}.ln2", h))
    for s in slots:
        cache.length[s] += m
    return (_ln(p, "lnf", h[:, -1]) @ p["head"])[rows]
