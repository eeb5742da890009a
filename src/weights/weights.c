/* Loading a model directory: config, the four checkpoint layouts' names,
 * shape checks against the config, and views of every weight in place.
 *
 * Name prefixes: "model." (HF Qwen3-MoE / Qwen3-Next), "model.language_model."
 * (HF Qwen3.5 multimodal wrapper), "language_model.model." (mlx Qwen3.5);
 * lm_head is "lm_head" or "language_model.lm_head", or the embedding when
 * tied. mtp.* and vision tensors are never looked up, so they are ignored:
 * e0_model.used keeps them out of the weight bytes, pinning and --io load.
 */
#include "weights/weights.h"

#include "io/gguf.h"
#include "quant/ggml.h"
#include "util/err.h"
#include "util/num.h"

#include <ctype.h>
#include <dirent.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define NAME_MAX_LEN 512

typedef struct {
    e0_model *m;
    char prefix[64];
    bool mlx; /* mlx layouts: hybrid norms already hold 1 + w */
    const char *cfgname; /* where the shapes come from, for messages */
    uint8_t mark;        /* what find() records in m->used: 1, or 2 for an MTP block's tensors */
    char *err;
} loader;

static int load_gguf(loader *L, const char *path);
static int finish_load(e0_model *m, char *err);

/* A tensor by name, recorded as the model's (L->mark) when it is there. */
static const st_tensor *find(loader *L, const char *name) {
    const st_tensor *t = st_get(L->m->st, name);
    if (t && L->m->used) L->m->used[t - st_at(L->m->st, 0)] = L->mark;
    return t;
}

static const char *tfile(loader *L, const st_tensor *t) { return st_file_path(L->m->st, t->file); }

