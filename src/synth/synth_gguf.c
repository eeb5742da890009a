/* edge0 synth --format gguf: a random-weight GGUF file of a real shape, with
 * the tensor names, shapes, types and metadata that llama.cpp's converter
 * (convert_hf_to_gguf.py) followed by `llama-quantize ... Q4_K_M` write for
 * the architecture, so edge0 and llama.cpp can both load it.
 *
 * Names and layout (as the converter writes them; ne innermost first):
 *   output [H, V], output_norm [H], token_embd [H, V]; per layer blk.L.
 *   (names sorted, as llama-quantize's output lists them): attn_norm,
 *   post_attention_norm (qwen3moe: ffn_norm); full attention attn_q
 *   [H, heads x hd (x2 when gated: query then gate per head)], attn_k,
 *   attn_v, attn_output, attn_q_norm, attn_k_norm; DeltaNet attn_qkv,
 *   attn_gate, ssm_beta + ssm_alpha (qwen35moe) or ssm_ba (qwen3next),
 *   ssm_conv1d [K, C], ssm_a (= -A, the decay rate, F32 < 0), ssm_dt.bias,
 *   ssm_norm, ssm_out; MoE ffn_gate_inp [H, E] (F32), ffn_{gate,up}_exps
 *   [H, I, E], ffn_down_exps [I, H, E]; hybrids add ffn_gate_inp_shexp [H]
 *   (F32) and ffn_{gate,up,down}_shexp.
 *
 * The Q4_K_M mix (llama.cpp src/llama-quant.cpp, llama_tensor_get_type):
 *   - 1-D tensors, norms, ffn_gate_inp, ssm_conv1d, ssm_a, ssm_dt.bias: F32;
 *   - output: Q6_K (Q8_0 when H % 256 != 0);
 *   - attn_v and attn_qkv (both "attn_v-like"), ffn_down_exps and
 *     ffn_down_shexp: Q6_K in the layers use_more_bits(i, n) picks (the
 *     first and last eighth, and every third layer between), else Q4_K;
 *   - everything else (token_embd included, since output is not tied): Q4_K;
 *   - a row length that is not a multiple of 256 falls back: Q4_K -> Q5_0,
 *     Q6_K -> Q8_0 (tensor_type_fallback; the tiny shapes' experts).
 * Other mixes (e0_synth_opts.gguf_mix, the same rules for those ftypes, no
 * imatrix): Q8_0: every matrix Q8_0 (output too); Q4_0: Q4_0, output Q6_K;
 * IQ4_XS: IQ4_XS, output Q6_K, Q5_K for the attn_v-like tensors when heads
 * >= 4 x kv heads and for ffn_down in the first eighth of the layers;
 * fallbacks IQ4_XS -> IQ4_NL, Q5_K -> Q5_0 (llama.cpp: Q5_1, which has no
 * generator here). IQ4 blocks are only near zero-mean (iq4_codes).
 *
 * Random blocks: random codes, f16 scales sized so every tensor has the std
 * the safetensors formats give it (synth/synth_int.h, synth.h: activations
 * stay O(1), each block adds RMS ~1/sqrt(layers)), and every block's (Q4_K:
 * every sub-block's) codes adjusted to a fixed sum so its dequantized mean
 * is exactly 0: no matrix maps a shared offset of its inputs into a shared
 * output direction, so the hidden state does not collapse onto one
 * direction and routing stays near-uniform (random signs alone, as
 * make_gguf.py does for Q4_0, leave each row a random non-zero mean).
 *
 * Metadata: general.*, the ARCH.* keys config_gguf.c reads (and llama.cpp
 * needs), general.file_type 15 (MOSTLY_Q4_K_M; the other mixes 7, 30, 2),
 * quantization_version 2,
 * tokenizer.ggml.* and tokenizer.chat_template from a tokenizer.json (the
 * Qwen3 one in assets/; its vocabulary is padded with [PADn] tokens up to
 * the shape's vocab size, as the converter pads). --route-skew is refused:
 * planting a routing direction needs structured embedding rows; route
 * stickiness and a route profile are edge0.route_* keys (synth_common.c). */
#include "io/gguf.h"
#include "io/stwriter.h"
#include "synth/synth_int.h"
#include "quant/ggml.h"
#include "util/arr.h"
#include "util/err.h"
#include "util/file.h"
#include "util/num.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "synth_gguf.c stores blocks in host byte order, which must be little-endian"
#endif

_Static_assert(E0_SYNTH_GTYPES == GGML_NTYPES, "e0_synth_info's type table covers every ggml type");

#define QK_K        GGML_QK_K
#define CHUNK_BYTES (8u << 20) /* per job: bounded memory is threads x this */
#define GNAME_LEN   64

/* ======================================================================
 * The plan: every tensor, its type, part and generator.
 * ====================================================================== */

typedef enum { G_QUANT, G_F32MAT, G_VEC } gkind;

