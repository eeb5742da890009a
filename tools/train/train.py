#!/usr/bin/python3
"""Trains a small Qwen3.5-MoE (qwen35.py) with its MTP block on token ids,
and exports it as a Hugging Face folder edge0 loads (export.py).

    /usr/bin/python3 tools/train/train.py --train train.bin --valid valid.bin --out DIR
        [--config cfg.json] [--seq-len 256] [--batch 16] [--steps 2000] [--lr 3e-3]
        [--mtp-weight 0.3] [--aux-weight 0.001] [--device auto|cpu|cuda] [--seed 0] ...

Data: flat streams of token ids, raw little-endian (--ids-dtype uint16, the
default, or int32) or .npy. Each training batch is `batch` windows of
seq_len + 1 ids at offsets drawn from a numpy generator seeded with --seed,
so a run is repeatable (same seed, same data, same device: same losses).
Validation uses fixed, non-overlapping windows from the start of the valid
stream (--valid-windows of them).

Loss per batch:
    CE(next token)                     logits[t] vs id[t+1]
  + mtp_weight * CE(next-next token)   the MTP block at t (hidden[t], id[t+1]) vs id[t+2]
  + aux_weight * balance               mean over MoE layers (the MTP block's too)
                                       of E/k * sum_e f_e * P_e: f_e the share of the
                                       k routing slots that went to expert e, P_e the
                                       mean router probability of e (Switch
                                       Transformer's loss; 1.0 when balanced)
The MTP loss trains the main model too (its hidden states are not detached),
as DeepSeek-V3 trains its MTP modules; --mtp-detach stops that gradient.

The model config is an HF config.json-style dict: DEFAULT_CONFIG below,
updated by --config FILE and --vocab-size. Logs one line per --log-every
steps and a validation line per --eval-every steps (loss, perplexity, MTP
loss and MTP top-1 accuracy: how often a draft token would be accepted).
Writes DIR/train.pt (config, weights, optimizer, step) and, at the end,
the HF folder DIR/hf (bf16 unless --export-dtype f32).

Works with PyTorch 1.13 (Debian 12) and 2.x; --amp bf16 runs the matmuls
under autocast (the DeltaNet recurrence, routers and losses stay f32).
"""

import argparse
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export  # noqa: E402
import qwen35  # noqa: E402

# A small model of the Qwen3.6-35B-A3B pattern: 3 DeltaNet layers then one
# attention layer, repeated; 16 experts top-4 plus the shared expert.
DEFAULT_CONFIG = {
    "vocab_size": 1024,
    "hidden_size": 128,
    "num_hidden_layers": 4,
    "full_attention_interval": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 32,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 32,
    "linear_value_head_dim": 32,
    "linear_conv_kernel_dim": 4,
    "num_experts": 16,
    "num_experts_per_tok": 4,
    "moe_intermediate_size": 128,
    "shared_expert_intermediate_size": 128,
    "norm_topk_prob": True,
    "rms_norm_eps": 1e-6,
    "rope_parameters": {"rope_theta": 1e6, "partial_rotary_factor": 0.25, "rope_type": "default"},
    "tie_word_embeddings": False,
    "max_position_embeddings": 4096,
    "mtp_num_hidden_layers": 1,
    "router_aux_loss_coef": 0.001,
    "initializer_range": 0.02,
}


def load_ids(path, dtype):
    if path.endswith(".npy"):
        a = np.load(path, mmap_mode="r")
    else:
        a = np.memmap(path, dtype=np.dtype(dtype).newbyteorder("<"), mode="r")
    if a.ndim != 1 or len(a) < 2:
        raise SystemExit(f"{path}: needs a flat array of at least 2 token ids")
    return a


def batch_at(ids, offsets, n):
    """[len(offsets), n] int64 windows."""
    return torch.from_numpy(np.stack([np.asarray(ids[o:o + n], dtype=np.int64) for o in offsets]))


def balance_loss(routers, k):
    """Switch-style load balance over router logits [N, E] of each layer."""
    total = 0.0
    for lg in routers:
        p = lg.float().softmax(-1)
        E = p.shape[-1]
        idx = p.topk(k, -1).indices
        f = F.one_hot(idx, E).sum(1).float().mean(0) / k     # share of routing slots
        total = total + E * (f * p.mean(0)).sum()
    return total / max(len(routers), 1)