static void shape_str(const st_tensor *t, char *buf, size_t n) {
    size_t o = 0;
    o += (size_t)snprintf(buf + o, n - o, "[");
    for (int i = 0; i < t->ndim && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%llu", i ? ", " : "", (unsigned long long)t->shape[i]);
    if (o < n) snprintf(buf + o, n - o, "]");
}

static int check_shape(loader *L, const st_tensor *t, int ndim, const int64_t *want) {
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = (int64_t)t->shape[i] == want[i];
    if (ok) return 0;
    char have[128], exp[128] = "[";
    shape_str(t, have, sizeof have);
    for (int i = 0; i < ndim; i++)
        snprintf(exp + strlen(exp), sizeof exp - strlen(exp), "%s%lld", i ? ", " : "", (long long)want[i]);
    strncat(exp, "]", sizeof exp - strlen(exp) - 1);
    return e0_fail(L->err, E0_EFORMAT,
                   "%s: tensor %s has shape %s but %s implies %s", tfile(L, t), t->name, have, L->cfgname, exp);
}

static int float_wtype(const st_tensor *t, e0_wtype *wt) {
    switch (t->dtype) {
    case ST_F32: *wt = E0_W_F32; return 0;
    case ST_BF16: *wt = E0_W_BF16; return 0;
    case ST_F16: *wt = E0_W_F16; return 0;
    default: return -1;
    }
}

/* A matrix [lead x rows, cols] (lead = 0: plain [rows, cols]) named `base`
 * + ".weight" (or `base` itself, as in HF fused experts), quantized iff
 * `base`.scales exists. */
static int get_mat(loader *L, const char *base, int64_t lead, int64_t rows, int64_t cols, e0_mat *out) {
    char name[NAME_MAX_LEN];
    snprintf(name, sizeof name, "%s.weight", base);
    const st_tensor *w = find(L, name);
    if (!w) w = find(L, base);
    if (!w) return e0_fail(L->err, E0_ENOTFOUND, "tensor %s is missing from the checkpoint", name);
    snprintf(name, sizeof name, "%s.scales", base);
    const st_tensor *sc = find(L, name);
    int nd = lead ? 3 : 2;
    int64_t shp[3], *s = shp;
    if (lead) *s++ = lead;
    memset(out, 0, sizeof *out);
    out->rows = (lead ? lead : 1) * rows;
    out->cols = cols;
    out->w = w->data;
    if (!sc) {
        s[0] = rows;
        s[1] = cols;
        if (float_wtype(w, &out->type) != 0)
            return e0_fail(L->err, E0_EUNSUPPORTED, "%s: tensor %s has dtype %s; expected BF16, F16 or F32",
                           tfile(L, w), w->name, st_dtype_name(w->dtype));
        return check_shape(L, w, nd, shp);
    }
    snprintf(name, sizeof name, "%s.biases", base);
    const st_tensor *bi = find(L, name);
    if (!bi) return e0_fail(L->err, E0_ENOTFOUND, "tensor %s is missing (%s.scales exists)", name, base);
    int bits = 0, group = 0;
    const e0_config *c = &L->m->cfg;
    if (config_quant_for(c, base, &bits, &group) != 0) {
        /* No settings in config.json: infer from the shapes. */
        if (w->ndim != nd || sc->ndim != nd || w->shape[nd - 1] == 0 || sc->shape[nd - 1] == 0 ||
            (w->shape[nd - 1] * 32) % (uint64_t)cols || cols % (int64_t)sc->shape[nd - 1])
            return e0_fail(L->err, E0_EFORMAT,
                           "%s: tensor %s is quantized but config.json has no quantization settings for it "
                           "and its shape does not fit %lld input columns",
                           tfile(L, w), w->name, (long long)cols);
        bits = (int)(w->shape[nd - 1] * 32 / (uint64_t)cols);
        group = (int)(cols / (int64_t)sc->shape[nd - 1]);
    }
    if (!(bits == 2 || bits == 3 || bits == 4 || bits == 5 || bits == 6 || bits == 8) ||
        !(group == 32 || group == 64 || group == 128) || cols % group || (cols * bits) % 32)
        return e0_fail(L->err, E0_EUNSUPPORTED, "%s: tensor %s: %d-bit group-%d quantization of %lld columns is not supported",
                       tfile(L, w), w->name, bits, group, (long long)cols);
    if (w->dtype != ST_U32)
        return e0_fail(L->err, E0_EFORMAT, "%s: quantized tensor %s has dtype %s; expected U32", tfile(L, w),
                       w->name, st_dtype_name(w->dtype));
    if (sc->dtype != bi->dtype || (sc->dtype != ST_BF16 && sc->dtype != ST_F16 && sc->dtype != ST_F32))
        return e0_fail(L->err, E0_EFORMAT, "%s: %s scales/biases must both be BF16, F16 or F32", tfile(L, sc), base);
    s[0] = rows;
    s[1] = cols * bits / 32;
    int rc = check_shape(L, w, nd, shp);
    s[1] = cols / group;
    if (!rc) rc = check_shape(L, sc, nd, shp);
    if (!rc) rc = check_shape(L, bi, nd, shp);
    if (rc) return rc;
    out->type = E0_W_QAFF;
    out->bits = bits;
    out->group = group;
    out->stype = sc->dtype == ST_BF16 ? E0_S_BF16 : sc->dtype == ST_F16 ? E0_S_F16 : E0_S_F32;
    out->scales = sc->data;
    out->biases = bi->data;
    return 0;
}

/* A 1-D (or [C,1,K] / [C,K,1]) float tensor as a malloc'd f32 array of n values. */
static int get_vec(loader *L, const char *name, int64_t n, float add, float **out) {
    const st_tensor *t = find(L, name);
    if (!t) return e0_fail(L->err, E0_ENOTFOUND, "tensor %s is missing from the checkpoint", name);
    e0_wtype wt;
    if (float_wtype(t, &wt) != 0)
        return e0_fail(L->err, E0_EUNSUPPORTED, "%s: tensor %s has dtype %s; expected BF16, F16 or F32",
                       tfile(L, t), t->name, st_dtype_name(t->dtype));
    if ((int64_t)st_numel(t) != n)
        return e0_fail(L->err, E0_EFORMAT, "%s: tensor %s has %llu values but %s implies %lld",
                       tfile(L, t), t->name, (unsigned long long)st_numel(t), L->cfgname, (long long)n);
    float *v = malloc((size_t)n * sizeof *v);
    if (!v) return e0_fail(L->err, E0_ENOMEM, "out of memory loading %s", name);
    e0_mat m = {.type = wt, .rows = 1, .cols = n, .w = t->data};
    mat_dequant(&m, 0, 0, n, v);
    for (int64_t i = 0; i < n; i++) v[i] += add;
    *out = v;
    return 0;
}

/* Norms of the hybrid families are zero-centred in HF checkpoints. */
static int get_norm(loader *L, const char *name, int64_t n, float **out) {
    float add = L->m->cfg.norm_zero_centred && !L->mlx ? 1.0f : 0.0f;
    return get_vec(L, name, n, add, out);
}

#define NAME(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

static int load_attention(loader *L, e0_layer *ly, const char *b) {
    const e0_config *c = &L->m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, hd = c->head_dim, qr = (int64_t)c->n_heads * hd * (c->attn_gated ? 2 : 1);
    int rc;
    if ((rc = get_mat(L, NAME("%sself_attn.q_proj", b), 0, qr, H, &ly->q)) ||
        (rc = get_mat(L, NAME("%sself_attn.k_proj", b), 0, c->n_kv_heads * hd, H, &ly->k)) ||
        (rc = get_mat(L, NAME("%sself_attn.v_proj", b), 0, c->n_kv_heads * hd, H, &ly->v)) ||
        (rc = get_mat(L, NAME("%sself_attn.o_proj", b), 0, H, c->n_heads * hd, &ly->o)) ||
        (rc = get_norm(L, NAME("%sself_attn.q_norm.weight", b), hd, &ly->q_norm)) ||
        (rc = get_norm(L, NAME("%sself_attn.k_norm.weight", b), hd, &ly->k_norm)))
        return rc;
    return 0;
}

static int load_deltanet(loader *L, e0_layer *ly, const char *b) {
    const e0_config *c = &L->m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, Kd = (int64_t)c->lin_k_heads * c->lin_k_dim;
    int64_t Vd = (int64_t)c->lin_v_heads * c->lin_v_dim, Hv = c->lin_v_heads;
    int64_t conv_dim = 2 * Kd + Vd;
    int rc;
    ly->packed = find(L, NAME("%slinear_attn.in_proj_qkvz.weight", b)) != NULL;
    if (ly->packed) {
        if ((rc = get_mat(L, NAME("%slinear_attn.in_proj_qkvz", b), 0, 2 * Kd + 2 * Vd, H, &ly->qkvz)) ||
            (rc = get_mat(L, NAME("%slinear_attn.in_proj_ba", b), 0, 2 * Hv, H, &ly->ba)))
            return rc;
    } else if ((rc = get_mat(L, NAME("%slinear_attn.in_proj_qkv", b), 0, conv_dim, H, &ly->qkv)) ||
               (rc = get_mat(L, NAME("%slinear_attn.in_proj_z", b), 0, Vd, H, &ly->z)) ||
               (rc = get_mat(L, NAME("%slinear_attn.in_proj_b", b), 0, Hv, H, &ly->b)) ||
               (rc = get_mat(L, NAME("%slinear_attn.in_proj_a", b), 0, Hv, H, &ly->a))) {
        return rc;
    }
    if ((rc = get_vec(L, NAME("%slinear_attn.conv1d.weight", b), conv_dim * c->conv_kernel, 0, &ly->conv_w)) ||
        (rc = get_vec(L, NAME("%slinear_attn.A_log", b), Hv, 0, &ly->A)) ||
        (rc = get_vec(L, NAME("%slinear_attn.dt_bias", b), Hv, 0, &ly->dt_bias)) ||
        (rc = get_vec(L, NAME("%slinear_attn.norm.weight", b), c->lin_v_dim, 0, &ly->lin_norm)) ||
        (rc = get_mat(L, NAME("%slinear_attn.out_proj", b), 0, H, Vd, &ly->out)))
        return rc;
    for (int64_t h = 0; h < Hv; h++) /* the decay rate, as GGUF stores it */
        ly->A[h] = -expf(ly->A[h]);
    return 0;
}

/* Which of the four layouts holds this layer's experts. */
static const char *expert_layout(loader *L, const char *b) {
    char nm[NAME_MAX_LEN];
    if (find(L, NAME("%smlp.switch_mlp.gate_up_proj.weight", b))) return "mlx-fused";
    if (find(L, NAME("%smlp.switch_mlp.gate_proj.weight", b))) return "mlx";
    if (find(L, NAME("%smlp.experts.gate_up_proj", b)) || find(L, NAME("%smlp.experts.gate_up_proj.weight", b)))
        return "hf-fused";
    if (find(L, NAME("%smlp.experts.0.gate_proj.weight", b))) return "hf";
    return NULL;
}

/* Expert views into stacked [E, out, in] tensors: gate_up [E, 2I, H] with
 * gate rows on top when ly->fused (then up == gate), and down [E, H, I]. */
static void stacked_experts(const e0_config *c, e0_layer *ly, const e0_mat *gate, const e0_mat *up,
                            const e0_mat *down) {
    const int64_t I = c->moe_inter, H = c->hidden;
    for (int64_t e = 0; e < c->n_experts; e++) {
        e0_expert *x = &ly->experts[e];
        x->gate = mat_rows(gate, ly->fused ? e * 2 * I : e * I, I);
        x->up = mat_rows(up, ly->fused ? e * 2 * I + I : e * I, I);
        x->down = mat_rows(down, e * H, H);
    }
}

/* The layer's expert bytes into m->expert_bytes. */
static void count_experts(e0_model *m, const e0_layer *ly) {
    for (int64_t e = 0; e < m->cfg.n_experts; e++)
        m->expert_bytes += mat_bytes(&ly->experts[e].gate) + mat_bytes(&ly->experts[e].up) +
                           mat_bytes(&ly->experts[e].down);
}

static int load_moe(loader *L, e0_layer *ly, const char *b, int li) {
    e0_model *m = L->m;
    const e0_config *c = &m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, I = c->moe_inter, E = c->n_experts;
    int rc;
    const char *lay = expert_layout(L, b);
    if (!lay)
        return e0_fail(L->err, E0_ENOTFOUND,
                       "layer %d: no expert tensors (%smlp.experts.* or %smlp.switch_mlp.*) in the checkpoint",
                       li, b, b);
    if (m->layout && strcmp(m->layout, lay) != 0)
        return e0_fail(L->err, E0_EFORMAT, "layer %d: experts are in the %s layout but earlier layers use %s",
                       li, lay, m->layout);
    m->layout = lay;
    if ((rc = get_mat(L, NAME("%smlp.gate", b), 0, E, H, &ly->router))) return rc;
    ly->experts = calloc((size_t)E, sizeof *ly->experts);
    if (!ly->experts) return e0_fail(L->err, E0_ENOMEM, "out of memory");
    bool fused = strstr(lay, "fused") != NULL, mlx = strncmp(lay, "mlx", 3) == 0;
    ly->fused = fused;
    const char *grp = mlx ? "switch_mlp" : "experts";
    if (strcmp(lay, "hf") == 0) {
        for (int64_t e = 0; e < E; e++) {
            e0_expert *x = &ly->experts[e];
            if ((rc = get_mat(L, NAME("%smlp.experts.%lld.gate_proj", b, (long long)e), 0, I, H, &x->gate)) ||
                (rc = get_mat(L, NAME("%smlp.experts.%lld.up_proj", b, (long long)e), 0, I, H, &x->up)) ||
                (rc = get_mat(L, NAME("%smlp.experts.%lld.down_proj", b, (long long)e), 0, H, I, &x->down)))
                return rc;
        }
    } else {
        e0_mat gate, up, down;
        if (fused) {
            /* gate_up [E, 2I, H]: per expert, gate rows on top, up rows below. */
            if ((rc = get_mat(L, NAME("%smlp.%s.gate_up_proj", b, grp), E, 2 * I, H, &gate))) return rc;
            up = gate;
        } else if ((rc = get_mat(L, NAME("%smlp.%s.gate_proj", b, grp), E, I, H, &gate)) ||
                   (rc = get_mat(L, NAME("%smlp.%s.up_proj", b, grp), E, I, H, &up))) {
            return rc;
        }
        if ((rc = get_mat(L, NAME("%smlp.%s.down_proj", b, grp), E, H, I, &down))) return rc;
        stacked_experts(c, ly, &gate, &up, &down);
    }
    count_experts(m, ly);
    ly->has_shared = c->shared_inter > 0;
    if (ly->has_shared) {
        int64_t Is = c->shared_inter;
        if ((rc = get_mat(L, NAME("%smlp.shared_expert.gate_proj", b), 0, Is, H, &ly->sh_gate)) ||
            (rc = get_mat(L, NAME("%smlp.shared_expert.up_proj", b), 0, Is, H, &ly->sh_up)) ||
            (rc = get_mat(L, NAME("%smlp.shared_expert.down_proj", b), 0, H, Is, &ly->sh_down)) ||
            (rc = get_mat(L, NAME("%smlp.shared_expert_gate", b), 0, 1, H, &ly->sh_router)))
            return rc;
    }
    return 0;
}

static int load_layer(loader *L, int li) {
    e0_model *m = L->m;
    const e0_config *c = &m->cfg;
    e0_layer *ly = &m->layers[li];
    char b[128], nm[NAME_MAX_LEN];
    snprintf(b, sizeof b, "%slayers.%d.", L->prefix, li);
    ly->linear = c->layer_linear[li];
    ly->moe = c->layer_moe[li];
    int rc;
    if ((rc = get_norm(L, NAME("%sinput_layernorm.weight", b), c->hidden, &ly->in_norm)) ||
        (rc = get_norm(L, NAME("%spost_attention_layernorm.weight", b), c->hidden, &ly->post_norm)))
        return rc;
    rc = ly->linear ? load_deltanet(L, ly, b) : load_attention(L, ly, b);
    if (rc) return rc;
    if (ly->moe) return load_moe(L, ly, b, li);
    int64_t H = c->hidden, I = c->dense_inter;
    if ((rc = get_mat(L, NAME("%smlp.gate_proj", b), 0, I, H, &ly->mlp_gate)) ||
        (rc = get_mat(L, NAME("%smlp.up_proj", b), 0, I, H, &ly->mlp_up)) ||
        (rc = get_mat(L, NAME("%smlp.down_proj", b), 0, H, I, &ly->mlp_down)))
        return rc;
    return 0;
}

/* An owner/name the way Hugging Face names repositories ("Qwen/Qwen3-30B-A3B"). */
static bool looks_like_repo_id(const char *p) {
    const char *slash = strchr(p, '/');
    if (!slash || slash == p || !slash[1] || strchr(slash + 1, '/') || p[0] == '.') return false;
    for (const char *c = p; *c; c++)
        if (!(isalnum((unsigned char)*c) || *c == '-' || *c == '_' || *c == '.' || *c == '/'))
            return false;
    return true;
}

/* What MODEL is when it is not a checkpoint edge0 reads: a clear message
 * saying what edge0 wants (E0_ENOTFOUND), or 0 to go on. */
static int check_model_path(const char *path, char *err) {
    struct stat st;
    if (stat(path, &st) != 0) {
        if (looks_like_repo_id(path))
            return e0_fail(err, E0_ENOTFOUND,
                           "%s: no such file or directory here. It looks like a Hugging Face "
                           "repository id; edge0 reads checkpoints from disk, so download it first "
                           "(e.g. `huggingface-cli download %s --local-dir ~/models/%s`) and pass "
                           "that directory, or pass a .gguf file",
                           path, path, strchr(path, '/') + 1);
        return e0_fail(err, E0_ENOTFOUND, "%s: no such file or directory (MODEL is a model "
                                          "directory with config.json, or a .gguf file)", path);
    }
    if (S_ISREG(st.st_mode))
        return gguf_is_path(path)
                   ? 0
                   : e0_fail(err, E0_EFORMAT,
                             "%s is a file but not a GGUF file: MODEL is a model directory "
                             "(config.json + *.safetensors, as Hugging Face and mlx-community "
                             "publish them) or a .gguf file",
                             path);
    if (!S_ISDIR(st.st_mode)) return 0;
    char cfg[4200];
    snprintf(cfg, sizeof cfg, "%s/config.json", path);
    if (access(cfg, F_OK) == 0) return 0;
    /* a folder of checkpoints: name them */
    struct dirent **list = NULL;
    const int nl = scandir(path, &list, NULL, alphasort);
    char found[1024] = "";
    size_t used = 0;
    int n = 0;
    for (int i = 0; i < nl; i++) {
        const struct dirent *de = list[i];
        if (de->d_name[0] == '.') continue;
        char sub[4200], subcfg[4400];
        snprintf(sub, sizeof sub, "%s/%s", path, de->d_name);
        snprintf(subcfg, sizeof subcfg, "%s/config.json", sub);
        const size_t len = strlen(de->d_name);
        const bool gguf = len > 5 && !strcmp(de->d_name + len - 5, ".gguf");
        if (!gguf && access(subcfg, F_OK) != 0) continue;
        if (used + len + 8 < sizeof found)
            used += (size_t)snprintf(found + used, sizeof found - used, "%s%s%s", n ? ", " : "",
                                     de->d_name, gguf ? "" : "/");
        n++;
    }
    for (int i = 0; i < nl; i++)
        free(list[i]);
    free(list);
    if (n)
        return e0_fail(err, E0_ENOTFOUND,
                       "%s is not a checkpoint (no config.json) but holds %d: %s; pass one of them",
                       path, n, found);
    return 0; /* config_load says what is missing */
}

/* The MTP block of an HF (or mlx) folder, as the published Qwen3.5 / 3.6
 * checkpoints carry it (mtp.fc, mtp.pre_fc_norm_*, mtp.layers.N.*,
 * mtp.norm): described in m->mtp (its layers and bytes), not loaded
 * (model_mtp_load does). */
static const char *folder_mtp_prefix(const e0_model *m) {
    return st_get(m->st, "mtp.fc.weight") ? "mtp." : st_get(m->st, "model.mtp.fc.weight") ? "model.mtp." : NULL;
}

static void folder_mtp(e0_model *m) {
    const char *pre = folder_mtp_prefix(m);
    if (!pre) return;
    const size_t np = strlen(pre);
    for (size_t k = 0; k < st_count(m->st); k++) {
        const st_tensor *t = st_at(m->st, k);
        int li;
        if (strncmp(t->name, pre, np) != 0) continue;
        m->mtp.n_tensors++;
        m->mtp.bytes += t->nbytes;
        if (sscanf(t->name + np, "layers.%d.", &li) == 1 && li >= 0 && li < 1024 && li + 1 > m->mtp.n_layers)
            m->mtp.n_layers = li + 1;
    }
    m->cfg.mtp_layers = m->mtp.n_layers;
}

int model_load(e0_model *m, const char *dir, char *err) {
    memset(m, 0, sizeof *m);
    int prc = check_model_path(dir, err);
    if (prc) return prc;
    if (gguf_is_path(dir)) {
        loader G = {.m = m, .cfgname = "the GGUF metadata", .mark = 1, .err = err};
        int rc = load_gguf(&G, dir);
        if (rc) model_free(m);
        return rc;
    }
    int rc = config_load(&m->cfg, dir, err);
    if (rc) return rc;
    if ((rc = st_set_open_dir(&m->st, dir, err))) goto fail;
    if (!(m->used = calloc(st_count(m->st) + 1, 1))) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto fail;
    }
    loader L = {.m = m, .cfgname = "config.json", .mark = 1, .err = err};
    static const char *prefixes[] = {"model.language_model.", "language_model.model.", "model.", ""};
    char nm[NAME_MAX_LEN];
    size_t np = sizeof prefixes / sizeof *prefixes;
    size_t i = 0;
    for (; i < np; i++)
        if (find(&L, NAME("%sembed_tokens.weight", prefixes[i]))) break;
    if (i == np) {
        rc = e0_fail(err, E0_ENOTFOUND, "%s: no embed_tokens.weight under any known prefix "
                                        "(model., model.language_model., language_model.model.)", dir);
        goto fail;
    }
    snprintf(L.prefix, sizeof L.prefix, "%s", prefixes[i]);
    const e0_config *c = &m->cfg;
    /* mlx layouts store hybrid norms as 1 + w; they are recognised by their
     * stacked switch_mlp experts or by the writer's metadata. */
    for (int li = 0; li < c->n_layers; li++)
        if (c->layer_moe[li]) {
            char b[128];
            snprintf(b, sizeof b, "%slayers.%d.", L.prefix, li);
            const char *lay = expert_layout(&L, b);
            L.mlx = lay ? strncmp(lay, "mlx", 3) == 0 : false;
            break;
        }
    const char *fmt = st_meta(m->st, "format");
    if (fmt && strcmp(fmt, "mlx") == 0) L.mlx = true;

    int64_t H = c->hidden, V = c->vocab;
    if ((rc = get_mat(&L, NAME("%sembed_tokens", L.prefix), 0, V, H, &m->embed))) goto fail;
    if (find(&L, "lm_head.weight")) rc = get_mat(&L, "lm_head", 0, V, H, &m->lm_head);
    else if (find(&L, "language_model.lm_head.weight")) rc = get_mat(&L, "language_model.lm_head", 0, V, H, &m->lm_head);
    else if (c->tie_embeddings) m->lm_head = m->embed;
    else rc = e0_fail(err, E0_ENOTFOUND, "tensor lm_head.weight is missing and tie_word_embeddings is false");
    if (rc) goto fail;
    if ((rc = get_norm(&L, NAME("%snorm.weight", L.prefix), H, &m->final_norm))) goto fail;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) {
        rc = e0_fail(err, E0_ENOMEM, "out of memory");
        goto fail;
    }
    for (int li = 0; li < c->n_layers; li++)
        if ((rc = load_layer(&L, li))) goto fail;
    if (!m->layout) m->layout = L.mlx ? "mlx" : "hf";
    folder_mtp(m);
    if ((rc = finish_load(m, err))) goto fail;
    return 0;