typedef struct {
    char name[GNAME_LEN];
    uint32_t type; /* ggml type */
    int n_dims;
    uint64_t ne[3];
    uint8_t kind;       /* gkind */
    uint8_t vkind;      /* G_VEC: synth_vkind */
    bool neg_exp;       /* G_VEC: stored as -exp(value) (ssm_a from A_log) */
    float std, base;    /* G_QUANT / G_F32MAT: std; G_VEC: norm base */
    int64_t fan;        /* G_VEC conv: the kernel length */
    int64_t rows, cols; /* rows of ne[0] values (a vector is one row) */
    uint32_t part;
} gtensor;

typedef struct {
    const e0_synth_shape *s;
    e0_synth_opts o;
    synth_gains g;
    gtensor *t;
    size_t n, cap;
    bool oom;
    int n_parts;
    gguf_writer **w; /* [n_parts] */
    char **paths;    /* [n_parts] */
    stw jobs;
} gplan;

static gtensor *add_t(gplan *p, const char *name, gkind kind, uint32_t type, int n_dims,
                      const uint64_t *ne) {
    if (p->oom) return NULL;
    if (arr_reserve((void **)&p->t, &p->cap, p->n + 1, sizeof *p->t)) {
        p->oom = true;
        return NULL;
    }
    gtensor *t = &p->t[p->n++];
    memset(t, 0, sizeof *t);
    snprintf(t->name, sizeof t->name, "%s", name);
    t->kind = (uint8_t)kind;
    t->type = type;
    t->n_dims = n_dims;
    uint64_t rows = 1;
    for (int d = 0; d < n_dims; d++) {
        t->ne[d] = ne[d];
        if (d) rows *= ne[d];
    }
    t->rows = (int64_t)rows;
    t->cols = (int64_t)ne[0];
    return t;
}

/* llama-quantize's use_more_bits: the first and last eighth of the layers
 * and every third one between get more bits. */
static bool more_bits(int i, int n) {
    return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2;
}

/* tensor_type_fallback: k-quants need rows of whole 256-value super-blocks.
 * (llama.cpp's Q5_K -> Q5_1 is Q5_0 here: no Q5_1 generator.) */
static uint32_t fallback(uint32_t type, uint64_t ne0) {
    if (ne0 % QK_K == 0 || (type != GGML_Q4_K && type != GGML_Q5_K && type != GGML_Q6_K &&
                            type != GGML_IQ4_XS))
        return type;
    return ne0 % 32                ? GGML_F16
           : type == GGML_Q6_K     ? GGML_Q8_0
           : type == GGML_IQ4_XS   ? GGML_IQ4_NL
                                   : GGML_Q5_0;
}

/* Tensor classes the mixes treat apart: attn_v-like (attn_v, attn_qkv),
 * ffn_down (experts and shared expert), the output matrix, the rest. */
typedef enum { Q_PLAIN, Q_MORE_V, Q_MORE_DOWN, Q_OUTPUT } qrule;

/* A quantized matrix ne = [cols, rows(, lead)], its type by the mix's
 * rules for the tensor's class and layer. */
static void add_q(gplan *p, const char *name, qrule rule, int layer, float std, int n_dims,
                  uint64_t ne0, uint64_t ne1, uint64_t ne2) {
    const int n = p->s->n_layers;
    uint32_t type = GGML_Q4_K;
    switch (p->o.gguf_mix) {
    case E0_SYNTH_MIX_Q4_K_M:
        if (rule == Q_OUTPUT) type = ne0 % QK_K ? GGML_Q8_0 : GGML_Q6_K;
        if ((rule == Q_MORE_V || rule == Q_MORE_DOWN) && more_bits(layer, n)) type = GGML_Q6_K;
        break;
    case E0_SYNTH_MIX_Q8_0:
        type = GGML_Q8_0;
        break;
    case E0_SYNTH_MIX_Q4_0:
        type = rule == Q_OUTPUT ? GGML_Q6_K : GGML_Q4_0;
        break;
    case E0_SYNTH_MIX_IQ4_XS: /* without an imatrix */
        type = rule == Q_OUTPUT ? GGML_Q6_K : GGML_IQ4_XS;
        if (rule == Q_MORE_V && p->s->n_heads >= 4 * p->s->n_kv_heads) type = GGML_Q5_K;
        if (rule == Q_MORE_DOWN && layer < n / 8) type = GGML_Q5_K;
        break;
    }
    const uint64_t ne[3] = {ne0, ne1, ne2};
    gtensor *t = add_t(p, name, G_QUANT, fallback(type, ne0), n_dims, ne);
    if (t) t->std = std;
}

static void add_vec(gplan *p, const char *name, synth_vkind vk, float base, uint64_t n) {
    gtensor *t = add_t(p, name, G_VEC, GGML_F32, 1, &n);
    if (!t) return;
    t->vkind = (uint8_t)vk;
    t->base = base;
    t->cols = t->rows * t->cols; /* one row: drawn whole from one stream */
    t->rows = 1;
}

#define NM(...) (snprintf(nm, sizeof nm, __VA_ARGS__), nm)

/* Layer L's tensors; the MTP block (L = n_layers) is a full-attention
 * layer whatever the interval says. */
