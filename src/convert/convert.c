/* edge0 convert: Hugging Face checkpoint -> mlx layout. See convert.h for
 * what is written; this file is the plan (names, shapes, checks), the
 * producer of every job's rows (read-ahead, pread, quantize) and
 * config.json; io/stwriter.c lays out and writes the shards, the index and
 * the atomic directory; convert_fs.c has the copies and the --force checks.
 *
 * Traps this code handles (each would silently give a wrong model):
 *  - hybrid norms: input/post-attention/final/q/k are zero-centred in HF and
 *    stored as 1 + w; the DeltaNet output norm (linear_attn.norm) is not;
 *  - fused experts: gate rows come first in gate_up [E, 2I, H]; splitting
 *    takes rows [e*2I, e*2I + I) for gate and the next I for up, per expert;
 *  - scales and biases are computed and applied in f32 and only stored as
 *    bf16: quantizing with the rounded values changes codes;
 *  - routers and shared-expert gates are 8-bit group 64 whatever the
 *    default, and must be listed per module in config.json or a loader will
 *    read them with the default width;
 *  - qwen3_5_moe always gets the "language_model." names, also from a
 *    text-only source with the "model." prefix (as mlx-lm's sanitize). */
#include "convert/convert.h"

#include "convert/convert_fs.h"
#include "io/config.h"
#include "io/safetensors.h"
#include "io/stwriter.h"
#include "quant/quantize.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/file.h"
#include "util/num.h"
#include "util/sbuf.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHUNK_BYTES    (16u << 20)  /* source rows per job, as f32 */
#define PREFETCH_BYTES (256u << 20) /* source read ahead of the workers */
#define NAME_LEN       512
#define ROUTER_BITS    8
#define ROUTER_GROUP   64

void e0_convert_opts_default(e0_convert_opts *o) {
    memset(o, 0, sizeof *o);
    o->bits = 4;
    o->group = 64;
}

/* ---- small helpers -------------------------------------------------------- */

static void shape_str(char *buf, size_t n, int ndim, const uint64_t *shape) {
    size_t o = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && o < n; i++)
        o +=
            (size_t)snprintf(buf + o, n - o, "%s%llu", i ? ", " : "", (unsigned long long)shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static bool float_dtype(st_dtype t) {
    return t == ST_BF16 || t == ST_F16 || t == ST_F32;
}

/* n values of dtype dt at src -> f32. */
static void load_f32(st_dtype dt, const uint8_t *src, int64_t n, float *out) {
    switch (dt) {
    case ST_BF16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_bf16_to_f32(e0_ld16(src, (size_t)i));
        break;
    case ST_F16:
        for (int64_t i = 0; i < n; i++)
            out[i] = e0_f16_to_f32(e0_ld16(src, (size_t)i));
        break;
    default:
        memcpy(out, src, (size_t)n * sizeof *out);
        break;
    }
}

static void store_f32(st_dtype dt, const float *in, int64_t n, float add, uint8_t *dst) {
    for (int64_t i = 0; i < n; i++) {
        const float v = in[i] + add;
        if (dt == ST_F32) {
            memcpy(dst + 4 * i, &v, 4);
        } else {
            const uint16_t h = dt == ST_BF16 ? e0_f32_to_bf16(v) : e0_f32_to_f16(v);
            memcpy(dst + 2 * i, &h, 2);
        }
    }
}

/* ---- the plan -------------------------------------------------------------- */

/* Rows [row0, row0 + n) of source tensor t, each `cols` values wide. */
typedef struct {
    uint32_t t;
    int64_t row0, n;
} seg;

/* One output tensor (float) or quantized module (weight, scales, biases). */
typedef struct {
    char *name; /* float: tensor name; quantized: module path */
    bool quant;
    bool listed;     /* per-module entry in config.json "quantization" */
    int bits, group; /* quantized */
    st_dtype dtype;  /* float output dtype */
    float add;       /* + 1 for zero-centred norms */
    int ndim;
    uint64_t shape[ST_MAX_DIMS]; /* float: as written; quantized: logical [..., out, in] */
    int64_t rows, cols;          /* rows of `cols` source values */
    size_t seg0, nseg;
    uint64_t src_bytes;
} item;

typedef struct {
    const char *src;
    e0_convert_opts o;
    st_set *st;
    e0_config cfg;
    bool have_cfg;
    char sp[64];        /* source name prefix ("model.", "model.language_model.") */
    char op[64];        /* output prefix */
    const char *lm_out; /* output lm_head module */
    const char *layout; /* "hf" / "hf-fused" of the first MoE layer */
    item *it;
    size_t n, cap;
    seg *sg;
    size_t nsg, capsg;
    uint8_t *used; /* [st_count]: 1 converted, 2 dropped */
    size_t dropped, quantized, kept_mtp;
    char dropped_example[128];
    stw w; /* the output's shards, headers and jobs */
    uint64_t total_src;
    size_t max_cols;
    char *err;
} plan;

static size_t tidx(const plan *p, const st_tensor *t) {
    return (size_t)(t - st_at(p->st, 0));
}

static const char *tfile(const plan *p, const st_tensor *t) {
    return st_file_path(p->st, t->file);
}

/* A source tensor that must exist with this shape and a float dtype. */
static int need(plan *p, const char *name, int ndim, const int64_t *shape, const st_tensor **out) {
    const st_tensor *t = st_get(p->st, name);
    if (!t)
        return e0_fail(p->err, E0_ENOTFOUND,
                       "%s: tensor %s is missing (config.json describes a %s model with %d layers)",
                       p->src, name, p->cfg.family_name, p->cfg.n_layers);
    if (!float_dtype(t->dtype))
        return e0_fail(p->err, E0_EUNSUPPORTED,
                       "%s: tensor %s has dtype %s, which convert cannot read (it converts BF16, "
                       "F16 and F32 weights)",
                       tfile(p, t), name, st_dtype_name(t->dtype));
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++)
        ok = (int64_t)t->shape[i] == shape[i];
    if (!ok) {
        char have[128], want[128];
        uint64_t w[ST_MAX_DIMS];
        for (int i = 0; i < ndim; i++)
            w[i] = (uint64_t)shape[i];
        shape_str(have, sizeof have, t->ndim, t->shape);
        shape_str(want, sizeof want, ndim, w);
        return e0_fail(p->err, E0_EFORMAT, "%s: tensor %s has shape %s but config.json implies %s",
                       tfile(p, t), name, have, want);
    }
    p->used[tidx(p, t)] = 1;
    *out = t;
    return 0;
}