fail:
    model_free(m);
    return rc;
}

/* What every source shares once the weights are in place: the RoPE
 * frequencies, the DeltaNet decay rates and the byte counts. */
static int finish_load(e0_model *m, char *err) {
    const e0_config *c = &m->cfg;
    int half = c->rotary_dim / 2;
    m->rope_inv_freq = malloc((size_t)half * sizeof *m->rope_inv_freq);
    if (!m->rope_inv_freq) return e0_fail(err, E0_ENOMEM, "out of memory");
    /* As transformers computes it, in f32: 1 / theta^(2i / rotary_dim). */
    for (int k = 0; k < half; k++)
        m->rope_inv_freq[k] = 1.0f / powf((float)c->rope_theta, (float)(2 * k) / (float)c->rotary_dim);
    for (size_t k = 0; k < st_count(m->st); k++)
        if (m->used[k] == 1) m->weight_bytes += st_at(m->st, k)->nbytes;
    return 0;
}

/* ---- GGUF ------------------------------------------------------------------
 *
 * llama.cpp's names and transforms (its converter, conversion/qwen.py):
 *   token_embd, output (absent: tied), output_norm; per layer blk.L.:
 *   attn_norm, post_attention_norm (qwen3moe: ffn_norm);
 *   attention: attn_q (gated: per head the query, then the gate), attn_k,
 *     attn_v, attn_output, attn_q_norm, attn_k_norm;
 *   DeltaNet: attn_qkv (flat q|k|v), attn_gate (z), ssm_beta / ssm_alpha
 *     (qwen35moe; qwen3next keeps b|a packed per key head in ssm_ba),
 *     ssm_conv1d [C, K], ssm_a (= -exp(A_log)), ssm_dt.bias, ssm_norm,
 *     ssm_out;
 *   MoE: ffn_gate_inp (router), ffn_{gate,up,down}_exps stacked [E, out, in]
 *     or ffn_gate_up_exps [E, 2I, H] (gate rows on top), shared expert
 *     ffn_{gate,up,down}_shexp and its gate ffn_gate_inp_shexp [H].
 *   MTP (Qwen3.5 / 3.6, {arch}.nextn_predict_layers = n): block_count counts
 *     the main layers and then n blocks blk.N.. (N = main layers), each a
 *     full-attention layer with MoE and shared expert plus nextn.eh_proj,
 *     nextn.enorm, nextn.hnorm and optionally nextn.shared_head_norm,
 *     nextn.embed_tokens, nextn.shared_head_head (e0_mtp_layer). A draft-only
 *     file (the converter's --mtp) has those and the embeddings, no blk.0.
 * Norm weights are stored as the multiplier (1 + w already applied), so
 * nothing is shifted. qwen35moe's value heads are in tiled order (ly->vtiled).
 * Every matrix may have its own ggml type. Every tensor of the file must be
 * one of these: anything else is refused with its name. Messages name the
 * file once (the tensor names say the layer). */