static void plan_layer(gplan *p, int L) {
    const e0_synth_shape *s = p->s;
    const synth_gains *g = &p->g;
    const bool hybrid = s->family != E0_SYNTH_QWEN3_MOE;
    const uint64_t H = (uint64_t)s->hidden, hd = (uint64_t)s->head_dim, E = (uint64_t)s->n_experts;
    const uint64_t I = (uint64_t)s->moe_inter, Is = (uint64_t)s->shared_inter;
    char nm[GNAME_LEN];
    add_vec(p, NM("blk.%d.attn_norm.weight", L), SYNTH_V_NORM, 1.0f, H);
    add_vec(p, NM("blk.%d.%s.weight", L, hybrid ? "post_attention_norm" : "ffn_norm"), SYNTH_V_NORM,
            1.0f, H);
    if (hybrid && L < s->n_layers && (L + 1) % s->full_attention_interval != 0) {
        const uint64_t Kd = (uint64_t)s->lin_k_heads * s->lin_k_dim;
        const uint64_t Vd = (uint64_t)s->lin_v_heads * s->lin_v_dim, Hv = (uint64_t)s->lin_v_heads;
        const uint64_t C = 2 * Kd + Vd, K = (uint64_t)s->conv_kernel;
        add_q(p, NM("blk.%d.attn_qkv.weight", L), Q_MORE_V, L, g->in, 2, H, C, 0);
        add_q(p, NM("blk.%d.attn_gate.weight", L), Q_PLAIN, L, g->in, 2, H, Vd, 0);
        if (s->family == E0_SYNTH_QWEN3_NEXT) {
            add_q(p, NM("blk.%d.ssm_ba.weight", L), Q_PLAIN, L, g->in, 2, H, 2 * Hv, 0);
        } else {
            add_q(p, NM("blk.%d.ssm_beta.weight", L), Q_PLAIN, L, g->in, 2, H, Hv, 0);
            add_q(p, NM("blk.%d.ssm_alpha.weight", L), Q_PLAIN, L, g->in, 2, H, Hv, 0);
        }
        const uint64_t cne[2] = {K, C};
        gtensor *cv = add_t(p, NM("blk.%d.ssm_conv1d.weight", L), G_VEC, GGML_F32, 2, cne);
        if (cv) {
            cv->vkind = SYNTH_V_CONV;
            cv->fan = (int64_t)K;
            cv->cols = (int64_t)(K * C);
            cv->rows = 1;
        }
        add_vec(p, NM("blk.%d.ssm_a", L), SYNTH_V_ALOG, 0, Hv);
        if (!p->oom) p->t[p->n - 1].neg_exp = true;
        add_vec(p, NM("blk.%d.ssm_dt.bias", L), SYNTH_V_DTBIAS, 0, Hv);
        add_vec(p, NM("blk.%d.ssm_norm.weight", L), SYNTH_V_NORM, 1.0f, (uint64_t)s->lin_v_dim);
        add_q(p, NM("blk.%d.ssm_out.weight", L), Q_PLAIN, L, g->out_proj, 2, Vd, H, 0);
    } else {
        const uint64_t nq = (uint64_t)s->n_heads * hd, nkv = (uint64_t)s->n_kv_heads * hd;
        add_q(p, NM("blk.%d.attn_q.weight", L), Q_PLAIN, L, g->in, 2, H, nq * (hybrid ? 2 : 1), 0);
        add_q(p, NM("blk.%d.attn_k.weight", L), Q_PLAIN, L, g->in, 2, H, nkv, 0);
        add_q(p, NM("blk.%d.attn_v.weight", L), Q_MORE_V, L, g->in, 2, H, nkv, 0);
        add_q(p, NM("blk.%d.attn_output.weight", L), Q_PLAIN, L, g->o_proj, 2, nq, H, 0);
        add_vec(p, NM("blk.%d.attn_q_norm.weight", L), SYNTH_V_NORM, 1.0f, hd);
        add_vec(p, NM("blk.%d.attn_k_norm.weight", L), SYNTH_V_NORM, 1.0f, hd);
    }
    const uint64_t rne[2] = {H, E};
    gtensor *rt = add_t(p, NM("blk.%d.ffn_gate_inp.weight", L), G_F32MAT, GGML_F32, 2, rne);
    if (rt) rt->std = g->router;
    add_q(p, NM("blk.%d.ffn_gate_exps.weight", L), Q_PLAIN, L, g->in, 3, H, I, E);
    add_q(p, NM("blk.%d.ffn_up_exps.weight", L), Q_PLAIN, L, g->in, 3, H, I, E);
    add_q(p, NM("blk.%d.ffn_down_exps.weight", L), Q_MORE_DOWN, L, g->down, 3, I, H, E);
    if (!hybrid) return;
    gtensor *sg = add_t(p, NM("blk.%d.ffn_gate_inp_shexp.weight", L), G_F32MAT, GGML_F32, 1, &H);
    if (sg) sg->std = g->in;
    add_q(p, NM("blk.%d.ffn_gate_shexp.weight", L), Q_PLAIN, L, g->in, 2, H, Is, 0);
    add_q(p, NM("blk.%d.ffn_up_shexp.weight", L), Q_PLAIN, L, g->in, 2, H, Is, 0);
    add_q(p, NM("blk.%d.ffn_down_shexp.weight", L), Q_MORE_DOWN, L, g->sh_down, 2, Is, H, 0);
}