static item *new_item(plan *p, const char *name, bool quant, int ndim, const uint64_t *shape,
                      int64_t cols) {
    if (arr_reserve((void **)&p->it, &p->cap, p->n + 1, sizeof *p->it)) return NULL;
    item *t = &p->it[p->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = strdup(name))) return NULL;
    p->n++;
    t->quant = quant;
    t->ndim = ndim;
    memcpy(t->shape, shape, (size_t)ndim * sizeof *shape);
    uint64_t numel = 1;
    for (int i = 0; i < ndim; i++)
        numel *= shape[i];
    t->cols = cols;
    t->rows = (int64_t)(numel / (uint64_t)cols);
    t->seg0 = p->nsg;
    return t;
}

/* Appends rows of source tensor t to the last item (merged with the
 * previous piece when contiguous). */
static int add_seg(plan *p, const st_tensor *t, int64_t row0, int64_t n) {
    item *it = &p->it[p->n - 1];
    const uint32_t ti = (uint32_t)tidx(p, t);
    it->src_bytes += (uint64_t)n * (uint64_t)it->cols * st_dtype_size(t->dtype);
    if (it->nseg) {
        seg *last = &p->sg[p->nsg - 1];
        if (last->t == ti && last->row0 + last->n == row0) {
            last->n += n;
            return 0;
        }
    }
    if (arr_reserve((void **)&p->sg, &p->capsg, p->nsg + 1, sizeof *p->sg))
        return e0_fail(p->err, E0_ENOMEM, "out of memory");
    p->sg[p->nsg++] = (seg){ti, row0, n};
    it->nseg++;
    return 0;
}

static bool quantizable(int64_t cols, int bits, int group) {
    return cols % group == 0 && (cols * bits) % 32 == 0;
}

/* A matrix module out_base: [lead x] [rows, cols], quantized when its width
 * divides into groups, else kept in `dtype`. Sources are added by the caller. */
static int mat_item(plan *p, const char *out_base, int64_t lead, int64_t rows, int64_t cols,
                    bool router, st_dtype dtype) {
    int bits = router ? ROUTER_BITS : p->o.bits, group = router ? ROUTER_GROUP : p->o.group;
    bool q = quantizable(cols, bits, group);
    uint64_t shape[3];
    int nd = 0;
    if (lead) shape[nd++] = (uint64_t)lead;
    shape[nd++] = (uint64_t)rows;
    shape[nd++] = (uint64_t)cols;
    char name[NAME_LEN];
    snprintf(name, sizeof name, q ? "%s" : "%s.weight", out_base);
    item *t = new_item(p, name, q, nd, shape, cols);
    if (!t) return e0_fail(p->err, E0_ENOMEM, "out of memory");
    t->dtype = dtype;
    if (q) {
        t->bits = bits;
        t->group = group;
        t->listed = router;
    }
    return 0;
}

/* A plain linear layer: src_base.weight [rows, cols] -> out_base. */
static int linear(plan *p, const char *src_base, const char *out_base, int64_t rows, int64_t cols,
                  bool router) {
    char name[NAME_LEN];
    snprintf(name, sizeof name, "%s.weight", src_base);
    const st_tensor *t;
    int rc = need(p, name, 2, (int64_t[]){rows, cols}, &t);
    if (!rc) rc = mat_item(p, out_base, 0, rows, cols, router, t->dtype);
    if (!rc) rc = add_seg(p, t, 0, rows);
    return rc;
}

/* A vector [n] copied (dtype: ST_NDTYPES keeps the source's), + add. */
static int vec(plan *p, const char *src_name, const char *out_name, int64_t n, float add,
               st_dtype dtype) {
    const st_tensor *t;
    int rc = need(p, src_name, 1, (int64_t[]){n}, &t);
    if (rc) return rc;
    item *it = new_item(p, out_name, false, 1, (uint64_t[]){(uint64_t)n}, n);
    if (!it) return e0_fail(p->err, E0_ENOMEM, "out of memory");
    it->dtype = dtype == ST_NDTYPES ? t->dtype : dtype;
    it->add = add;
    return add_seg(p, t, 0, 1);
}

#define NM(buf, ...) (snprintf(buf, sizeof buf, __VA_ARGS__), buf)

