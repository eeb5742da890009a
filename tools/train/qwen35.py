"""Qwen3.5 / 3.6 MoE (Hugging Face model_type qwen3_5_moe, text part) in
PyTorch, float32, written from the math of ../../../shared/DESIGN.md §1 and
§3 and edge0's C code (src/model/deltanet.c, attention.c, moe.c), to train
small demo models that edge0 runs. Works with PyTorch 1.13 and 2.x.

Parameter names are the Hugging Face checkpoint's (`state_dict()` keys are
the tensor names of a per-expert `save_pretrained` folder, as
shared/fixtures/qwen35moe/hf/), so loading and export are a rename-free
copy: model.embed_tokens, model.layers.L.{input_layernorm,
post_attention_layernorm, linear_attn.*, self_attn.*, mlp.*}, model.norm,
lm_head (absent when tie_word_embeddings), mtp.*.

The model, per position t of a sequence of ids:
  x = embed(id)
  per layer: x += mixer(norm1(x)); x += moe(norm2(x))
    mixer: Gated DeltaNet ("linear_attention") or gated full attention
    ("full_attention"), by config layer_types
  logits = lm_head(norm(x))

Details that are easy to get wrong (each checked against the fixture's
transformers outputs by check_fixture.py):
- RMSNorm of this family (input, post-attention, final, q_norm, k_norm and
  the MTP block's norms): (1 + w) * x / rms(x), w stored zero-centred in HF
  checkpoints (mlx and GGUF files store 1 + w; export.py writes HF, so w).
  The DeltaNet output norm is the plain gated one, w * norm(o) * silu(z),
  never shifted. rms(x) = sqrt(mean(x^2) + eps), eps = rms_norm_eps.
- Gated attention: q_proj gives per head [query head_dim | gate head_dim];
  q_norm / k_norm per head before RoPE; RoPE (rotate-half) on the first
  rotary_dim = head_dim * partial_rotary_factor dims of each head,
  inv_freq_i = theta^(-2i/rotary_dim); GQA query head h reads KV head
  h // (n_heads / n_kv_heads); scale head_dim^-1/2; output
  o_proj(attn * sigmoid(gate)).
- Gated DeltaNet, per value head h reading key head h // (Hv / Hk): causal
  depthwise conv (kernel K, zero history) + SiLU over the flat q|k|v of
  in_proj_qkv; q, k L2-normalised (x / sqrt(sum x^2 + 1e-6)), q scaled by
  Dk^-1/2; beta = sigmoid(in_proj_b x); g = -exp(A_log) * softplus(in_proj_a
  x + dt_bias); with the state S [Dv, Dk]: S = exp(g) S; d = beta (v - S k);
  S += d k^T; o = S q. Two forms: a plain loop over positions (recurrent)
  and the chunked form (delta_chunked) used for training; they agree to
  float32 rounding (check_fixture.py prints the difference).
- MoE: router logits = gate(x) in f32, softmax over all experts, top-k,
  the k weights renormalised to sum 1 when norm_topk_prob (edge0 always
  renormalises for qwen3_5_moe, so keep it true); experts are SwiGLU:
  down(silu(gate(x)) * up(x)); plus sigmoid(shared_expert_gate(x)) *
  shared_expert(x).

MTP (multi-token prediction) block, `mtp.*`. Transformers 5.17 has no MTP
code (its Qwen3.5 classes skip mtp.* tensors), so the convention here comes
from the published checkpoints' tensor names and configs
(mtp_num_hidden_layers: 1) as edge0 already knows them
(scripts/make_mtp_gguf.py, which llama.cpp's converter turns into the GGUF
blk.N nextn.* tensors that src/weights/weights.c gguf_mtp checks) and from
vLLM's Qwen3.5 MTP module (vllm/model_executor/models/qwen3_5_mtp.py),
an engine that serves these checkpoints with MTP speculative decoding:
  e = pre_fc_norm_embedding(embed(id[t+1]))     (1 + w RMSNorm)
  h = pre_fc_norm_hidden(hidden[t])              (1 + w RMSNorm)
  x = fc([e | h])                                fc: [H, 2H], embedding half first
  x = mtp.layers.0(x)                            a full-attention decoder layer with
                                                 the MoE block and shared expert, causal
                                                 over the MTP positions, RoPE position t
  logits[t] = lm_head(mtp.norm(x))               predicts id[t+2]
The embedding and lm_head are the main model's (mtp_use_dedicated_embeddings
false). hidden[t] is the main model's last hidden state AFTER the final norm
(model.norm): vLLM's Qwen3NextModel.forward (which Qwen3.5 inherits) ends
with the final norm and returns that state, and its speculative-decoding
proposer hands the target model's returned states to the MTP block (read
from its code, not run). Qwen has not published its training code, so
whether Qwen trained with the pre- or post-norm state is not known from a
primary source; a model trained here with post-norm states is consistent
with vLLM, and with any future edge0 MTP that follows it. The order of the fc input
(embedding first, then hidden) is pinned by vLLM's torch.cat([embeds,
hidden]) and by edge0's e0_mtp_layer comment ("eh_proj [H, 2H]:
[embedding | hidden]").
"""