/* The MTP block's own tensors after its layer's (--mtp: Qwen3.5's, as
 * llama.cpp's converter writes them): eh_proj [2H -> H] (the fan-in is
 * twice the layer's), the norms of its two inputs and of its head. */
static void plan_nextn(gplan *p, int L) {
    const uint64_t H = (uint64_t)p->s->hidden;
    char nm[GNAME_LEN];
    add_q(p, NM("blk.%d.nextn.eh_proj.weight", L), Q_PLAIN, L, p->g.in / sqrtf(2.0f), 2, 2 * H, H, 0);
    add_vec(p, NM("blk.%d.nextn.enorm.weight", L), SYNTH_V_NORM, 1.0f, H);
    add_vec(p, NM("blk.%d.nextn.hnorm.weight", L), SYNTH_V_NORM, 1.0f, H);
    add_vec(p, NM("blk.%d.nextn.shared_head_norm.weight", L), SYNTH_V_NORM, 1.0f, H);
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const gtensor *)a)->name, ((const gtensor *)b)->name);
}

static void plan_tensors(gplan *p) {
    const e0_synth_shape *s = p->s;
    const uint64_t H = (uint64_t)s->hidden, V = (uint64_t)s->vocab;
    add_q(p, "output.weight", Q_OUTPUT, 0, p->g.lm_head, 2, H, V, 0);
    add_vec(p, "output_norm.weight", SYNTH_V_NORM, 1.0f, H);
    add_q(p, "token_embd.weight", Q_PLAIN, 0, p->g.embed, 2, H, V, 0);
    for (int L = 0; L < s->n_layers + (p->o.mtp ? 1 : 0) && !p->oom; L++) {
        const size_t first = p->n;
        plan_layer(p, L);
        if (L == s->n_layers) plan_nextn(p, L);
        if (!p->oom) qsort(p->t + first, p->n - first, sizeof *p->t, cmp_name);
    }
}

/* Parts of at most shard_bytes of tensor data (a tensor never straddles
 * two); shard_bytes 0: one file. */
static void plan_parts(gplan *p) {
    uint64_t used = 0;
    int cur = 0;
    for (size_t i = 0; i < p->n; i++) {
        gtensor *t = &p->t[i];
        const uint64_t b = (uint64_t)t->rows * ggml_row_bytes(t->type, (uint64_t)t->cols);
        if (p->o.shard_bytes && used > 0 && used + b > p->o.shard_bytes) {
            cur++;
            used = 0;
        }
        t->part = (uint32_t)cur;
        used += (b + 31) / 32 * 32;
    }
    p->n_parts = cur + 1;
}

/* ======================================================================
 * Metadata: the architecture's keys and the tokenizer.
 * ====================================================================== */

/* token types (llama.cpp's llama_token_type) */
enum { TT_NORMAL = 1, TT_CONTROL = 3, TT_USER_DEFINED = 4, TT_UNUSED = 5 };

typedef struct {
    cJSON *json, *cfg;   /* tokenizer.json, tokenizer_config.json (may be NULL) */
    const char **tokens; /* [n]: views into json, or into pad */
    int32_t *types;      /* [n] */
    char *pad;           /* "[PADi]" names, NUL-separated */
    const char **merges;
    char *merge_buf;
    uint64_t n, n_merges;
    const char *chat_template; /* view into cfg, or NULL */
    int32_t eos, bos;
} gtok;

static void gtok_free(gtok *k) {
    cJSON_Delete(k->json);
    cJSON_Delete(k->cfg);
    free(k->tokens);
    free(k->types);
    free(k->pad);
    free(k->merges);
    free(k->merge_buf);
    memset(k, 0, sizeof *k);
}

static cJSON *read_json(const char *path, size_t max, char *err) {
    char *text = NULL;
    size_t len = 0;
    if (e0_read_file(path, &text, &len, max, err) != 0) return NULL;
    cJSON *j = cJSON_ParseWithLength(text, len);
    free(text);
    if (!j) e0_fail(err, E0_EFORMAT, "%s: not valid JSON", path);
    return j;
}

/* The vocabulary of tokenizer.json padded to `vocab` ids, its merges as
 * "A B", and the chat template of the tokenizer_config.json beside it. */