static int plan_attention(plan *p, const char *sb, const char *ob) {
    const e0_config *c = &p->cfg;
    char a[NAME_LEN], b[NAME_LEN];
    const int64_t H = c->hidden, hd = c->head_dim,
                  nq = (int64_t)c->n_heads * hd * (c->attn_gated ? 2 : 1);
    const int64_t nkv = (int64_t)c->n_kv_heads * hd;
    const float add = c->norm_zero_centred ? 1.0f : 0.0f;
    int rc;
    if ((rc = linear(p, NM(a, "%sself_attn.q_proj", sb), NM(b, "%sself_attn.q_proj", ob), nq, H,
                     false)) ||
        (rc = linear(p, NM(a, "%sself_attn.k_proj", sb), NM(b, "%sself_attn.k_proj", ob), nkv, H,
                     false)) ||
        (rc = linear(p, NM(a, "%sself_attn.v_proj", sb), NM(b, "%sself_attn.v_proj", ob), nkv, H,
                     false)) ||
        (rc = linear(p, NM(a, "%sself_attn.o_proj", sb), NM(b, "%sself_attn.o_proj", ob), H,
                     (int64_t)c->n_heads * hd, false)) ||
        (rc = vec(p, NM(a, "%sself_attn.q_norm.weight", sb), NM(b, "%sself_attn.q_norm.weight", ob),
                  hd, add, ST_NDTYPES)) ||
        (rc = vec(p, NM(a, "%sself_attn.k_norm.weight", sb), NM(b, "%sself_attn.k_norm.weight", ob),
                  hd, add, ST_NDTYPES)))
        return rc;
    return 0;
}

static int plan_deltanet(plan *p, const char *sb, const char *ob) {
    const e0_config *c = &p->cfg;
    char a[NAME_LEN], b[NAME_LEN];
    const int64_t H = c->hidden, Kd = (int64_t)c->lin_k_heads * c->lin_k_dim;
    const int64_t Vd = (int64_t)c->lin_v_heads * c->lin_v_dim, Hv = c->lin_v_heads,
                  K = c->conv_kernel;
    const int64_t C = 2 * Kd + Vd;
    int rc;
    if (st_get(p->st, NM(a, "%slinear_attn.in_proj_qkvz.weight", sb))) { /* qwen3_next packing */
        if ((rc = linear(p, NM(a, "%slinear_attn.in_proj_qkvz", sb),
                         NM(b, "%slinear_attn.in_proj_qkvz", ob), 2 * Kd + 2 * Vd, H, false)) ||
            (rc = linear(p, NM(a, "%slinear_attn.in_proj_ba", sb),
                         NM(b, "%slinear_attn.in_proj_ba", ob), 2 * Hv, H, false)))
            return rc;
    } else if ((rc = linear(p, NM(a, "%slinear_attn.in_proj_qkv", sb),
                            NM(b, "%slinear_attn.in_proj_qkv", ob), C, H, false)) ||
               (rc = linear(p, NM(a, "%slinear_attn.in_proj_z", sb),
                            NM(b, "%slinear_attn.in_proj_z", ob), Vd, H, false)) ||
               (rc = linear(p, NM(a, "%slinear_attn.in_proj_b", sb),
                            NM(b, "%slinear_attn.in_proj_b", ob), Hv, H, false)) ||
               (rc = linear(p, NM(a, "%slinear_attn.in_proj_a", sb),
                            NM(b, "%slinear_attn.in_proj_a", ob), Hv, H, false))) {
        return rc;
    }
    /* conv1d: HF [C, 1, K] -> mlx [C, K, 1], the same bytes; a source
     * already in [C, K, 1] is copied as it is. */
    NM(a, "%slinear_attn.conv1d.weight", sb);
    const st_tensor *t = st_get(p->st, a);
    const bool mlx_shape =
        t && t->ndim == 3 && (int64_t)t->shape[1] == K && t->shape[2] == 1 && K != 1;
    if ((rc = need(p, a, 3, mlx_shape ? (int64_t[]){C, K, 1} : (int64_t[]){C, 1, K}, &t)))
        return rc;
    item *it = new_item(p, NM(b, "%slinear_attn.conv1d.weight", ob), false, 3,
                        (uint64_t[]){(uint64_t)C, (uint64_t)K, 1}, K);
    if (!it) return e0_fail(p->err, E0_ENOMEM, "out of memory");
    it->dtype = t->dtype;
    if (mlx_shape) it->cols = 1, it->rows = C * K;
    if ((rc = add_seg(p, t, 0, it->rows))) return rc;
    if ((rc = vec(p, NM(a, "%slinear_attn.A_log", sb), NM(b, "%slinear_attn.A_log", ob), Hv, 0,
                  ST_F32)) ||
        (rc = vec(p, NM(a, "%slinear_attn.dt_bias", sb), NM(b, "%slinear_attn.dt_bias", ob), Hv, 0,
                  ST_NDTYPES)) ||
        (rc = vec(p, NM(a, "%slinear_attn.norm.weight", sb), NM(b, "%slinear_attn.norm.weight", ob),
                  c->lin_v_dim, 0, ST_NDTYPES)) ||
        (rc = linear(p, NM(a, "%slinear_attn.out_proj", sb), NM(b, "%slinear_attn.out_proj", ob), H,
                     Vd, false)))
        return rc;
    return 0;
}

/* A fused expert tensor, with or without ".weight". */
static const st_tensor *find2(plan *p, const char *base) {
    char n[NAME_LEN + 16];
    const st_tensor *t = st_get(p->st, base);
    return t ? t : st_get(p->st, NM(n, "%s.weight", base));
}