static const char *garch(loader *L) {
    const char *a = "?";
    gguf_get_str(st_gguf(L->m->st), "general.architecture", &a, NULL);
    return a;
}

static int gmissing(loader *L, const char *name) {
    return e0_fail(L->err, E0_ENOTFOUND, "%s: tensor %s is missing", st_file_path(L->m->st, 0), name);
}

/* A matrix [lead x rows, cols] (lead = 0: [rows, cols]) in any GGUF type;
 * a 1-D tensor of `cols` values is accepted as one row (rows == 1). Reads
 * none of its bytes. */
static int get_gmat(loader *L, const char *name, int64_t lead, int64_t rows, int64_t cols,
                    e0_mat *out) {
    const st_tensor *t = find(L, name);
    if (!t) return gmissing(L, name);
    int64_t shp[3], *s = shp;
    if (lead) *s++ = lead;
    s[0] = rows;
    s[1] = cols;
    int rc = rows == 1 && !lead && t->ndim == 1 ? check_shape(L, t, 1, &cols)
                                                : check_shape(L, t, lead ? 3 : 2, shp);
    if (rc) return rc;
    memset(out, 0, sizeof *out);
    out->rows = (lead ? lead : 1) * rows;
    out->cols = cols;
    out->w = t->data;
    if (t->dtype != ST_GGML) {
        if (float_wtype(t, &out->type) != 0)
            return e0_fail(L->err, E0_EUNSUPPORTED, "%s: tensor %s has dtype %s", tfile(L, t), t->name,
                           st_dtype_name(t->dtype));
        return 0;
    }
    const ggml_type_info *gi = ggml_info(t->gtype);
    if (!gi || !gi->supported)
        return e0_fail(L->err, E0_EUNSUPPORTED,
                       "%s: tensor %s has ggml type %s, which edge0 does not compute with "
                       "(supported: F32 F16 BF16 Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 Q2_K Q3_K Q4_K Q5_K Q6_K "
                       "IQ4_NL IQ4_XS)",
                       tfile(L, t), t->name, gi ? gi->name : "(unknown)");
    out->type = E0_W_GGML;
    out->gtype = t->gtype;
    return 0;
}