static int gtok_load(gtok *k, const char *path, int vocab, char *err) {
    memset(k, 0, sizeof *k);
    k->eos = k->bos = -1;
    if (!path || !*path)
        return e0_fail(err, E0_EINVAL, "the gguf format needs a tokenizer.json (--tokenizer)");
    if (!(k->json = read_json(path, 256u << 20, err))) return E0_EFORMAT;
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(k->json, "model");
    const cJSON *vmap = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(k->json, "added_tokens");
    if (!cJSON_IsObject(vmap) || !cJSON_IsArray(merges))
        return e0_fail(err, E0_EFORMAT, "%s: no model.vocab object or model.merges array", path);
    k->n = (uint64_t)vocab;
    k->tokens = calloc(k->n, sizeof *k->tokens);
    k->types = calloc(k->n, sizeof *k->types);
    if (!k->tokens || !k->types) return e0_fail(err, E0_ENOMEM, "out of memory");
    const cJSON *e;
    cJSON_ArrayForEach(e, vmap) {
        if (!cJSON_IsNumber(e) || e->valuedouble < 0 || e->valuedouble >= (double)vocab)
            return e0_fail(err, E0_EFORMAT,
                           "%s: token \"%s\" has an id outside the %d ids of the shape", path,
                           e->string, vocab);
        k->tokens[e->valueint] = e->string;
        k->types[e->valueint] = TT_NORMAL;
    }
    cJSON_ArrayForEach(e, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(e, "id");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(e, "content");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(c) || id->valuedouble < 0 ||
            id->valuedouble >= (double)vocab)
            return e0_fail(err, E0_EFORMAT, "%s: a malformed added token", path);
        k->tokens[id->valueint] = c->valuestring;
        k->types[id->valueint] = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "special"))
                                     ? TT_CONTROL
                                     : TT_USER_DEFINED;
        if (!strcmp(c->valuestring, "<|im_end|>")) k->eos = id->valueint;
        if (!strcmp(c->valuestring, "<|endoftext|>")) k->bos = id->valueint;
    }
    /* ids without a token: "[PADi]", unused (as the converter pads) */
    size_t need = 0;
    for (uint64_t i = 0; i < k->n; i++)
        if (!k->tokens[i])
            need += (size_t)snprintf(NULL, 0, "[PAD%llu]", (unsigned long long)i) + 1;
    if (!(k->pad = malloc(need ? need : 1))) return e0_fail(err, E0_ENOMEM, "out of memory");
    char *q = k->pad;
    for (uint64_t i = 0; i < k->n; i++)
        if (!k->tokens[i]) {
            k->tokens[i] = q;
            k->types[i] = TT_UNUSED;
            q += snprintf(q, need - (size_t)(q - k->pad), "[PAD%llu]", (unsigned long long)i) + 1;
        }
    /* merges: "A B" strings, or [A, B] pairs (newer tokenizers) */
    k->n_merges = (uint64_t)cJSON_GetArraySize(merges);
    size_t mlen = 0;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
            cJSON_IsString(cJSON_GetArrayItem(e, 0)) && cJSON_IsString(cJSON_GetArrayItem(e, 1)))
            mlen += strlen(cJSON_GetArrayItem(e, 0)->valuestring) +
                    strlen(cJSON_GetArrayItem(e, 1)->valuestring) + 2;
        else if (!cJSON_IsString(e))
            return e0_fail(err, E0_EFORMAT, "%s: a merge is neither \"A B\" nor [A, B]", path);
    }
    k->merges = malloc((k->n_merges ? k->n_merges : 1) * sizeof *k->merges);
    k->merge_buf = malloc(mlen ? mlen : 1);
    if (!k->merges || !k->merge_buf) return e0_fail(err, E0_ENOMEM, "out of memory");
    uint64_t m = 0;
    q = k->merge_buf;
    cJSON_ArrayForEach(e, merges) {
        if (cJSON_IsString(e)) {
            k->merges[m++] = e->valuestring;
            continue;
        }
        k->merges[m++] = q;
        q += sprintf(q, "%s %s", cJSON_GetArrayItem(e, 0)->valuestring,
                     cJSON_GetArrayItem(e, 1)->valuestring) +
             1;
    }
    /* the chat template lives in tokenizer_config.json, beside it */
    const char *sl = strrchr(path, '/');
    char *dir = sl ? strndup(path, (size_t)(sl - path)) : strdup(".");
    char *cfg = dir ? e0_path_join(dir, "tokenizer_config.json") : NULL;
    free(dir);
    if (!cfg) return e0_fail(err, E0_ENOMEM, "out of memory");
    if (e0_file_exists(cfg)) {
        k->cfg = read_json(cfg, 64u << 20, err);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(k->cfg, "chat_template");
        if (cJSON_IsString(ct)) k->chat_template = ct->valuestring;
    }
    free(cfg);
    return 0;
}