static int plan_experts(plan *p, const char *sb, const char *ob, int li) {
    const e0_config *c = &p->cfg;
    char a[NAME_LEN], b[NAME_LEN];
    const int64_t H = c->hidden, I = c->moe_inter, E = c->n_experts;
    int rc;
    const st_tensor *gu = find2(p, NM(a, "%smlp.experts.gate_up_proj", sb)), *dn = NULL;
    const bool fused = gu != NULL;
    const st_tensor **g = NULL, **u = NULL, **d = NULL;
    if (fused) {
        if ((rc = need(p, gu->name, 3, (int64_t[]){E, 2 * I, H}, &gu))) return rc;
        dn = find2(p, NM(a, "%smlp.experts.down_proj", sb));
        if ((rc = need(p, dn ? dn->name : a, 3, (int64_t[]){E, H, I}, &dn))) return rc;
    } else if (st_get(p->st, NM(a, "%smlp.experts.0.gate_proj.weight", sb))) {
        g = calloc((size_t)E, sizeof *g);
        u = calloc((size_t)E, sizeof *u);
        d = calloc((size_t)E, sizeof *d);
        if (!g || !u || !d) {
            rc = e0_fail(p->err, E0_ENOMEM, "out of memory");
            goto done;
        }
        for (int64_t e = 0; e < E; e++)
            if ((rc = need(p, NM(a, "%smlp.experts.%lld.gate_proj.weight", sb, (long long)e), 2,
                           (int64_t[]){I, H}, &g[e])) ||
                (rc = need(p, NM(a, "%smlp.experts.%lld.up_proj.weight", sb, (long long)e), 2,
                           (int64_t[]){I, H}, &u[e])) ||
                (rc = need(p, NM(a, "%smlp.experts.%lld.down_proj.weight", sb, (long long)e), 2,
                           (int64_t[]){H, I}, &d[e])))
                goto done;
    } else if (st_get(p->st, NM(a, "%smlp.switch_mlp.gate_proj.weight", sb)) ||
               st_get(p->st, NM(a, "%smlp.switch_mlp.gate_up_proj.weight", sb))) {
        return e0_fail(p->err, E0_EUNSUPPORTED,
                       "%s: layer %d is already in the mlx layout (%s); nothing to convert", p->src,
                       li, a);
    } else {
        return e0_fail(p->err, E0_ENOTFOUND,
                       "%s: layer %d has no expert tensors (%smlp.experts.0.gate_proj.weight or "
                       "%smlp.experts.gate_up_proj)",
                       p->src, li, sb, sb);
    }
    if (!p->layout) p->layout = fused ? "hf-fused" : "hf";
    const st_dtype dt = fused ? gu->dtype : g[0]->dtype;
    if (p->o.fused_gate_up) {
        if ((rc = mat_item(p, NM(b, "%smlp.switch_mlp.gate_up_proj", ob), E, 2 * I, H, false, dt)))
            goto done;
        if (fused) rc = add_seg(p, gu, 0, E * 2 * I);
        for (int64_t e = 0; !fused && !rc && e < E; e++)
            if (!(rc = add_seg(p, g[e], 0, I))) rc = add_seg(p, u[e], 0, I);
        if (rc) goto done;
    } else {
        if ((rc = mat_item(p, NM(b, "%smlp.switch_mlp.gate_proj", ob), E, I, H, false, dt)))
            goto done;
        for (int64_t e = 0; !rc && e < E; e++)
            rc = fused ? add_seg(p, gu, e * 2 * I, I) : add_seg(p, g[e], 0, I);
        if (rc || (rc = mat_item(p, NM(b, "%smlp.switch_mlp.up_proj", ob), E, I, H, false, dt)))
            goto done;
        for (int64_t e = 0; !rc && e < E; e++)
            rc = fused ? add_seg(p, gu, e * 2 * I + I, I) : add_seg(p, u[e], 0, I);
        if (rc) goto done;
    }
    if ((rc = mat_item(p, NM(b, "%smlp.switch_mlp.down_proj", ob), E, H, I, false,
                       fused ? dn->dtype : d[0]->dtype)))
        goto done;
    if (fused) rc = add_seg(p, dn, 0, E * H);
    for (int64_t e = 0; !fused && !rc && e < E; e++)
        rc = add_seg(p, d[e], 0, H);
done:
    free(g);
    free(u);
    free(d);
    return rc;
}

static int plan_moe(plan *p, const char *sb, const char *ob, int li) {
    const e0_config *c = &p->cfg;
    char a[NAME_LEN], b[NAME_LEN];
    const int64_t H = c->hidden;
    int rc;
    if ((rc = linear(p, NM(a, "%smlp.gate", sb), NM(b, "%smlp.gate", ob), c->n_experts, H, true)) ||
        (rc = plan_experts(p, sb, ob, li)))
        return rc;
    if (c->shared_inter <= 0) return 0;
    const int64_t Is = c->shared_inter;
    if ((rc = linear(p, NM(a, "%smlp.shared_expert.gate_proj", sb),
                     NM(b, "%smlp.shared_expert.gate_proj", ob), Is, H, false)) ||
        (rc = linear(p, NM(a, "%smlp.shared_expert.up_proj", sb),
                     NM(b, "%smlp.shared_expert.up_proj", ob), Is, H, false)) ||
        (rc = linear(p, NM(a, "%smlp.shared_expert.down_proj", sb),
                     NM(b, "%smlp.shared_expert.down_proj", ob), H, Is, false)) ||
        (rc = linear(p, NM(a, "%smlp.shared_expert_gate", sb),
                     NM(b, "%smlp.shared_expert_gate", ob), 1, H, true)))
        return rc;
    return 0;
}