import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

try:  # as a package module (tools.train.qwen35) or as a script beside st.py
    from . import st
except ImportError:
    import st


# ---- configuration ----------------------------------------------------------

class Config:
    """The text model's settings, from an HF config.json dict (nested
    text_config or flat), with the defaults transformers uses."""

    def __init__(self, d):
        root = d
        t = d.get("text_config") or d
        self.vocab_size = int(t["vocab_size"])
        self.hidden_size = int(t["hidden_size"])
        self.num_hidden_layers = int(t["num_hidden_layers"])
        self.num_attention_heads = int(t["num_attention_heads"])
        self.num_key_value_heads = int(t.get("num_key_value_heads") or self.num_attention_heads)
        self.head_dim = int(t.get("head_dim") or self.hidden_size // self.num_attention_heads)
        self.linear_num_key_heads = int(t["linear_num_key_heads"])
        self.linear_num_value_heads = int(t["linear_num_value_heads"])
        self.linear_key_head_dim = int(t["linear_key_head_dim"])
        self.linear_value_head_dim = int(t["linear_value_head_dim"])
        self.linear_conv_kernel_dim = int(t.get("linear_conv_kernel_dim", 4))
        self.num_experts = int(t["num_experts"])
        self.num_experts_per_tok = int(t["num_experts_per_tok"])
        self.moe_intermediate_size = int(t["moe_intermediate_size"])
        self.shared_expert_intermediate_size = int(t["shared_expert_intermediate_size"])
        self.norm_topk_prob = bool(t.get("norm_topk_prob", True))
        self.rms_norm_eps = float(t.get("rms_norm_eps", 1e-6))
        rp = t.get("rope_parameters") or {}
        self.rope_theta = float(rp.get("rope_theta", t.get("rope_theta", 10000.0)))
        self.partial_rotary_factor = float(rp.get("partial_rotary_factor", t.get("partial_rotary_factor", 1.0)))
        if rp.get("rope_type", "default") != "default":
            raise ValueError(f"rope_type {rp['rope_type']} is not supported (default only)")
        tie = t.get("tie_word_embeddings")
        self.tie_word_embeddings = bool(root.get("tie_word_embeddings", False) if tie is None else tie)
        self.max_position_embeddings = int(t.get("max_position_embeddings", 4096))
        self.mtp_num_hidden_layers = int(t.get("mtp_num_hidden_layers", 0))
        self.router_aux_loss_coef = float(t.get("router_aux_loss_coef", 0.001))
        self.initializer_range = float(t.get("initializer_range", 0.02))
        self.intermediate_size = int(t.get("intermediate_size") or 2 * self.hidden_size)  # unused (no dense layers)
        self.eos_token_id = t.get("eos_token_id", root.get("eos_token_id"))
        self.bos_token_id = t.get("bos_token_id", root.get("bos_token_id"))
        self.pad_token_id = t.get("pad_token_id", root.get("pad_token_id"))
        interval = int(t.get("full_attention_interval", 4))
        lt = t.get("layer_types")
        if lt is None:
            lt = ["full_attention" if (i + 1) % interval == 0 else "linear_attention"
                  for i in range(self.num_hidden_layers)]
        if len(lt) != self.num_hidden_layers or any(x not in ("linear_attention", "full_attention") for x in lt):
            raise ValueError("layer_types must list linear_attention / full_attention for every layer")
        self.layer_types = list(lt)
        self.full_attention_interval = interval
        if t.get("mlp_only_layers") or int(t.get("decoder_sparse_step", 1)) != 1:
            raise ValueError("dense MLP layers (mlp_only_layers, decoder_sparse_step) are not supported")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_attention_heads must be a multiple of num_key_value_heads")
        if self.linear_num_value_heads % self.linear_num_key_heads:
            raise ValueError("linear_num_value_heads must be a multiple of linear_num_key_heads")
        self.rotary_dim = int(self.head_dim * self.partial_rotary_factor) & ~1

    def to_hf(self):
        """The flat config.json transformers' Qwen3_5MoeForCausalLM writes
        (model_type qwen3_5_moe_text), plus the MTP settings."""
        return {
            "architectures": ["Qwen3_5MoeForCausalLM"],
            "model_type": "qwen3_5_moe_text",
            "attention_bias": False,
            "attention_dropout": 0.0,
            "bos_token_id": self.bos_token_id,
            "eos_token_id": self.eos_token_id,
            "pad_token_id": self.pad_token_id,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "dtype": "bfloat16",
            "full_attention_interval": self.full_attention_interval,
            "head_dim": self.head_dim,
            "hidden_act": "silu",
            "hidden_size": self.hidden_size,
            "initializer_range": self.initializer_range,
            "intermediate_size": self.intermediate_size,
            "layer_types": self.layer_types,
            "linear_conv_kernel_dim": self.linear_conv_kernel_dim,
            "linear_key_head_dim": self.linear_key_head_dim,
            "linear_num_key_heads": self.linear_num_key_heads,
            "linear_num_value_heads": self.linear_num_value_heads,
            "linear_value_head_dim": self.linear_value_head_dim,
            "max_position_embeddings": self.max_position_embeddings,
            "moe_intermediate_size": self.moe_intermediate_size,
            "mtp_num_hidden_layers": self.mtp_num_hidden_layers,
            "mtp_use_dedicated_embeddings": False,
            "norm_topk_prob": self.norm_topk_prob,
            "num_attention_heads": self.num_attention_heads,
            "num_experts": self.num_experts,
            "num_experts_per_tok": self.num_experts_per_tok,
            "num_hidden_layers": self.num_hidden_layers,
            "num_key_value_heads": self.num_key_value_heads,
            "output_router_logits": False,
            "partial_rotary_factor": self.partial_rotary_factor,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_parameters": {"partial_rotary_factor": self.partial_rotary_factor,
                                "rope_theta": self.rope_theta, "rope_type": "default"},
            "router_aux_loss_coef": self.router_aux_loss_coef,
            "shared_expert_intermediate_size": self.shared_expert_intermediate_size,
            "tie_word_embeddings": self.tie_word_embeddings,
            "use_cache": True,
            "vocab_size": self.vocab_size,
        }