/* Every key of part 0, in the order the converter and llama-quantize write. */
static int meta_add(gplan *p, gguf_writer *w, const gtok *k, char *err) {
    const e0_synth_shape *s = p->s;
    const bool hybrid = s->family != E0_SYNTH_QWEN3_MOE, q35 = s->family == E0_SYNTH_QWEN3_5_MOE;
    const char *a = q35 ? "qwen35moe" : hybrid ? "qwen3next" : "qwen3moe";
    char name[192], key[96];
    snprintf(name, sizeof name, "edge0 synth %s (random weights%s%s)", s->name,
             s->released[0] ? ", shape of " : "", s->released);
    int rc = 0;
#define KEY(suffix) (snprintf(key, sizeof key, "%s.%s", a, suffix), key)
#define U32(k_, v_)                                                                                \
    if (!rc) rc = gguf_writer_add_u32(w, k_, (uint32_t)(v_), err)
#define F32(k_, v_)                                                                                \
    if (!rc) rc = gguf_writer_add_f32(w, k_, (float)(v_), err)
    if (!rc) rc = gguf_writer_add_str(w, "general.architecture", a, err);
    if (!rc) rc = gguf_writer_add_str(w, "general.type", "model", err);
    if (!rc) rc = gguf_writer_add_str(w, "general.name", name, err);
    U32(KEY("block_count"), s->n_layers + (p->o.mtp ? 1 : 0));
    if (p->o.mtp) U32(KEY("nextn_predict_layers"), 1);
    U32(KEY("context_length"), s->max_pos);
    U32(KEY("embedding_length"), s->hidden);
    if (s->dense_inter) U32(KEY("feed_forward_length"), s->dense_inter);
    U32(KEY("attention.head_count"), s->n_heads);
    U32(KEY("attention.head_count_kv"), s->n_kv_heads);
    const int rot = (int)(s->head_dim * s->partial_rotary);
    if (q35 && !rc) {
        /* multimodal RoPE sections over rot / 2 pairs; text positions make it
         * plain RoPE (config_gguf.c), llama.cpp needs the key */
        const int half = rot / 2, sec = (half + 2) / 3;
        const int32_t sections[4] = {sec, sec, half - 2 * sec, 0};
        rc = gguf_writer_add_arr(w, KEY("rope.dimension_sections"), GGUF_I32, sections, 4, err);
    }
    F32(KEY("rope.freq_base"), s->rope_theta);
    F32(KEY("attention.layer_norm_rms_epsilon"), 1e-6);
    U32(KEY("expert_count"), s->n_experts);
    U32(KEY("expert_used_count"), s->top_k);
    U32(KEY("attention.key_length"), s->head_dim);
    U32(KEY("attention.value_length"), s->head_dim);
    U32(KEY("expert_feed_forward_length"), s->moe_inter);
    if (hybrid) {
        U32(KEY("expert_shared_feed_forward_length"), s->shared_inter);
        U32(KEY("ssm.conv_kernel"), s->conv_kernel);
        U32(KEY("ssm.state_size"), s->lin_k_dim);
        U32(KEY("ssm.group_count"), s->lin_k_heads);
        U32(KEY("ssm.time_step_rank"), s->lin_v_heads);
        U32(KEY("ssm.inner_size"), s->lin_v_heads * s->lin_v_dim);
        U32(KEY("full_attention_interval"), s->full_attention_interval);
        U32(KEY("rope.dimension_count"), rot);
    }
    if (!rc) rc = gguf_writer_add_str(w, "tokenizer.ggml.model", "gpt2", err);
    if (!rc) rc = gguf_writer_add_str(w, "tokenizer.ggml.pre", "qwen2", err);
    if (!rc) rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.tokens", k->tokens, k->n, err);
    if (!rc)
        rc = gguf_writer_add_arr(w, "tokenizer.ggml.token_type", GGUF_I32, k->types, k->n, err);
    if (!rc) rc = gguf_writer_add_arr_str(w, "tokenizer.ggml.merges", k->merges, k->n_merges, err);
    const int32_t eos = k->eos >= 0 ? k->eos : s->eos, bos = k->bos >= 0 ? k->bos : s->bos;
    if (eos >= 0) U32("tokenizer.ggml.eos_token_id", eos);
    if (bos >= 0) {
        U32("tokenizer.ggml.padding_token_id", bos);
        U32("tokenizer.ggml.bos_token_id", bos);
    }
    if (!rc) rc = gguf_writer_add_bool(w, "tokenizer.ggml.add_bos_token", false, err);
    if (!rc && k->chat_template)
        rc = gguf_writer_add_str(w, "tokenizer.chat_template", k->chat_template, err);
    U32("general.quantization_version", 2);
    /* LLAMA_FTYPE_MOSTLY_Q4_K_M, _Q8_0, _IQ4_XS, _Q4_0 */
    static const uint32_t ftype[] = {15, 7, 30, 2};
    U32("general.file_type", ftype[p->o.gguf_mix]);
    if (!rc) rc = synth_route_gguf(w, &p->o, err); /* edge0.route_* */
#undef KEY
#undef U32
#undef F32
    return rc;
}

/* The split keys gguf-split and llama-quantize write into every part. */
static int split_add(gplan *p, gguf_writer *w, int part, char *err) {
    const uint16_t no = (uint16_t)part, count = (uint16_t)p->n_parts;
    int rc = gguf_writer_add_scalar(w, "split.no", GGUF_U16, &no, err);
    if (!rc) rc = gguf_writer_add_scalar(w, "split.count", GGUF_U16, &count, err);
    if (!rc) rc = gguf_writer_add_i32(w, "split.tensors.count", (int32_t)p->n, err);
    return rc;
}

/* dst, or its part `part` of a split set: NAME-0000K-of-0000N.gguf with
 * NAME = dst without ".gguf" (llama_split_path numbers from 1). */
