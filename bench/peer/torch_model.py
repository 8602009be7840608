"""The GPT of worker/model/ rebuilt in PyTorch for bench/peer: same shapes and FLOPs, not the same bits.

GPT-2 style decoder (docs/model.md): learned position embeddings, pre-LayerNorm blocks (eps 1e-5),
causal self-attention with qkv and output projections (biases), an MLP C -> 4C -> C with GELU
(tanh), a final LayerNorm and an untied bias-free head over the byte vocabulary. Weights N(0, 0.02),
the two residual projections N(0, 0.02 / sqrt(2 * n_layers)), biases 0, LayerNorm 1 and 0: the
initial loss is near ln(vocab), as ours is. Cut into the same partition units as ours: unit 0 the
embedding, 1..L the blocks, L+1 the final LayerNorm and the head (the loss is the schedule's
loss_fn, or the trainer's cross-entropy).

Attention is torch's own fused causal kernel, F.scaled_dot_product_attention(is_causal=True)
(what a PyTorch user writes; on the CPU it is a flash-style kernel that never stores T x T), or
with attention="manual" the textbook q k^T, mask, softmax, @ v on T x T tensors.
"""
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Embedding(nn.Module):
    def __init__(self, vocab, seq_len, C):
        super().__init__()
        self.wte = nn.Embedding(vocab, C)
        self.wpe = nn.Embedding(seq_len, C)

    def forward(self, tokens):  # (B, T) int64 -> (B, T, C)
        pos = torch.arange(tokens.shape[1], device=tokens.device)
        return self.wte(tokens) + self.wpe(pos)


class Block(nn.Module):
    def __init__(self, C, n_heads, attention):
        super().__init__()
        self.n_heads, self.attention = n_heads, attention
        self.ln_1 = nn.LayerNorm(C, eps=1e-5)
        self.qkv = nn.Linear(C, 3 * C)
        self.attn_proj = nn.Linear(C, C)
        self.ln_2 = nn.LayerNorm(C, eps=1e-5)
        self.fc = nn.Linear(C, 4 * C)
        self.mlp_proj = nn.Linear(4 * C, C)

    def attend(self, q, k, v):  # (B, NH, T, hs) each
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        T = q.shape[2]
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
        return att.masked_fill(mask, float("-inf")).softmax(dim=-1) @ v

    def forward(self, x):  # (B, T, C) -> (B, T, C)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln_1(x)).split(C, dim=2)
        heads = [t.view(B, T, self.n_heads, C // self.n_heads).transpose(1, 2) for t in (q, k, v)]
        y = self.attend(*heads).transpose(1, 2).contiguous().view(B, T, C)
        x = x + self.attn_proj(y)
        return x + self.mlp_proj(F.gelu(self.fc(self.ln_2(x)), approximate="tanh"))


class Head(nn.Module):
    def __init__(self, vocab, C):
        super().__init__()
        self.ln_f = nn.LayerNorm(C, eps=1e-5)
        self.lm_head = nn.Linear(C, vocab, bias=False)

    def forward(self, x):  # (B, T, C) -> logits (B, T, vocab)
        return self.lm_head(self.ln_f(x))


def init_weights(module, n_layers):
    for name, p in module.named_parameters():
        if p.dim() < 2:
            nn.init.zeros_(p) if name.endswith("bias") else nn.init.ones_(p)
        else:
            residual = name.endswith(("attn_proj.weight", "mlp_proj.weight"))
            nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * n_layers) if residual else 0.02)


def make_units(first, last, cfg):
    """Partition units first..last (inclusive) as an nn.Sequential, initialised."""
    units = []
    for u in range(first, last + 1):
        if u == 0:
            units.append(Embedding(cfg["vocab"], cfg["seq_len"], cfg["d_model"]))
        elif u <= cfg["n_layers"]:
            units.append(Block(cfg["d_model"], cfg["n_heads"], cfg["attention"]))
        else:
            units.append(Head(cfg["vocab"], cfg["d_model"]))
    seq = nn.Sequential(*units)
    init_weights(seq, cfg["n_layers"])
    return seq


def loss_fn(logits, targets):  # mean token cross-entropy of one microbatch
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def adamw(params, lr, weight_decay, impl):
    """AdamW with weight decay on 2-D tensors only (ours: docs/model.md#optimizer), betas
    (0.9, 0.95) and eps 1e-8 as our defaults. impl: default (torch's own choice: the for-loop
    kernel on the CPU), foreach, or fused."""
    params = [p for p in params if p.requires_grad]
    groups = [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]
    extra = {"foreach": True} if impl == "foreach" else {"fused": True} if impl == "fused" else {}
    return torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95), eps=1e-8, **extra)


class Windows:
    """Random (T+1)-byte windows of a file: inputs and next-byte targets, (B, T) int64 each."""

    def __init__(self, path, seq_len, seed):
        with open(path, "rb") as f:
            self.data = torch.frombuffer(bytearray(f.read()), dtype=torch.uint8).long()
        self.T = seq_len
        self.gen = torch.Generator().manual_seed(seed)

    def batch(self, n):
        starts = torch.randint(0, len(self.data) - self.T - 1, (n,), generator=self.gen)
        rows = torch.stack([self.data[s:s + self.T + 1] for s in starts.tolist()])
        return rows[:, :-1].contiguous(), rows[:, 1:].contiguous()