/* A float vector of n values, converted into memory of its own (get_vec). */
static int get_gvec(loader *L, const char *name, int64_t n, float **out) {
    if (!st_get(L->m->st, name)) return gmissing(L, name);
    return get_vec(L, name, n, 0, out);
}

/* The same checks as get_gvec without reading the values. */
static int check_gvec(loader *L, const char *name, int64_t n) {
    const st_tensor *t = find(L, name);
    if (!t) return gmissing(L, name);
    e0_wtype wt;
    if (float_wtype(t, &wt) != 0)
        return e0_fail(L->err, E0_EUNSUPPORTED, "%s: tensor %s has dtype %s; expected BF16, F16 or F32",
                       tfile(L, t), t->name, st_dtype_name(t->dtype));
    if ((int64_t)st_numel(t) != n)
        return e0_fail(L->err, E0_EFORMAT, "%s: tensor %s has %llu values but %s implies %lld",
                       tfile(L, t), t->name, (unsigned long long)st_numel(t), L->cfgname, (long long)n);
    return 0;
}

#define GNAME(...) (snprintf(nm, sizeof nm, "blk.%d." __VA_ARGS__), nm)

static int gguf_attention(loader *L, e0_layer *ly, int li) {
    const e0_config *c = &L->m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, hd = c->head_dim, qr = (int64_t)c->n_heads * hd * (c->attn_gated ? 2 : 1);
    int rc;
    if ((rc = get_gmat(L, GNAME("%s", li, "attn_q.weight"), 0, qr, H, &ly->q)) ||
        (rc = get_gmat(L, GNAME("%s", li, "attn_k.weight"), 0, c->n_kv_heads * hd, H, &ly->k)) ||
        (rc = get_gmat(L, GNAME("%s", li, "attn_v.weight"), 0, c->n_kv_heads * hd, H, &ly->v)) ||
        (rc = get_gmat(L, GNAME("%s", li, "attn_output.weight"), 0, H, c->n_heads * hd, &ly->o)) ||
        (rc = get_gvec(L, GNAME("%s", li, "attn_q_norm.weight"), hd, &ly->q_norm)) ||
        (rc = get_gvec(L, GNAME("%s", li, "attn_k_norm.weight"), hd, &ly->k_norm)))
        return rc;
    return 0;
}