static char *part_path(const char *dst, int part, int n_parts) {
    if (n_parts == 1) return strdup(dst);
    size_t l = strlen(dst);
    if (l > 5 && !strcmp(dst + l - 5, ".gguf")) l -= 5;
    const size_t cap = l + 32;
    char *q = malloc(cap);
    if (q) snprintf(q, cap, "%.*s-%05d-of-%05d.gguf", (int)l, dst, part + 1, n_parts);
    return q;
}

static void gplan_free(gplan *p) {
    for (int i = 0; p->w && i < p->n_parts; i++)
        gguf_writer_free(p->w[i]); /* removes an unfinished PATH.tmp */
    for (int i = 0; p->paths && i < p->n_parts; i++)
        free(p->paths[i]);
    free(p->w);
    free(p->paths);
    free(p->t);
    stw_free(&p->jobs);
    memset(p, 0, sizeof *p);
}

/* The plan, the parts' writers with every key and tensor (not opened). */
static int gplan_build(gplan *p, const e0_synth_shape *s, const e0_synth_opts *o, const char *dst,
                       char *err) {
    memset(p, 0, sizeof *p);
    if (!s) return e0_fail(err, E0_EINVAL, "no shape given");
    if (o->route_skew != 0)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "--route-skew is not available for the gguf format (its planted routing "
                       "direction needs structured embedding rows); use --format mlx or hf");
    if (o->mtp && s->family != E0_SYNTH_QWEN3_5_MOE)
        return e0_fail(err, E0_EUNSUPPORTED,
                       "--mtp: shape %s is not a Qwen3.5 / 3.6 shape (qwen3_5_moe), the family "
                       "that ships an MTP block",
                       s->name);
    const synth_route *rt;
    int rc0 = synth_route_of(o, &rt, err);
    if (rc0) return rc0;
    p->s = s;
    p->o = *o;
    p->g = synth_gains_of(s);
    plan_tensors(p);
    if (p->oom) return e0_fail(err, E0_ENOMEM, "out of memory planning shape %s", s->name);
    for (size_t i = 0; i < p->n; i++)
        if (p->t[i].kind == G_QUANT && p->t[i].type == GGML_F16)
            return e0_fail(err, E0_EINVAL,
                           "shape %s: tensor %s has rows of %lld values, not a multiple of 32",
                           s->name, p->t[i].name, (long long)p->t[i].cols);
    plan_parts(p);
    p->w = calloc((size_t)p->n_parts, sizeof *p->w);
    p->paths = calloc((size_t)p->n_parts, sizeof *p->paths);
    if (!p->w || !p->paths) return e0_fail(err, E0_ENOMEM, "out of memory");
    gtok k;
    int rc = gtok_load(&k, o->tokenizer, s->vocab, err);
    for (int i = 0; !rc && i < p->n_parts; i++) {
        if (!(p->paths[i] = part_path(dst ? dst : "model.gguf", i, p->n_parts)))
            rc = e0_fail(err, E0_ENOMEM, "out of memory");
        if (!rc) rc = gguf_writer_new(&p->w[i], 0, err);
        if (!rc && i == 0) rc = meta_add(p, p->w[0], &k, err);
        if (!rc && p->n_parts > 1) rc = split_add(p, p->w[i], i, err);
    }
    gtok_free(&k);
    for (size_t i = 0; !rc && i < p->n; i++) {
        const gtensor *t = &p->t[i];
        rc = gguf_writer_add_tensor(p->w[t->part], t->name, t->type, t->n_dims, t->ne, err);
    }
    return rc;
}

static void fill_info(const gplan *p, e0_synth_info *info) {
    memset(info, 0, sizeof *info);
    for (int i = 0; i < p->n_parts; i++)
        info->bytes += gguf_writer_size(p->w[i]);
    for (size_t i = 0; i < p->n; i++) {
        const gtensor *t = &p->t[i];
        const uint64_t b = (uint64_t)t->rows * ggml_row_bytes(t->type, (uint64_t)t->cols);
        info->params += (uint64_t)t->rows * (uint64_t)t->cols;
        info->type_tensors[t->type]++;
        info->type_bytes[t->type] += b;
    }
    info->n_tensors = p->n;
    info->n_shards = p->n_parts;
}

int synth_gguf_plan_info(const e0_synth_shape *s, const e0_synth_opts *o, e0_synth_info *info, char *err) {
    gplan p;
    int rc = gplan_build(&p, s, o, NULL, err);
    if (!rc) fill_info(&p, info);
    gplan_free(&p);
    return rc;
}

/* ======================================================================
 * Generators: rows of random blocks with mean exactly 0.
 * ====================================================================== */

static void gen_quant(const gtensor *t, xrng *r, int64_t n, uint8_t *out) {
    synth_gen_blocks(t->type, t->std, r, n * (t->cols / ggml_info(t->type)->blck), out);
}

/* F32 matrices (routers, the shared-expert gate): uniform, every group of
 * 64 along a row with mean 0, so routing logits are O(1) and unbiased. */
