/* The forward pass over a batch (weights/batch.h), in parts that a pass
 * may pause between (session_eval_part, pass_step): the embeddings, the
 * layers' halves, the positions moved on. Shared by the session's passes
 * (session.c) and the MTP block's (mtp.c), which runs one more layer of the
 * same kind after the main ones. */
#include "model/forward.h"
#include "model/model.h"

#include <string.h>

/* Run r's ids (its n) embedded into its rows of S->x and appended to its
 * session's history. */
void embed_run(const e0_batch *b, int r, const int32_t *ids) {
    const e0_model *m = b->run[0].s->m;
    const int H = m->cfg.hidden;
    const e0_run *ru = &b->run[r];
    for (int i = 0; i < ru->n; i++)
        mat_dequant(&m->embed, ids[i], 0, H, b->S->x + (size_t)(ru->t0 + i) * H);
    memcpy(ru->s->hist + ru->s->pos, ids, (size_t)ru->n * sizeof *ids);
}

void forward_begin(const e0_batch *b, const int32_t *ids) {
    for (int r = 0; r < b->nrun; r++)
        embed_run(b, r, ids + b->run[r].t0);
}

/* Half h of layer li on the residual stream S->x: 0 the token mixer
 * (attention or DeltaNet), 1 the MLP (MoE or dense). Between the halves
 * only S->x carries the pass (pass_step_halves pauses there). */
int forward_half(const e0_batch *b, int li, int h, char *err) {
    const e0_model *m = b->run[0].s->m;
    const e0_config *c = &m->cfg;
    e0_scratch *S = b->S;
    const int H = c->hidden, T = b->T;
    const e0_layer *ly = &m->layers[li];
    if (h == 0) {
        if (T >= MODEL_ADVISE_MIN_T) { /* read resident weights a layer ahead */
            if (li == 0) model_advise_layer(m, 0);
            model_advise_layer(m, li + 1);
        }
        rmsnorm(S->x, ly->in_norm, H, T, c->rms_eps, S->h);
        if (ly->linear)
            deltanet_forward_batch(b, li, S->h, S->y);
        else
            attn_forward_batch(b, li, S->h, S->y);
    } else {
        rmsnorm(S->x, ly->post_norm, H, T, c->rms_eps, S->h);
        if (ly->moe) {
            int rc = moe_forward_batch(b, li, S->h, S->y, err);
            if (rc) return rc;
        } else {
            mlp_forward_batch(b, li, S->h, S->y);
        }
    }
    for (size_t i = 0; i < (size_t)T * H; i++)
        S->x[i] += S->y[i];
    return 0;
}

/* Layers [l0, l1) over the batch (forward.h). */
int forward_layers(const e0_batch *b, int l0, int l1, char *err) {
    for (int li = l0; li < l1; li++)
        for (int h = 0; h < 2; h++) {
            int rc = forward_half(b, li, h, err);
            if (rc) return rc;
        }
    return 0;
}

void forward_end(const e0_batch *b) {
    for (int r = 0; r < b->nrun; r++)
        b->run[r].s->pos += b->run[r].n;
}

int forward(const e0_batch *b, const int32_t *ids, char *err) {
    forward_begin(b, ids);
    int rc = forward_layers(b, 0, b->run[0].s->m->cfg.n_layers, err);
    if (!rc) forward_end(b);
    return rc;
}