static int gguf_deltanet(loader *L, e0_layer *ly, int li) {
    const e0_config *c = &L->m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, Kd = (int64_t)c->lin_k_heads * c->lin_k_dim;
    int64_t Vd = (int64_t)c->lin_v_heads * c->lin_v_dim, Hv = c->lin_v_heads;
    int rc;
    ly->vtiled = c->family == E0_FAM_QWEN3_5_MOE && c->lin_v_heads != c->lin_k_heads;
    ly->ba_packed = find(L, GNAME("%s", li, "ssm_ba.weight")) != NULL;
    if ((rc = get_gmat(L, GNAME("%s", li, "attn_qkv.weight"), 0, 2 * Kd + Vd, H, &ly->qkv)) ||
        (rc = get_gmat(L, GNAME("%s", li, "attn_gate.weight"), 0, Vd, H, &ly->z)))
        return rc;
    if (ly->ba_packed)
        rc = get_gmat(L, GNAME("%s", li, "ssm_ba.weight"), 0, 2 * Hv, H, &ly->ba);
    else if (!(rc = get_gmat(L, GNAME("%s", li, "ssm_beta.weight"), 0, Hv, H, &ly->b)))
        rc = get_gmat(L, GNAME("%s", li, "ssm_alpha.weight"), 0, Hv, H, &ly->a);
    if (rc ||
        (rc = get_gvec(L, GNAME("%s", li, "ssm_conv1d.weight"), (2 * Kd + Vd) * c->conv_kernel,
                       &ly->conv_w)) ||
        (rc = get_gvec(L, GNAME("%s", li, "ssm_a"), Hv, &ly->A)) ||
        (rc = get_gvec(L, GNAME("%s", li, "ssm_dt.bias"), Hv, &ly->dt_bias)) ||
        (rc = get_gvec(L, GNAME("%s", li, "ssm_norm.weight"), c->lin_v_dim, &ly->lin_norm)) ||
        (rc = get_gmat(L, GNAME("%s", li, "ssm_out.weight"), 0, H, Vd, &ly->out)))
        return rc;
    return 0;
}

static int gguf_moe(loader *L, e0_layer *ly, int li) {
    e0_model *m = L->m;
    const e0_config *c = &m->cfg;
    char nm[NAME_MAX_LEN];
    int64_t H = c->hidden, I = c->moe_inter, E = c->n_experts;
    int rc;
    if ((rc = get_gmat(L, GNAME("%s", li, "ffn_gate_inp.weight"), 0, E, H, &ly->router))) return rc;
    ly->experts = calloc((size_t)E, sizeof *ly->experts);
    if (!ly->experts) return e0_fail(L->err, E0_ENOMEM, "out of memory");
    e0_mat gate, up, down;
    ly->fused = find(L, GNAME("%s", li, "ffn_gate_up_exps.weight")) != NULL;
    if (ly->fused) { /* [E, 2I, H]: per expert, gate rows on top, up rows below */
        if ((rc = get_gmat(L, GNAME("%s", li, "ffn_gate_up_exps.weight"), E, 2 * I, H, &gate))) return rc;
        up = gate;
    } else if ((rc = get_gmat(L, GNAME("%s", li, "ffn_gate_exps.weight"), E, I, H, &gate)) ||
               (rc = get_gmat(L, GNAME("%s", li, "ffn_up_exps.weight"), E, I, H, &up))) {
        return rc;
    }
    if ((rc = get_gmat(L, GNAME("%s", li, "ffn_down_exps.weight"), E, H, I, &down))) return rc;
    stacked_experts(c, ly, &gate, &up, &down);
    count_experts(m, ly);
    ly->has_shared = c->shared_inter > 0;
    if (!ly->has_shared) return 0;
    int64_t Is = c->shared_inter;
    if ((rc = get_gmat(L, GNAME("%s", li, "ffn_gate_shexp.weight"), 0, Is, H, &ly->sh_gate)) ||
        (rc = get_gmat(L, GNAME("%s", li, "ffn_up_shexp.weight"), 0, Is, H, &ly->sh_up)) ||
        (rc = get_gmat(L, GNAME("%s", li, "ffn_down_shexp.weight"), 0, H, Is, &ly->sh_down)) ||
        (rc = get_gmat(L, GNAME("%s", li, "ffn_gate_inp_shexp.weight"), 0, 1, H, &ly->sh_router)))
        return rc;
    return 0;
}

/* The post-attention norm's name in a family. */
static const char *gguf_post_norm(const e0_config *c) {
    return c->family == E0_FAM_QWEN3_MOE ? "ffn_norm.weight" : "post_attention_norm.weight";
}

/* Tensor blk.`blk`.`what` of an MTP block, checked as a matrix [lead x
 * rows, cols] (rows 0: a vector of `cols` float values) into *out; an
 * absent one is an error unless optional (then *out = NULL). */
static int mtp_tensor(loader *L, int blk, const char *what, int64_t lead, int64_t rows, int64_t cols,
                      bool optional, const st_tensor **out) {
    char nm[NAME_MAX_LEN];
    snprintf(nm, sizeof nm, "blk.%d.%s", blk, what);
    *out = NULL;
    if (!st_get(L->m->st, nm)) {
        if (optional) return 0;
        return e0_fail(L->err, E0_ENOTFOUND,
                       "%s: tensor %s is missing: %s.nextn_predict_layers = %d makes blk.%d a "
                       "multi-token-prediction block, and every such block has one",
                       st_file_path(L->m->st, 0), nm, garch(L), L->m->cfg.mtp_layers, blk);
    }
    e0_mat tmp;
    const int rc = rows ? get_gmat(L, nm, lead, rows, cols, &tmp) : check_gvec(L, nm, cols);
    if (!rc) *out = st_get(L->m->st, nm);
    return rc;
}