static void gen_f32mat(const gtensor *t, xrng *r, int64_t n, float *out) {
    for (int64_t row = 0; row < n; row++)
        for (int64_t g = 0; g < t->cols / SYNTH_GROUP; g++, out += SYNTH_GROUP) {
            const float mean = synth_group_uniform(r, t->std, out) / (float)SYNTH_GROUP;
            for (int i = 0; i < SYNTH_GROUP; i++)
                out[i] -= mean;
        }
}

static void gen_vec(const gtensor *t, xrng *r, float *out) {
    for (int64_t i = 0; i < t->cols; i++) {
        const float v = synth_vec_value(r, (synth_vkind)t->vkind, t->base, t->fan);
        out[i] = t->neg_exp ? -expf(v) : v; /* ssm_a = -exp(A_log) = -A */
    }
}

/* Rows [r0, r0 + n) of one tensor, from the stream of (seed, tensor, r0):
 * the same bytes whatever the thread count. */
static void produce(void *ctx, stw_run *run, const stw_job *j, const stw_out *out) {
    const gplan *p = ctx;
    const gtensor *t = &p->t[j->item];
    xrng r;
    xr_seed(&r, p->o.seed, 0x67677566ull + j->item, (uint64_t)j->r0);
    if (t->kind == G_QUANT)
        gen_quant(t, &r, j->n, out->w);
    else if (t->kind == G_F32MAT)
        gen_f32mat(t, &r, j->n, (float *)(void *)out->w);
    else
        gen_vec(t, &r, (float *)(void *)out->w);
}

static int write_piece(void *ctx, uint32_t part, uint64_t off, const void *b, size_t len,
                       char *err) {
    gplan *p = ctx;
    return gguf_writer_pwrite(p->w[part], off, b, len, err);
}

/* The runner's progress as synth reports it: data bytes written. */
static void on_progress(void *ctx, const stw_progress *sp) {
    const gplan *p = ctx;
    const e0_synth_progress pr = {.phase = (e0_synth_phase)sp->phase,
                               .done = sp->written,
                               .total = p->jobs.total_data,
                               .seconds = sp->seconds};
    p->o.progress(p->o.progress_ctx, &pr);
}

/* Each tensor's rows as one item of the job runner at its file offset. */
static int plan_jobs(gplan *p, char *err) {
    stw_item *it = stw_items(&p->jobs, p->n);
    if (!it) return e0_fail(err, E0_ENOMEM, "out of memory");
    size_t in_part = 0;
    for (size_t i = 0; i < p->n; i++) {
        const gtensor *t = &p->t[i];
        if (i && t->part != p->t[i - 1].part) in_part = 0;
        it[i] = (stw_item){.name = t->name,
                           .dtype = ST_F32,
                           .ndim = 1,
                           .rows = t->rows,
                           .cols = t->cols,
                           .shard = t->part,
                           .off = gguf_writer_tensor_offset(p->w[t->part], in_part++),
                           .wrow = (size_t)ggml_row_bytes(t->type, (uint64_t)t->cols)};
    }
    return stw_layout_raw(&p->jobs, CHUNK_BYTES, err);
}

int synth_gguf_write(const e0_synth_shape *s, const char *dst, const e0_synth_opts *o, char *err) {
    const double t0 = stw_now();
    gplan p;
    int rc = gplan_build(&p, s, o, dst, err);
    e0_synth_info info = {0};
    if (!rc) fill_info(&p, &info);
    struct stat st;
    for (int i = 0; !rc && i < p.n_parts; i++)
        if (lstat(p.paths[i], &st) == 0)
            rc = e0_fail(err, E0_EINVAL, "%s already exists; remove it or choose another path",
                         p.paths[i]);
    if (!rc) rc = stw_check_space(dst, info.bytes, err);
    for (int i = 0; !rc && i < p.n_parts; i++)
        rc = gguf_writer_open(p.w[i], p.paths[i], err);
    if (!rc) rc = plan_jobs(&p, err);
    if (!rc) {
        const stw_write_opts wo = {.n_threads = o->n_threads,
                                   .sync = !o->no_sync,
                                   .t0 = t0,
                                   .cancel = o->cancel,
                                   .ctx = &p,
                                   .produce = produce,
                                   .write = write_piece,
                                   .progress = o->progress ? on_progress : NULL};
        rc = stw_run_jobs(&p.jobs, &wo, err);
    }
    for (int i = 0; !rc && !o->no_sync && i < p.n_parts; i++)
        rc = gguf_writer_sync(p.w[i], err);
    if (!rc && o->cancel && *o->cancel) rc = e0_fail(err, E0_EINVAL, "interrupted");
    int done = 0;
    for (; !rc && done < p.n_parts; done++)
        rc = gguf_writer_finish(p.w[done], err);
    if (rc) /* leave no part of an unfinished set behind */
        for (int i = 0; i < done; i++)
            unlink(p.paths[i]);
    if (!rc && !o->no_sync) stw_sync_parent(dst);
    if (!rc && o->progress) {
        const e0_synth_progress pr = {.phase = E0_SYNTH_DONE,
                                   .done = p.jobs.total_data,
                                   .total = p.jobs.total_data,
                                   .seconds = stw_now() - t0};
        o->progress(o->progress_ctx, &pr);
    }
    gplan_free(&p);
    return rc;
}