# ---- norms ------------------------------------------------------------------

def rms(x, eps):
    """x / sqrt(mean(x^2) + eps) over the last axis."""
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class RMSNorm(nn.Module):
    """Qwen3.5's zero-centred RMSNorm: (1 + w) * x / rms(x); w starts at 0."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.zeros(n))
        self.eps = eps

    def forward(self, x):
        return (1.0 + self.weight) * rms(x, self.eps)


class GatedRMSNorm(nn.Module):
    """The DeltaNet output norm: w * x / rms(x) * silu(z), not shifted."""

    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x, z):
        return self.weight * rms(x, self.eps) * F.silu(z)


def f32_only(x):
    """A context where autocast (--amp in train.py) is off."""
    return torch.autocast(device_type=x.device.type, enabled=False)


def l2norm(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


# ---- Gated DeltaNet ---------------------------------------------------------

def delta_recurrent(q, k, v, g, beta, state=None):
    """The gated delta rule, one position at a time (the reference form).
    q, k: [B, H, T, Dk]; v: [B, H, T, Dv]; g (log decay), beta: [B, H, T].
    The state is kept transposed, St = S^T [B, H, Dk, Dv], so that S k is
    k @ St. Returns o [B, H, T, Dv] and the final St."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    St = q.new_zeros(B, H, Dk, Dv) if state is None else state
    out = []
    for t in range(T):
        St = St * g[:, :, t, None, None].exp()
        kt = k[:, :, t]                                            # [B, H, Dk]
        pred = torch.einsum("bhk,bhkv->bhv", kt, St)               # S k
        d = beta[:, :, t, None] * (v[:, :, t] - pred)              # [B, H, Dv]
        St = St + kt[..., :, None] * d[..., None, :]               # S += d k^T
        out.append(torch.einsum("bhk,bhkv->bhv", q[:, :, t], St))  # o = S q
    return torch.stack(out, 2), St