/* MTP block `blk` (e0_mtp_layer): every tensor found and checked, none read. */
static int gguf_mtp(loader *L, e0_mtp_layer *x, int blk) {
    const e0_config *c = &L->m->cfg;
    const int64_t H = c->hidden, hd = c->head_dim, V = c->vocab, E = c->n_experts, I = c->moe_inter;
    const int64_t qr = (int64_t)c->n_heads * hd * (c->attn_gated ? 2 : 1), kv = c->n_kv_heads * hd;
    const int64_t Is = c->shared_inter;
    char nm[NAME_MAX_LEN];
    int rc;
    x->blk = blk;
    const bool fused = st_get(L->m->st, GNAME("%s", blk, "ffn_gate_up_exps.weight")) != NULL;
    if ((rc = mtp_tensor(L, blk, "attn_norm.weight", 0, 0, H, false, &x->attn_norm)) ||
        (rc = mtp_tensor(L, blk, gguf_post_norm(c), 0, 0, H, false, &x->post_norm)) ||
        (rc = mtp_tensor(L, blk, "attn_q.weight", 0, qr, H, false, &x->q)) ||
        (rc = mtp_tensor(L, blk, "attn_k.weight", 0, kv, H, false, &x->k)) ||
        (rc = mtp_tensor(L, blk, "attn_v.weight", 0, kv, H, false, &x->v)) ||
        (rc = mtp_tensor(L, blk, "attn_output.weight", 0, H, (int64_t)c->n_heads * hd, false, &x->o)) ||
        (rc = mtp_tensor(L, blk, "attn_q_norm.weight", 0, 0, hd, false, &x->q_norm)) ||
        (rc = mtp_tensor(L, blk, "attn_k_norm.weight", 0, 0, hd, false, &x->k_norm)) ||
        (rc = mtp_tensor(L, blk, "ffn_gate_inp.weight", 0, E, H, false, &x->router)) ||
        (fused && (rc = mtp_tensor(L, blk, "ffn_gate_up_exps.weight", E, 2 * I, H, false, &x->gate_up))) ||
        (!fused && (rc = mtp_tensor(L, blk, "ffn_gate_exps.weight", E, I, H, false, &x->gate))) ||
        (!fused && (rc = mtp_tensor(L, blk, "ffn_up_exps.weight", E, I, H, false, &x->up))) ||
        (rc = mtp_tensor(L, blk, "ffn_down_exps.weight", E, H, I, false, &x->down)) ||
        (Is && (rc = mtp_tensor(L, blk, "ffn_gate_shexp.weight", 0, Is, H, false, &x->sh_gate))) ||
        (Is && (rc = mtp_tensor(L, blk, "ffn_up_shexp.weight", 0, Is, H, false, &x->sh_up))) ||
        (Is && (rc = mtp_tensor(L, blk, "ffn_down_shexp.weight", 0, H, Is, false, &x->sh_down))) ||
        (Is && (rc = mtp_tensor(L, blk, "ffn_gate_inp_shexp.weight", 0, 1, H, false, &x->sh_router))) ||
        (rc = mtp_tensor(L, blk, "nextn.eh_proj.weight", 0, H, 2 * H, false, &x->eh_proj)) ||
        (rc = mtp_tensor(L, blk, "nextn.enorm.weight", 0, 0, H, false, &x->enorm)) ||
        (rc = mtp_tensor(L, blk, "nextn.hnorm.weight", 0, 0, H, false, &x->hnorm)) ||
        (rc = mtp_tensor(L, blk, "nextn.shared_head_norm.weight", 0, 0, H, true, &x->head_norm)) ||
        (rc = mtp_tensor(L, blk, "nextn.embed_tokens.weight", 0, V, H, true, &x->embed)) ||
        (rc = mtp_tensor(L, blk, "nextn.shared_head_head.weight", 0, V, H, true, &x->head)))
        return rc;
    return 0;
}

static int load_gguf(loader *L, const char *path) {
    e0_model *m = L->m;
    char *err = L->err;
    int rc = st_set_open_gguf(&m->st, path, err);
    if (rc) return rc;
    if (!(m->used = calloc(st_count(m->st) + 1, 1))) return e0_fail(err, E0_ENOMEM, "out of memory");
    const st_tensor *emb = st_get(m->st, "token_embd.weight");
    if (!emb || emb->ndim != 2 || emb->shape[0] > INT32_MAX)
        return e0_fail(err, E0_ENOTFOUND, "%s: tensor token_embd.weight is missing or not 2-D", path);
    if ((rc = config_from_gguf(&m->cfg, st_gguf(m->st), (int32_t)emb->shape[0], err))) return rc;
    const e0_config *c = &m->cfg;
    if (c->mtp_layers && !st_get(m->st, "blk.0.attn_norm.weight")) /* as llama.cpp tells it */
        return e0_fail(err, E0_EFORMAT,
                       "%s is a draft-only MTP file (what convert_hf_to_gguf.py --mtp writes): it "
                       "holds the multi-token-prediction block blk.%d and the embeddings for "
                       "speculative decoding, not the model's %d main layers. Pass the main model's "
                       "GGUF instead: one converted with the default options (which carries this "
                       "block too) or with --no-mtp",
                       path, c->n_layers, c->n_layers);
    L->mlx = true; /* norms hold 1 + w */
    m->layout = "gguf";
    int64_t H = c->hidden, V = c->vocab;
    if ((rc = get_gmat(L, "token_embd.weight", 0, V, H, &m->embed))) return rc;
    if (find(L, "output.weight")) rc = get_gmat(L, "output.weight", 0, V, H, &m->lm_head);
    else m->lm_head = m->embed;
    if (rc || (rc = get_gvec(L, "output_norm.weight", H, &m->final_norm))) return rc;
    m->layers = calloc((size_t)c->n_layers, sizeof *m->layers);
    if (!m->layers) return e0_fail(err, E0_ENOMEM, "out of memory");
    char nm[NAME_MAX_LEN];
    for (int li = 0; li < c->n_layers; li++) {
        e0_layer *ly = &m->layers[li];
        ly->linear = c->layer_linear[li];
        ly->moe = true;
        if ((rc = get_gvec(L, GNAME("%s", li, "attn_norm.weight"), H, &ly->in_norm)) ||
            (rc = get_gvec(L, GNAME("%s", li, gguf_post_norm(c)), H, &ly->post_norm)) ||
            (rc = ly->linear ? gguf_deltanet(L, ly, li) : gguf_attention(L, ly, li)) ||
            (rc = gguf_moe(L, ly, li)))
            return rc;
    }
    if (c->mtp_layers) {
        m->mtp.layers = calloc((size_t)c->mtp_layers, sizeof *m->mtp.layers);
        if (!m->mtp.layers) return e0_fail(err, E0_ENOMEM, "out of memory");
        m->mtp.n_layers = c->mtp_layers;
        L->mark = 2;
        for (int i = 0; i < c->mtp_layers; i++)
            if ((rc = gguf_mtp(L, &m->mtp.layers[i], c->n_layers + i))) return rc;
        L->mark = 1;
    }
    /* every tensor is the model's or its MTP blocks' */
    size_t unknown = 0;
    const st_tensor *first = NULL;
    for (size_t k = 0; k < st_count(m->st); k++) {
        const st_tensor *t = st_at(m->st, k);
        if (m->used[k] == 2) m->mtp.n_tensors++, m->mtp.bytes += t->nbytes;
        if (!m->used[k] && !unknown++) first = t;
    }
    if (unknown) {
        char more[64] = "";
        if (unknown > 1) snprintf(more, sizeof more, " (and %zu more)", unknown - 1);
        return e0_fail(err, E0_EFORMAT,
                       "%s: tensor %s%s is not part of the %s model the metadata describes (%d "
                       "layers, %d MTP): edge0 does not know what it holds, so it refuses the "
                       "file rather than run without it",
                       tfile(L, first), first->name, more, garch(L), c->n_layers,
                       c->mtp_layers);
    }
    return finish_load(m, err);
}