def losses(model, x, args):
    """x [B, T + 1] ids -> dict of scalar tensors: ce, mtp, mtp_acc, aux, total."""
    cfg = model.cfg
    inp, tgt = x[:, :-1], x[:, 1:]
    out = model(inp)
    V = cfg.vocab_size
    ce = F.cross_entropy(out["logits"].float().reshape(-1, V), tgt.reshape(-1))
    routers = list(out["routers"])
    res = {"ce": ce}
    total = ce
    if cfg.mtp_num_hidden_layers and args.mtp_weight > 0:
        h = out["hidden"][:, :-1]                 # positions 0 .. T-2
        if args.mtp_detach:
            h = h.detach()
        m = model.forward_mtp(h, inp[:, 1:])      # with the ids at t + 1
        ml = m["logits"].float()
        mt = x[:, 2:]                             # predicts the ids at t + 2
        mtp = F.cross_entropy(ml.reshape(-1, V), mt.reshape(-1))
        res["mtp"] = mtp
        res["mtp_acc"] = (ml.argmax(-1) == mt).float().mean()
        routers += m["routers"]
        total = total + args.mtp_weight * mtp
    aux = balance_loss(routers, cfg.num_experts_per_tok)
    res["aux"] = aux
    res["total"] = total + args.aux_weight * aux
    return res