def delta_chunked(q, k, v, g, beta, chunk=64, state=None):
    """The same recurrence, `chunk` positions at a time. Within a chunk with
    cumulative log decay G_r = g_1 + ... + g_r (Γ_r = exp G_r) and the state
    St0 at its start, the deltas u_r = beta_r (v_r - Γ_r S0 k_r - sum_{i<r}
    (Γ_r/Γ_i)(k_i.k_r) u_i) solve the unit lower-triangular system
        (I + A) U = diag(beta) V - diag(beta Γ) K St0,
        A[r, i] = beta_r (Γ_r/Γ_i) (k_r . k_i) for i < r,
    and then
        O   = diag(Γ) Q St0 + (D ∘ Q K^T) U,   D[r, i] = Γ_r/Γ_i for i <= r, else 0
        St1 = Γ_C St0 + K^T diag(Γ_C/Γ) U.
    Padding positions (beyond T) get k = v = 0, g = beta = 0: u = 0 there and
    the state passes unchanged. Shapes as delta_recurrent."""
    B, H, T, Dk = k.shape
    Dv = v.shape[-1]
    pad = (-T) % chunk
    if pad:
        q, k, v = (F.pad(x, (0, 0, 0, pad)) for x in (q, k, v))
        g, beta = (F.pad(x, (0, pad)) for x in (g, beta))
    n = (T + pad) // chunk
    q, k, v = (x.reshape(B, H, n, chunk, x.shape[-1]) for x in (q, k, v))
    g, beta = (x.reshape(B, H, n, chunk) for x in (g, beta))
    incl = torch.ones(chunk, chunk, dtype=torch.bool, device=q.device).tril()
    strict = incl.tril(-1)
    eye = torch.eye(chunk, dtype=q.dtype, device=q.device)
    St = q.new_zeros(B, H, Dk, Dv) if state is None else state
    out = []
    for c in range(n):
        qc, kc, vc, bc = q[:, :, c], k[:, :, c], v[:, :, c], beta[:, :, c]
        G = g[:, :, c].cumsum(-1)                                  # [B, H, C]
        diff = G[..., :, None] - G[..., None, :]                   # G_r - G_i
        D = diff.masked_fill(~incl, float("-inf")).exp()           # Γ_r/Γ_i, 0 above the diagonal
        A = (bc[..., :, None] * D * (kc @ kc.transpose(-1, -2))).masked_fill(~strict, 0.0)
        rhs = torch.cat([bc[..., None] * vc, (bc * G.exp())[..., None] * kc], -1)
        sol = torch.linalg.solve_triangular(eye + A, rhs, upper=False, unitriangular=True)
        U = sol[..., :Dv] - sol[..., Dv:] @ St                     # [B, H, C, Dv]
        out.append((G.exp()[..., None] * qc) @ St + (D * (qc @ kc.transpose(-1, -2))) @ U)
        tail = (G[..., -1:] - G).exp()                             # Γ_C/Γ_r
        St = G[..., -1, None, None].exp() * St + kc.transpose(-1, -2) @ (tail[..., None] * U)
    o = torch.cat(out, 2)[:, :, :T]
    return o, St