static int plan_layer(plan *p, int li) {
    const e0_config *c = &p->cfg;
    char sb[128], ob[128], a[NAME_LEN], b[NAME_LEN];
    snprintf(sb, sizeof sb, "%slayers.%d.", p->sp, li);
    snprintf(ob, sizeof ob, "%slayers.%d.", p->op, li);
    const float add = c->norm_zero_centred ? 1.0f : 0.0f;
    int rc;
    if ((rc = vec(p, NM(a, "%sinput_layernorm.weight", sb), NM(b, "%sinput_layernorm.weight", ob),
                  c->hidden, add, ST_NDTYPES)))
        return rc;
    rc = c->layer_linear[li] ? plan_deltanet(p, sb, ob) : plan_attention(p, sb, ob);
    if (!rc)
        rc = vec(p, NM(a, "%spost_attention_layernorm.weight", sb),
                 NM(b, "%spost_attention_layernorm.weight", ob), c->hidden, add, ST_NDTYPES);
    if (rc) return rc;
    if (c->layer_moe[li]) return plan_moe(p, sb, ob, li);
    const int64_t H = c->hidden, I = c->dense_inter;
    if ((rc = linear(p, NM(a, "%smlp.gate_proj", sb), NM(b, "%smlp.gate_proj", ob), I, H, false)) ||
        (rc = linear(p, NM(a, "%smlp.up_proj", sb), NM(b, "%smlp.up_proj", ob), I, H, false)) ||
        (rc = linear(p, NM(a, "%smlp.down_proj", sb), NM(b, "%smlp.down_proj", ob), H, I, false)))
        return rc;
    return 0;
}

static bool starts(const char *s, const char *pre) {
    return strncmp(s, pre, strlen(pre)) == 0;
}

static bool ends(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && strcmp(s + a - b, suf) == 0;
}

/* Tensors mlx-lm drops: the MTP head, the vision tower, RoPE buffers. */
static bool droppable(const char *n) {
    static const char *const pre[] = {"mtp.",
                                      "model.mtp.",
                                      "model.visual.",
                                      "visual.",
                                      "model.vision_tower.",
                                      "vision_tower.",
                                      "vision_model.",
                                      "model.multi_modal_projector.",
                                      "multi_modal_projector."};
    for (size_t i = 0; i < sizeof pre / sizeof *pre; i++)
        if (starts(n, pre[i])) return true;
    return ends(n, ".rotary_emb.inv_freq");
}

static bool is_mtp(const char *n) {
    return starts(n, "mtp.") || starts(n, "model.mtp.");
}

/* --keep-mtp: an MTP tensor copied as the source has it (name, dtype,
 * shape, values), one row of its last dimension at a time. */
static int keep_tensor(plan *p, const st_tensor *t) {
    if (!float_dtype(t->dtype))
        return e0_fail(p->err, E0_EUNSUPPORTED,
                       "%s: tensor %s has dtype %s, which convert cannot copy (BF16, F16, F32)",
                       tfile(p, t), t->name, st_dtype_name(t->dtype));
    bool empty = t->ndim < 1;
    for (int i = 0; i < t->ndim; i++)
        empty |= t->shape[i] == 0;
    if (empty)
        return e0_fail(p->err, E0_EFORMAT, "%s: tensor %s has no values to keep", tfile(p, t),
                       t->name);
    item *it = new_item(p, t->name, false, t->ndim, t->shape, (int64_t)t->shape[t->ndim - 1]);
    if (!it) return e0_fail(p->err, E0_ENOMEM, "out of memory");
    it->dtype = t->dtype;
    p->used[tidx(p, t)] = 1;
    p->kept_mtp++;
    return add_seg(p, t, 0, it->rows);
}

static void note_drop(plan *p, const st_tensor *t) {
    p->used[tidx(p, t)] = 2;
    if (!p->dropped++) snprintf(p->dropped_example, sizeof p->dropped_example, "%s", t->name);
}