def evaluate(model, valid, args, device, amp):
    model.eval()
    n = args.seq_len + 1
    count = min(args.valid_windows, (len(valid) - 1) // args.seq_len)
    offs = [i * args.seq_len for i in range(count)]
    sums = {}
    with torch.no_grad():
        for i in range(0, len(offs), args.batch):
            x = batch_at(valid, offs[i:i + args.batch], n).to(device)
            with amp():
                r = losses(model, x, args)
            for k, v in r.items():
                sums[k] = sums.get(k, 0.0) + float(v) * x.shape[0]
    model.train()
    return {k: v / len(offs) for k, v in sums.items()}


def test_ppl(model, ids, args, device, amp):
    """Perplexity over every whole seq_len window of ids (each window starts from an empty context)."""
    w = (len(ids) - 1) // args.seq_len
    saved = args.valid_windows
    args.valid_windows = w
    v = evaluate(model, ids, args, device, amp)
    args.valid_windows = saved
    print(f"test: {w * args.seq_len} ids, loss {v['ce']:.4f} ppl {math.exp(v['ce']):.2f}", flush=True)


def lr_at(step, args):
    """Linear warm-up, then cosine decay to lr * min_lr_frac."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (args.min_lr_frac + (1 - args.min_lr_frac) * 0.5 * (1 + math.cos(math.pi * min(t, 1.0))))


def make_optimizer(model, args):
    decay, plain = [], []
    for name, p in model.named_parameters():
        # matrices decay; norms, A_log, dt_bias and the conv taps do not
        (decay if p.dim() == 2 else plain).append(p)
    groups = [{"params": decay, "weight_decay": args.weight_decay}, {"params": plain, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=args.lr, betas=(0.9, 0.95), eps=1e-8)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--train", required=True, help="training ids (raw or .npy)")
    ap.add_argument("--valid", required=True, help="validation ids (raw or .npy)")
    ap.add_argument("--ids-dtype", default="uint16", choices=("uint16", "int32"), help="raw files' id type")
    ap.add_argument("--out", required=True, help="output folder: train.pt and hf/")
    ap.add_argument("--config", help="JSON dict updating DEFAULT_CONFIG (HF config.json keys)")
    ap.add_argument("--vocab-size", type=int, help="overrides the config's vocab_size")
    ap.add_argument("--seq-len", type=int, default=256)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-frac", type=float, default=0.1)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--mtp-weight", type=float, default=0.3, help="lambda of the MTP loss")
    ap.add_argument("--mtp-detach", action="store_true", help="the MTP loss does not train the main model")
    ap.add_argument("--aux-weight", type=float, help="load-balance weight (default: router_aux_loss_coef)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="auto", help="auto (cuda when available), cpu, cuda, cuda:N")
    ap.add_argument("--amp", default="off", choices=("off", "bf16"), help="autocast the matmuls to bf16")
    ap.add_argument("--threads", type=int, help="CPU threads (torch.set_num_threads)")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--eval-every", type=int, default=100)
    ap.add_argument("--valid-windows", type=int, default=64, help="validation windows of seq_len")
    ap.add_argument("--export-dtype", default="bf16", choices=("bf16", "f32"))
    ap.add_argument("--tokenizer", help="folder whose tokenizer files go into the export")
    ap.add_argument("--resume", action="store_true", help="continue from OUT/train.pt")
    ap.add_argument("--time-budget", type=float,
                    help="seconds for the whole run: --steps is cut to what fits after timing the first "
                         "--time-probe steps (the log says the count; pass it as --steps to reproduce)")
    ap.add_argument("--time-probe", type=int, default=30, help="steps timed for --time-budget")
    ap.add_argument("--test", help="held-out ids: perplexity over all of them at the end")
    args = ap.parse_args()

    torch.manual_seed(args.seed)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device("cuda" if args.device == "auto" and torch.cuda.is_available()
                          else "cpu" if args.device == "auto" else args.device)
    if args.amp == "bf16":
        def amp():
            return torch.autocast(device_type=device.type, dtype=torch.bfloat16)
    else:
        def amp():
            return torch.autocast(device_type=device.type, enabled=False)

    cfg_dict = dict(DEFAULT_CONFIG)
    if args.config:
        with open(args.config) as f:
            cfg_dict.update(json.load(f))
    if args.vocab_size:
        cfg_dict["vocab_size"] = args.vocab_size
    cfg = qwen35.Config(cfg_dict)
    if not cfg.norm_topk_prob:
        print("warning: edge0 always renormalises the top-k weights for qwen3_5_moe; "
              "norm_topk_prob false trains a different model than edge0 runs")
    if args.aux_weight is None:
        args.aux_weight = cfg.router_aux_loss_coef

    train = load_ids(args.train, args.ids_dtype)
    valid = load_ids(args.valid, args.ids_dtype)
    top = int(max(train.max(), valid.max()))
    if top >= cfg.vocab_size:
        raise SystemExit(f"token id {top} is not below vocab_size {cfg.vocab_size}")
    n = args.seq_len + 1
    if len(train) < n or len(valid) < n:
        raise SystemExit(f"each id file needs at least seq_len + 1 = {n} ids")

    model = qwen35.Qwen35Moe(cfg).init_weights(args.seed).to(device)
    opt = make_optimizer(model, args)
    os.makedirs(args.out, exist_ok=True)
    ck_path = os.path.join(args.out, "train.pt")
    step = 0
    rng = np.random.default_rng(args.seed)
    if args.resume and os.path.exists(ck_path):
        ck = torch.load(ck_path, map_location=device)
        model.load_state_dict(ck["state_dict"])
        opt.load_state_dict(ck["optimizer"])
        step = ck["step"]
        rng.bit_generator.state = ck["rng"]
        print(f"resumed at step {step}")

    n_par = sum(p.numel() for p in model.parameters())
    print(f"model: {n_par / 1e6:.2f} M parameters, layers {cfg.layer_types}, {cfg.num_experts} experts "
          f"top-{cfg.num_experts_per_tok}, MTP layers {cfg.mtp_num_hidden_layers}; device {device}, "
          f"torch {torch.__version__}; train {len(train)} ids, valid {len(valid)} ids")

    def save():
        torch.save({"config": cfg.to_hf(), "state_dict": model.state_dict(), "optimizer": opt.state_dict(),
                    "step": step, "rng": rng.bit_generator.state, "args": vars(args)}, ck_path)

    def log_valid():
        v = evaluate(model, valid, args, device, amp)
        line = f"step {step:6d} valid loss {v['ce']:.4f} ppl {math.exp(v['ce']):.2f}"
        if "mtp" in v:
            line += f" | mtp loss {v['mtp']:.4f} ppl {math.exp(v['mtp']):.2f} top-1 {v['mtp_acc']:.3f}"
        print(line + f" | balance {v['aux']:.3f}", flush=True)

    model.train()
    t0 = time.time()
    log_valid()
    probe_from = None
    while step < args.steps:
        if args.time_budget and probe_from is None:
            probe_from = (step, time.time())
        elif args.time_budget and step == probe_from[0] + args.time_probe:
            per = (time.time() - probe_from[1]) / args.time_probe
            # what stays for the rest: evaluations (a step's worth each, about), the test pass, export
            left = args.time_budget - (time.time() - t0) - 60
            fit = step + max(0, int(left / (per * (1 + 2.0 / args.eval_every))))
            if fit < args.steps:
                args.steps = fit
            print(f"time budget {args.time_budget:.0f}s: {per * 1000:.1f} ms a step -> {args.steps} steps",
                  flush=True)
        offs = rng.integers(0, len(train) - n + 1, size=args.batch)
        x = batch_at(train, offs, n).to(device)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        with amp():
            r = losses(model, x, args)
        opt.zero_grad(set_to_none=True)
        r["total"].backward()
        gnorm = torch.nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        step += 1
        if step % args.log_every == 0 or step == args.steps:
            line = f"step {step:6d} train loss {float(r['ce']):.4f}"
            if "mtp" in r:
                line += f" mtp {float(r['mtp']):.4f}"
            print(line + f" balance {float(r['aux']):.3f} |grad| {float(gnorm):.2f} "
                  f"lr {lr_at(step - 1, args):.2e} {time.time() - t0:.0f}s", flush=True)
        if step % args.eval_every == 0 or step == args.steps:
            log_valid()
            save()
    save()
    if args.test:
        test_ppl(model, load_ids(args.test, args.ids_dtype), args, device, amp)
    dst = export.export(model.to("cpu").eval(), os.path.join(args.out, "hf"), args.export_dtype, args.tokenizer)
    print(f"exported {dst} ({args.export_dtype})")


if __name__ == "__main__":
    main()