void model_free(e0_model *m) {
    if (m->layers)
        for (int li = 0; li < model_layers(m); li++) {
            e0_layer *ly = &m->layers[li];
            free(ly->in_norm);
            free(ly->post_norm);
            free(ly->q_norm);
            free(ly->k_norm);
            free(ly->conv_w);
            free(ly->A);
            free(ly->dt_bias);
            free(ly->lin_norm);
            free(ly->experts);
            free(ly->xfile);
        }
    free(m->layers);
    free(m->mtp.layers);
    free(m->mtp.enorm);
    free(m->mtp.hnorm);
    free(m->mtp.head_norm);
    free(m->used);
    free(m->final_norm);
    free(m->rope_inv_freq);
    st_set_free(m->st);
    config_free(&m->cfg);
    memset(m, 0, sizeof *m);
}

/* ---- the MTP block computed ------------------------------------------------ */

/* GGUF: blk.N (N = the main layers) as a full-attention layer with its MoE,
 * and nextn.*. The norms are multipliers already, as every GGUF norm. */
static int gguf_mtp_views(loader *L, e0_layer *ly) {
    e0_model *m = L->m;
    e0_mtp *x = &m->mtp;
    const e0_config *c = &m->cfg;
    const int blk = c->n_layers;
    const int64_t H = c->hidden, V = c->vocab;
    char nm[NAME_MAX_LEN];
    int rc;
    if ((rc = get_gvec(L, GNAME("%s", blk, "attn_norm.weight"), H, &ly->in_norm)) ||
        (rc = get_gvec(L, GNAME("%s", blk, gguf_post_norm(c)), H, &ly->post_norm)) ||
        (rc = gguf_attention(L, ly, blk)) || (rc = gguf_moe(L, ly, blk)) ||
        (rc = get_gmat(L, GNAME("%s", blk, "nextn.eh_proj.weight"), 0, H, 2 * H, &x->eh_proj)) ||
        (rc = get_gvec(L, GNAME("%s", blk, "nextn.enorm.weight"), H, &x->enorm)) ||
        (rc = get_gvec(L, GNAME("%s", blk, "nextn.hnorm.weight"), H, &x->hnorm)))
        return rc;
    if (st_get(m->st, GNAME("%s", blk, "nextn.shared_head_norm.weight")) &&
        (rc = get_gvec(L, nm, H, &x->head_norm)))
        return rc;
    if (st_get(m->st, GNAME("%s", blk, "nextn.embed_tokens.weight")) &&
        (rc = get_gmat(L, nm, 0, V, H, &x->embed)))
        return rc;
    if (st_get(m->st, GNAME("%s", blk, "nextn.shared_head_head.weight")) &&
        (rc = get_gmat(L, nm, 0, V, H, &x->head)))
        return rc;
    return 0;
}

/* A folder's mtp.* (or model.mtp.*): layers.0 as a full-attention layer
 * with its MoE, fc, the norms. They are in the Hugging Face form whatever
 * the folder's layout: zero-centred norms (shifted here), experts in their
 * own layout (edge0 convert --keep-mtp copies them as the source has them;
 * mlx-lm drops them). */
static int folder_mtp_views(loader *L, e0_layer *ly) {
    e0_model *m = L->m;
    e0_mtp *x = &m->mtp;
    const int64_t H = m->cfg.hidden;
    const char *p = folder_mtp_prefix(m);
    char b[64], nm[NAME_MAX_LEN];
    snprintf(b, sizeof b, "%slayers.0.", p);
    L->mlx = false;
    m->layout = NULL; /* load_moe: the block's own expert layout */
    int rc;
    if ((rc = get_norm(L, NAME("%sinput_layernorm.weight", b), H, &ly->in_norm)) ||
        (rc = get_norm(L, NAME("%spost_attention_layernorm.weight", b), H, &ly->post_norm)) ||
        (rc = load_attention(L, ly, b)) || (rc = load_moe(L, ly, b, m->cfg.n_layers)) ||
        (rc = get_mat(L, NAME("%sfc", p), 0, H, 2 * H, &x->eh_proj)) ||
        (rc = get_norm(L, NAME("%spre_fc_norm_embedding.weight", p), H, &x->enorm)) ||
        (rc = get_norm(L, NAME("%spre_fc_norm_hidden.weight", p), H, &x->hnorm)) ||
        (rc = get_norm(L, NAME("%snorm.weight", p), H, &x->head_norm)))
        return rc;
    return 0;
}

int model_mtp_load(e0_model *m, char *err) {
    const e0_config *c = &m->cfg;
    const char *file = st_file_path(m->st, 0);
    if (m->mtp.on) return 0;
    if (!m->mtp.n_layers)
        return e0_fail(err, E0_ENOTFOUND,
                       "%s has no multi-token-prediction (MTP) block to draft with (GGUF: no "
                       "nextn_predict_layers; Hugging Face: no mtp.* tensors)",
                       file);
    if (m->mtp.n_layers != 1)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "%s has %d MTP blocks; edge0 drafts with one block (one token ahead)", file,
                       m->mtp.n_layers);
    e0_layer *grown = realloc(m->layers, ((size_t)c->n_layers + 1) * sizeof *grown);
    if (!grown) return e0_fail(err, E0_ENOMEM, "out of memory");
    m->layers = grown;
    e0_layer *ly = &m->layers[c->n_layers];
    memset(ly, 0, sizeof *ly);
    ly->moe = true; /* a full-attention layer with its MoE */
    m->mtp.on = true; /* from here model_free frees the layer, whatever loads */
    const bool gguf = !strcmp(m->layout, "gguf");
    loader L = {.m = m, .cfgname = gguf ? "the GGUF metadata" : "config.json", .mlx = gguf, .mark = 1, .err = err};
    const char *layout = m->layout;
    const uint64_t experts = m->expert_bytes;
    int rc = gguf ? gguf_mtp_views(&L, ly) : folder_mtp_views(&L, ly);
    m->layout = layout; /* the main layers' (load_moe set the block's) */
    if (rc) {
        m->expert_bytes = experts;
        return e0_wrap(err, rc, "the MTP block");
    }
    m->weight_bytes = 0; /* its tensors are the model's now */
    for (size_t k = 0; k < st_count(m->st); k++)
        if (m->used[k] == 1) m->weight_bytes += st_at(m->st, k)->nbytes;
    return 0;
}