static int plan_tensors(plan *p) {
    const e0_config *c = &p->cfg;
    static const char *const prefixes[] = {"model.language_model.", "model.",
                                           "language_model.model.", ""};
    char a[NAME_LEN], b[NAME_LEN];
    size_t i = 0, np = sizeof prefixes / sizeof *prefixes;
    for (; i < np; i++)
        if (st_get(p->st, NM(a, "%sembed_tokens.weight", prefixes[i]))) break;
    if (i == np)
        return e0_fail(
            p->err, E0_ENOTFOUND,
            "%s: no embed_tokens.weight under any known prefix (model., model.language_model.)",
            p->src);
    snprintf(p->sp, sizeof p->sp, "%s", prefixes[i]);
    const bool q35 = c->family == E0_FAM_QWEN3_5_MOE;
    snprintf(p->op, sizeof p->op, "%s", q35 ? "language_model.model." : "model.");
    p->lm_out = q35 ? "language_model.lm_head" : "lm_head";
    int rc;
    if ((rc = linear(p, NM(a, "%sembed_tokens", p->sp), NM(b, "%sembed_tokens", p->op), c->vocab,
                     c->hidden, false)))
        return rc;
    for (int li = 0; li < c->n_layers; li++)
        if ((rc = plan_layer(p, li))) return rc;
    if ((rc = vec(p, NM(a, "%snorm.weight", p->sp), NM(b, "%snorm.weight", p->op), c->hidden,
                  c->norm_zero_centred ? 1.0f : 0.0f, ST_NDTYPES)))
        return rc;
    const char *lm_src = "lm_head";
    if (!st_get(p->st, "lm_head.weight") && st_get(p->st, "language_model.lm_head.weight"))
        lm_src = "language_model.lm_head";
    const st_tensor *lm = st_get(p->st, NM(a, "%s.weight", lm_src));
    if (c->tie_embeddings) {
        if (lm) note_drop(p, lm); /* tied: mlx-lm drops it */
    } else if ((rc = linear(p, lm_src, p->lm_out, c->vocab, c->hidden, false))) {
        return rc;
    }
    /* Everything else must be something mlx-lm drops too. */
    size_t unknown = 0;
    const st_tensor *first = NULL;
    for (size_t k = 0; k < st_count(p->st); k++) {
        const st_tensor *t = st_at(p->st, k);
        if (p->used[k]) continue;
        if (p->o.keep_mtp && is_mtp(t->name)) {
            if ((rc = keep_tensor(p, t))) return rc;
        } else if (droppable(t->name)) {
            note_drop(p, t);
        } else if (!unknown++) {
            first = t;
        }
    }
    if (unknown) {
        char more[64] = "";
        if (unknown > 1) snprintf(more, sizeof more, " (and %zu more)", unknown - 1);
        return e0_fail(p->err, E0_EFORMAT,
                       "%s: tensor %s%s is not part of the %s model config.json describes; convert "
                       "does not know "
                       "where it belongs",
                       tfile(p, first), first->name, more, c->family_name);
    }
    return 0;
}

/* ---- shards and headers --------------------------------------------------- */

/* The output as the writer's items: shards of at most shard_bytes, jobs of
 * about CHUNK_BYTES of rows as f32. */
static int plan_layout(plan *p) {
    stw_item *d = stw_items(&p->w, p->n);
    if (!d) return e0_fail(p->err, E0_ENOMEM, "out of memory");
    for (size_t i = 0; i < p->n; i++) {
        const item *t = &p->it[i];
        d[i] = (stw_item){.name = t->name,
                          .bits = t->quant ? t->bits : 0,
                          .group = t->group,
                          .dtype = t->dtype,
                          .ndim = t->ndim,
                          .rows = t->rows,
                          .cols = t->cols,
                          .row_cost = (uint64_t)t->cols * 4,
                          .src_bytes = t->src_bytes};
        memcpy(d[i].shape, t->shape, sizeof t->shape);
        p->quantized += t->quant;
        p->total_src += t->src_bytes;
        if ((size_t)t->cols > p->max_cols) p->max_cols = (size_t)t->cols;
    }
    const stw_layout_opts lo = {
        .shard_bytes = p->o.shard_bytes, .job_bytes = CHUNK_BYTES, .format = "mlx"};
    return stw_layout(&p->w, &lo, p->err);
}

static void plan_free(plan *p) {
    for (size_t i = 0; i < p->n; i++)
        free(p->it[i].name);
    free(p->it);
    free(p->sg);
    free(p->used);
    stw_free(&p->w);
    st_set_free(p->st);
    if (p->have_cfg) config_free(&p->cfg);
    memset(p, 0, sizeof *p);
}

static int check_opts(const e0_convert_opts *o, char *err) {
    if (!(o->bits == 2 || o->bits == 3 || o->bits == 4 || o->bits == 5 || o->bits == 6 ||
          o->bits == 8))
        return e0_fail(err, E0_EINVAL, "bits must be 2, 3, 4, 5, 6 or 8 (got %d)", o->bits);
    if (!(o->group == 32 || o->group == 64 || o->group == 128))
        return e0_fail(err, E0_EINVAL, "group size must be 32, 64 or 128 (got %d)", o->group);
    return 0;
}

static int plan_build(plan *p, const char *src, const e0_convert_opts *o, char *err) {
    memset(p, 0, sizeof *p);
    p->src = src;
    p->o = *o;
    p->err = err;
    int rc = check_opts(o, err);
    if (rc) return rc;
    if ((rc = config_load(&p->cfg, src, err))) return rc;
    p->have_cfg = true;
    if (p->cfg.quantized) {
        rc = e0_fail(err, E0_EUNSUPPORTED,
                     "%s/config.json has a quantization block: the checkpoint is already quantized",
                     src);
        goto fail;
    }
    if ((rc = st_set_open_dir(&p->st, src, err))) goto fail;
    if (!(p->used = calloc(st_count(p->st) + 1, 1))) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto fail;
    }
    if ((rc = plan_tensors(p)) || (rc = plan_layout(p))) goto fail;
    for (size_t i = 0; i < p->n; i++) { /* every output row has exactly one source row */
        int64_t rows = 0;
        for (size_t s = 0; s < p->it[i].nseg; s++)
            rows += p->sg[p->it[i].seg0 + s].n;
        if (rows != p->it[i].rows) {
            rc = e0_fail(err, E0_EFORMAT, "internal error: %s has %lld source rows for %lld",
                         p->it[i].name, (long long)rows, (long long)p->it[i].rows);
            goto fail;
        }
    }
    return 0;
fail:
    plan_free(p);
    return rc;
}