class GatedDeltaNet(nn.Module):
    """linear_attn of a linear_attention layer. forward(x [B, T, H]) -> [B, T, H]."""

    def __init__(self, cfg):
        super().__init__()
        self.Hk, self.Hv = cfg.linear_num_key_heads, cfg.linear_num_value_heads
        self.Dk, self.Dv = cfg.linear_key_head_dim, cfg.linear_value_head_dim
        self.K = cfg.linear_conv_kernel_dim
        H = cfg.hidden_size
        C = 2 * self.Hk * self.Dk + self.Hv * self.Dv
        self.in_proj_qkv = nn.Linear(H, C, bias=False)           # flat q | k | v
        self.in_proj_z = nn.Linear(H, self.Hv * self.Dv, bias=False)
        self.in_proj_b = nn.Linear(H, self.Hv, bias=False)
        self.in_proj_a = nn.Linear(H, self.Hv, bias=False)
        self.conv1d = nn.Conv1d(C, C, self.K, groups=C, bias=False)  # weight [C, 1, K]
        self.A_log = nn.Parameter(torch.zeros(self.Hv))
        self.dt_bias = nn.Parameter(torch.ones(self.Hv))
        self.norm = GatedRMSNorm(self.Dv, cfg.rms_norm_eps)
        self.out_proj = nn.Linear(self.Hv * self.Dv, H, bias=False)

    def forward(self, x, mode="chunked"):
        B, T, _ = x.shape
        Hk, Hv, Dk, Dv = self.Hk, self.Hv, self.Dk, self.Dv
        mix = self.in_proj_qkv(x).transpose(1, 2)                  # [B, C, T]
        mix = F.conv1d(F.pad(mix, (self.K - 1, 0)), self.conv1d.weight, groups=mix.shape[1])
        mix = F.silu(mix).transpose(1, 2)                           # [B, T, C]
        q, k, v = mix.split([Hk * Dk, Hk * Dk, Hv * Dv], -1)
        q = l2norm(q.reshape(B, T, Hk, Dk)) * Dk ** -0.5
        k = l2norm(k.reshape(B, T, Hk, Dk))
        r = Hv // Hk                                                # value head h reads key head h // r
        q = q.repeat_interleave(r, 2).transpose(1, 2)               # [B, Hv, T, Dk]
        k = k.repeat_interleave(r, 2).transpose(1, 2)
        v = v.reshape(B, T, Hv, Dv).transpose(1, 2)                 # [B, Hv, T, Dv]
        beta = torch.sigmoid(self.in_proj_b(x)).transpose(1, 2)     # [B, Hv, T]
        g = -self.A_log.exp() * F.softplus(self.in_proj_a(x) + self.dt_bias)
        g = g.transpose(1, 2)
        with f32_only(x):  # the recurrence in f32 even under autocast
            q, k, v, g, beta = (t.float() for t in (q, k, v, g, beta))
            if mode == "recurrent":
                o, _ = delta_recurrent(q, k, v, g, beta)
            else:
                o, _ = delta_chunked(q, k, v, g, beta)
        o = o.transpose(1, 2)                                       # [B, T, Hv, Dv]
        z = self.in_proj_z(x).reshape(B, T, Hv, Dv)
        return self.out_proj(self.norm(o, z).reshape(B, T, Hv * Dv))


# ---- gated full attention -----------------------------------------------------

def rope_cos_sin(cfg, T, device, offset=0):
    """cos, sin [T, rotary_dim / 2] of positions offset .. offset + T - 1,
    the angle formed in f32 as position * inv_freq."""
    half = cfg.rotary_dim // 2
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, half, device=device, dtype=torch.float32) * 2 / cfg.rotary_dim))
    ang = torch.arange(offset, offset + T, device=device, dtype=torch.float32)[:, None] * inv[None, :]
    return ang.cos(), ang.sin()