static void fill_info(const plan *p, e0_convert_info *info) {
    if (!info) return;
    memset(info, 0, sizeof *info);
    snprintf(info->family, sizeof info->family, "%s", p->cfg.family_name);
    snprintf(info->src_layout, sizeof info->src_layout, "%s", p->layout ? p->layout : "hf");
    info->src_tensors = st_count(p->st);
    info->dropped = p->dropped;
    info->kept_mtp = p->kept_mtp;
    snprintf(info->dropped_example, sizeof info->dropped_example, "%s", p->dropped_example);
    info->out_tensors = p->w.n_tensors;
    info->quantized = p->quantized;
    info->n_shards = p->w.nshards;
    info->src_bytes = p->total_src;
    info->out_bytes = p->w.total_bytes;
}

int e0_convert_plan(const char *src, const e0_convert_opts *o, e0_convert_info *info, char *err) {
    e0_convert_opts d;
    e0_convert_opts_default(&d);
    plan p;
    int rc = plan_build(&p, src, o ? o : &d, err);
    if (rc) return rc;
    fill_info(&p, info);
    plan_free(&p);
    return 0;
}

/* ---- the rows of a job ------------------------------------------------------- */

/* What the writer's callbacks get. */
typedef struct {
    const plan *p;
    const e0_convert_opts *o;
    e0_convert_info *info;
} run_ctx;

/* The source pieces of a job in order: rows of one segment each. */
typedef struct {
    size_t s;        /* segment */
    int64_t cur, lo; /* next item row; first item row of segment s */
} piece_it;

static void piece_begin(const plan *p, const stw_job *j, piece_it *it) {
    it->s = p->it[j->item].seg0;
    it->cur = j->r0;
    it->lo = 0;
}

/* Next piece: source tensor, absolute file offset, row bytes and rows, and
 * the piece's first row within the job. false when the job is done. */
static bool piece_next(const plan *p, const stw_job *j, piece_it *it, const st_tensor **st,
                       uint64_t *off, size_t *rb, int64_t *k, int64_t *at) {
    const item *t = &p->it[j->item];
    const int64_t end = j->r0 + j->n;
    for (; it->s < t->seg0 + t->nseg && it->cur < end; it->s++) {
        const seg *sg = &p->sg[it->s];
        const int64_t hi = it->lo + sg->n;
        if (hi <= it->cur) {
            it->lo = hi;
            continue;
        }
        *st = st_at(p->st, sg->t);
        *rb = (size_t)t->cols * st_dtype_size((*st)->dtype);
        *k = (hi < end ? hi : end) - it->cur;
        *off = (*st)->off + (uint64_t)(sg->row0 + (it->cur - it->lo)) * *rb;
        *at = it->cur - j->r0;
        it->cur += *k;
        if (it->cur >= hi) {
            it->lo = hi;
            it->s++;
        }
        return true;
    }
    return false;
}

/* Asks the kernel to start reading the source of job j (the writer calls
 * this up to PREFETCH_BYTES ahead of the workers), so the disk has a queue
 * while the workers compute. */
static void prefetch(void *ctx, const stw_job *j) {
    const plan *p = ((const run_ctx *)ctx)->p;
    piece_it it;
    const st_tensor *st;
    uint64_t off;
    size_t rb;
    int64_t n, at;
    piece_begin(p, j, &it);
    while (piece_next(p, j, &it, &st, &off, &rb, &n, &at))
        posix_fadvise(st_file_fd(p->st, st->file), (off_t)off, (off_t)((uint64_t)n * rb),
                      POSIX_FADV_WILLNEED);
}

/* Reads the job's source rows piece by piece into the scratch's first
 * w.max_cost bytes and converts each row (through the f32 row after them)
 * into the output. */
static void produce(void *ctx, stw_run *r, const stw_job *j, const stw_out *out) {
    const plan *p = ((const run_ctx *)ctx)->p;
    const item *t = &p->it[j->item];
    const int64_t cols = t->cols;
    const size_t wrow = p->w.items[j->item].wrow, ng = p->w.items[j->item].srow / 2; /* groups */
    uint8_t *src = out->scratch;
    float *row = (float *)(void *)(src + p->w.max_cost);
    char err[E0_ERR_MAX];
    piece_it it;
    const st_tensor *st;
    uint64_t off;
    size_t rb;
    int64_t k, at;
    piece_begin(p, j, &it);
    while (piece_next(p, j, &it, &st, &off, &rb, &k, &at)) {
        if (st_pread(p->st, st->file, off, (uint64_t)k * rb, src, err) != 0) {
            stw_fail(r, E0_EIO, "%s", err);
            return;
        }
        for (int64_t i = 0; i < k; i++) {
            const size_t o = (size_t)(at + i);
            const uint8_t *in = src + (size_t)i * rb;
            if (t->quant) {
                load_f32(st->dtype, in, cols, row);
                quant_row(row, cols, t->bits, t->group, (uint32_t *)(void *)(out->w + o * wrow),
                          out->scales + o * ng, out->biases + o * ng);
            } else if (st->dtype == t->dtype && t->add == 0.0f) {
                memcpy(out->w + o * wrow, in, rb);
            } else {
                load_f32(st->dtype, in, cols, row);
                store_f32(t->dtype, row, cols, t->add, out->w + o * wrow);
            }
        }
        stw_done(r, (uint64_t)k * rb);
        if (stw_stopped(r)) return;
    }
}