def rope(x, cos, sin, rotary_dim):
    """Rotate-half RoPE on the first rotary_dim dims of x [B, heads, T, hd]:
    pairs (i, i + rotary_dim/2)."""
    half = rotary_dim // 2
    a, b, rest = x[..., :half], x[..., half:rotary_dim], x[..., rotary_dim:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin, rest], -1)


class Attention(nn.Module):
    """self_attn of a full_attention layer: GQA, q/k RMSNorm, partial RoPE,
    sigmoid output gate. forward(x [B, T, H]) -> [B, T, H], causal."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.nh, self.nkv, self.hd = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.head_dim
        H = cfg.hidden_size
        self.q_proj = nn.Linear(H, self.nh * 2 * self.hd, bias=False)   # per head: query | gate
        self.k_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.v_proj = nn.Linear(H, self.nkv * self.hd, bias=False)
        self.o_proj = nn.Linear(self.nh * self.hd, H, bias=False)
        self.q_norm = RMSNorm(self.hd, cfg.rms_norm_eps)
        self.k_norm = RMSNorm(self.hd, cfg.rms_norm_eps)

    def forward(self, x):
        B, T, _ = x.shape
        nh, nkv, hd = self.nh, self.nkv, self.hd
        qg = self.q_proj(x).reshape(B, T, nh, 2 * hd)
        q, gate = qg[..., :hd], qg[..., hd:]
        q = self.q_norm(q).transpose(1, 2)                                  # [B, nh, T, hd]
        k = self.k_norm(self.k_proj(x).reshape(B, T, nkv, hd)).transpose(1, 2)
        v = self.v_proj(x).reshape(B, T, nkv, hd).transpose(1, 2)
        cos, sin = rope_cos_sin(self.cfg, T, x.device)
        q = rope(q, cos, sin, self.cfg.rotary_dim)
        k = rope(k, cos, sin, self.cfg.rotary_dim)
        k = k.repeat_interleave(nh // nkv, 1)                               # head h reads KV head h // group
        v = v.repeat_interleave(nh // nkv, 1)
        s = (q @ k.transpose(-1, -2)) * hd ** -0.5
        causal = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        p = s.masked_fill(~causal, float("-inf")).softmax(-1)
        o = (p @ v).transpose(1, 2)                                         # [B, T, nh, hd]
        o = o * torch.sigmoid(gate)
        return self.o_proj(o.reshape(B, T, nh * hd))


# ---- MoE --------------------------------------------------------------------

class MLP(nn.Module):
    """SwiGLU: down(silu(gate(x)) * up(x))."""

    def __init__(self, H, inter):
        super().__init__()
        self.gate_proj = nn.Linear(H, inter, bias=False)
        self.up_proj = nn.Linear(H, inter, bias=False)
        self.down_proj = nn.Linear(inter, H, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class SparseMoe(nn.Module):
    """The MoE block (DESIGN.md §3). forward(x [..., H]) -> (y, router
    logits [N, E]) with N the number of tokens."""

    def __init__(self, cfg):
        super().__init__()
        H, E = cfg.hidden_size, cfg.num_experts
        self.top_k, self.renorm = cfg.num_experts_per_tok, cfg.norm_topk_prob
        self.gate = nn.Linear(H, E, bias=False)
        self.experts = nn.ModuleList(MLP(H, cfg.moe_intermediate_size) for _ in range(E))
        self.shared_expert = MLP(H, cfg.shared_expert_intermediate_size)
        self.shared_expert_gate = nn.Linear(H, 1, bias=False)

    def forward(self, x):
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        with f32_only(x):  # router logits in f32 even under autocast: near-ties pick experts
            logits = F.linear(x.float(), self.gate.weight.float())  # [N, E]
        prob = logits.softmax(-1)
        w, idx = prob.topk(self.top_k, -1)                        # [N, k]
        if self.renorm:
            w = w / w.sum(-1, keepdim=True)
        y = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            tok, slot = (idx == e).nonzero(as_tuple=True)
            if tok.numel():
                y = y.index_add(0, tok, w[tok, slot, None].to(x.dtype) * expert(x[tok]))
        y = y + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return y.reshape(shape), logits


# ---- layers and the model ---------------------------------------------------

class DecoderLayer(nn.Module):
    def __init__(self, cfg, kind):
        super().__init__()
        self.kind = kind
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        if kind == "linear_attention":
            self.linear_attn = GatedDeltaNet(cfg)
        else:
            self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = SparseMoe(cfg)

    def forward(self, x, deltanet="chunked", trace=None):
        h = self.input_layernorm(x)
        if self.kind == "linear_attention":
            x = x + self.linear_attn(h, deltanet)
        else:
            x = x + self.self_attn(h)
        h = self.post_attention_layernorm(x)
        y, router = self.mlp(h)
        if trace is not None:
            trace.append({"moe_in": h, "moe_out": y, "router": router})
        return x + y, router


class TextModel(nn.Module):
    """`model.*`: the embeddings, the decoder layers, the final norm."""

    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg, kind) for kind in cfg.layer_types)
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class MTP(nn.Module):
    """`mtp.*`: the multi-token-prediction block (module docstring)."""

    def __init__(self, cfg):
        super().__init__()
        H = cfg.hidden_size
        self.fc = nn.Linear(2 * H, H, bias=False)                # [embedding | hidden] -> H
        self.pre_fc_norm_embedding = RMSNorm(H, cfg.rms_norm_eps)
        self.pre_fc_norm_hidden = RMSNorm(H, cfg.rms_norm_eps)
        self.layers = nn.ModuleList(DecoderLayer(cfg, "full_attention")
                                    for _ in range(cfg.mtp_num_hidden_layers))
        self.norm = RMSNorm(H, cfg.rms_norm_eps)


class Qwen35Moe(nn.Module):
    """Qwen3_5MoeForCausalLM (text) with its MTP block when
    cfg.mtp_num_hidden_layers > 0."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.model = TextModel(cfg)
        if not cfg.tie_word_embeddings:
            self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.mtp_num_hidden_layers:
            self.mtp = MTP(cfg)

    def head(self, h):
        w = self.model.embed_tokens.weight if self.cfg.tie_word_embeddings else self.lm_head.weight
        return F.linear(h, w)

    def forward(self, ids, deltanet="chunked", trace=None):
        """ids [B, T] (or [T]) -> dict: logits [B, T, V], hidden [B, T, H]
        (after the final norm: what lm_head and the MTP block read), routers
        (each MoE layer's router logits [B*T, E]). trace: a dict that
        collects hidden_states (embeddings, then every layer's output) and
        per layer moe_in / moe_out / router."""
        if ids.dim() == 1:
            ids = ids[None]
        x = self.model.embed_tokens(ids)
        layers = [] if trace is not None else None
        if trace is not None:
            trace["hidden_states"] = [x]
            trace["layers"] = layers
        routers = []
        for layer in self.model.layers:
            x, r = layer(x, deltanet, layers)
            routers.append(r)
            if trace is not None:
                trace["hidden_states"].append(x)
        h = self.model.norm(x)
        return {"logits": self.head(h), "hidden": h, "routers": routers}

    def forward_mtp(self, hidden, next_ids, trace=None):
        """The MTP block over a sequence: hidden [B, T', H] (the main model's
        normed hidden states at positions t) and next_ids [B, T'] (the ids
        at t + 1) -> dict: logits [B, T', V] predicting the ids at t + 2,
        routers. trace: a list that collects moe_in / moe_out / router."""
        m = self.mtp
        e = m.pre_fc_norm_embedding(self.model.embed_tokens(next_ids))
        x = m.fc(torch.cat([e, m.pre_fc_norm_hidden(hidden)], -1))
        routers = []
        for layer in m.layers:
            x, r = layer(x, "chunked", trace)
            routers.append(r)
        return {"logits": self.head(m.norm(x)), "routers": routers}

    # ---- weights ------------------------------------------------------------

    def init_weights(self, seed=None):
        """Fresh weights: linear layers and embeddings N(0, initializer_range),
        the zero-centred norms 0 (multiplier 1), the DeltaNet output norms 1,
        A_log = log U(1, 16), dt_bias 1, the conv as PyTorch initialises it."""
        gen = torch.Generator().manual_seed(seed) if seed is not None else None
        std = self.cfg.initializer_range
        with torch.no_grad():
            for name, mod in self.named_modules():
                if isinstance(mod, (nn.Linear, nn.Embedding)):
                    mod.weight.copy_(torch.randn(mod.weight.shape, generator=gen) * std)
                elif isinstance(mod, RMSNorm):
                    mod.weight.zero_()
                elif isinstance(mod, GatedRMSNorm):
                    mod.weight.fill_(1.0)
                elif isinstance(mod, nn.Conv1d):
                    bound = 1.0 / math.sqrt(mod.weight.shape[-1])
                    mod.weight.copy_((torch.rand(mod.weight.shape, generator=gen) * 2 - 1) * bound)
                elif isinstance(mod, GatedDeltaNet):
                    mod.A_log.copy_((torch.rand(mod.A_log.shape, generator=gen) * 15 + 1).log())
                    mod.dt_bias.fill_(1.0)
        return self

    def load_tensors(self, tensors, strict=True):
        """Weights from {HF name: array or tensor}. Accepts the per-expert
        names, fused experts (experts.gate_up_proj [E, 2I, H], gate rows
        first; experts.down_proj [E, H, I]) and the multimodal wrapper's
        prefix model.language_model.; mtp.* and model.mtp.* as mtp.*. With
        strict, every parameter must be given and every given tensor used
        (vision tensors excepted)."""
        own = self.state_dict()
        flat = {}
        for name, t in tensors.items():
            t = torch.as_tensor(np.asarray(t, dtype=np.float32))
            if name.startswith("model.language_model."):
                name = "model." + name[len("model.language_model."):]
            elif name.startswith("language_model.lm_head."):
                name = name[len("language_model."):]
            elif name.startswith("model.mtp."):
                name = name[len("model."):]
            elif name.startswith(("model.visual.", "visual.", "vision_tower")):
                continue
            if name.endswith("mlp.experts.gate_up_proj"):
                base = name[: -len("gate_up_proj")]
                inter = t.shape[1] // 2
                for e in range(t.shape[0]):
                    flat[f"{base}{e}.gate_proj.weight"] = t[e, :inter]
                    flat[f"{base}{e}.up_proj.weight"] = t[e, inter:]
            elif name.endswith("mlp.experts.down_proj"):
                base = name[: -len("down_proj")]
                for e in range(t.shape[0]):
                    flat[f"{base}{e}.down_proj.weight"] = t[e]
            else:
                flat[name] = t
        unused = sorted(set(flat) - set(own))
        missing = sorted(set(own) - set(flat))
        if strict and (unused or missing):
            raise ValueError(f"weights do not match the config: missing {missing[:5]}, unexpected {unused[:5]}")
        with torch.no_grad():
            for name, p in own.items():
                if name in flat:
                    src = flat[name]
                    if tuple(src.shape) != tuple(p.shape):
                        raise ValueError(f"{name}: shape {tuple(src.shape)}, the config wants {tuple(p.shape)}")
                    p.copy_(src)
        return self


def read_folder_tensors(folder):
    """Every tensor of an HF folder: model.safetensors or the shards of
    model.safetensors.index.json, as float32 numpy arrays."""
    idx = os.path.join(folder, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    out = {}
    for fn in files:
        out.update(st.read(os.path.join(folder, fn))[0])
    return out


def load_hf(folder, strict=True):
    """A Qwen35Moe with the weights of an HF folder (config.json +
    safetensors)."""
    with open(os.path.join(folder, "config.json")) as f:
        cfg = Config(json.load(f))
    model = Qwen35Moe(cfg)
    model.load_tensors(read_folder_tensors(folder), strict=strict)
    return model.eval()