/* ---- config.json and the writer's callbacks ---------------------------------- */

static cJSON *quant_block(const plan *p) {
    cJSON *q = cJSON_CreateObject();
    if (!q) return NULL;
    cJSON_AddNumberToObject(q, "group_size", p->o.group);
    cJSON_AddNumberToObject(q, "bits", p->o.bits);
    cJSON_AddStringToObject(q, "mode", "affine");
    for (size_t i = 0; i < p->n; i++) {
        const item *t = &p->it[i];
        if (!t->listed) continue;
        cJSON *m = cJSON_AddObjectToObject(q, t->name);
        if (!m) break;
        cJSON_AddNumberToObject(m, "group_size", t->group);
        cJSON_AddNumberToObject(m, "bits", t->bits);
    }
    return q;
}

/* The source's config.json with "quantization" and "quantization_config"
 * (mlx-lm writes both), printed with two-space indents. */
static int config_json(const plan *p, char **out, char *err) {
    char *path = e0_path_join(p->src, "config.json"), *text = NULL;
    size_t len = 0;
    if (!path) return e0_fail(err, E0_ENOMEM, "out of memory");
    int rc = e0_read_file(path, &text, &len, 16u << 20, err);
    free(path);
    if (rc) return rc;
    cJSON *root = cJSON_ParseWithLength(text, len);
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return e0_fail(err, E0_EFORMAT, "%s/config.json: not a JSON object", p->src);
    }
    cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization");
    cJSON_DeleteItemFromObjectCaseSensitive(root, "quantization_config");
    cJSON *q1 = quant_block(p), *q2 = quant_block(p);
    if (!q1 || !q2 || !cJSON_AddItemToObject(root, "quantization", q1) ||
        !cJSON_AddItemToObject(root, "quantization_config", q2)) {
        cJSON_Delete(root);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return e0_fail(err, E0_ENOMEM, "out of memory");
    /* cJSON indents with tabs and writes "key":\tvalue; strings never hold a
     * raw tab (it is escaped). */
    sbuf b = {0};
    for (const char *c = s; *c; c++) {
        if (*c != '\t') {
            const char *e = c;
            while (e[1] && e[1] != '\t')
                e++;
            sb_printf(&b, "%.*s", (int)(e - c + 1), c);
            c = e;
        } else {
            sb_printf(&b, "%s", c > s && c[-1] == ':' ? " " : "  ");
        }
    }
    sb_printf(&b, "\n");
    free(s);
    if (b.oom) {
        sb_free(&b);
        return e0_fail(err, E0_ENOMEM, "out of memory");
    }
    *out = b.p;
    return 0;
}

/* The progress of the writer as convert reports it: source bytes read. */
static void on_progress(void *ctx, const stw_progress *sp) {
    const run_ctx *c = ctx;
    _Static_assert((int)STW_SYNCING == (int)E0_CONVERT_SYNCING && (int)STW_DONE == (int)E0_CONVERT_DONE,
                   "phases map one to one");
    const e0_convert_progress pr = {.phase = (e0_convert_phase)sp->phase,
                                 .done = sp->done,
                                 .total = c->p->total_src,
                                 .written = sp->written,
                                 .seconds = sp->seconds};
    c->o->progress(c->o->progress_ctx, &pr);
}

/* config.json and the copied files, next to the shards. */
static int finish(void *ctx, const char *dir, bool sync, char *err) {
    const run_ctx *c = ctx;
    char *cfg = NULL, *path = NULL;
    int rc = config_json(c->p, &cfg, err);
    if (!rc && !(path = e0_path_join(dir, "config.json")))
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
    if (!rc) rc = stw_write_text(path, cfg, sync, err);
    free(cfg);
    free(path);
    size_t copied = 0;
    if (!rc) rc = convert_fs_copy_aux(c->p->src, dir, sync, &copied, err);
    if (!rc && c->info) c->info->copied_files = copied;
    return rc;
}

int e0_convert_run(const char *src, const char *dst, const e0_convert_opts *o, e0_convert_info *info,
                char *err) {
    e0_convert_opts d;
    e0_convert_opts_default(&d);
    if (!o) o = &d;
    if (!dst || !*dst || !src || !*src)
        return e0_fail(err, E0_EINVAL, "convert needs a source and a destination");
    int rc = check_opts(o, err);
    if (rc) return rc;
    struct stat st;
    const bool exists = lstat(dst, &st) == 0;
    if (exists && !o->force)
        return e0_fail(err, E0_EINVAL,
                       "%s already exists; remove it, choose another path or pass --force", dst);
    if (exists && (rc = convert_fs_check_replace(dst, src, err))) return rc;
    const double t0 = stw_now();
    plan p;
    if ((rc = plan_build(&p, src, o, err))) return rc;
    fill_info(&p, info);
    run_ctx c = {&p, o, info};
    const stw_write_opts wo = {.n_threads = o->n_threads,
                               .sync = !o->no_sync,
                               .replace = o->force,
                               .always_index = true,
                               .scratch_bytes = p.w.max_cost + p.max_cols * sizeof(float),
                               .prefetch_bytes = PREFETCH_BYTES,
                               .t0 = t0,
                               .cancel = o->cancel,
                               .ctx = &c,
                               .produce = produce,
                               .prefetch = prefetch,
                               .finish = finish,
                               .progress = o->progress ? on_progress : NULL};
    rc = stw_write(&p.w, dst, &wo, err);
    plan_free(&p);
    return rc;
}
