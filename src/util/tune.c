/* The fastest setting of a knob, timed while running (util/tune.h). */
#include "util/tune.h"

#include <stdlib.h>
#include <string.h>

void tune_init(tune *t, int n_arms) {
    memset(t, 0, sizeof *t);
    t->n_arms = n_arms < 1 ? 1 : n_arms > TUNE_MAX_ARMS ? TUNE_MAX_ARMS : n_arms;
    t->measuring = t->n_arms > 1;
}

static int cmp_double(const void *x, const void *y) {
    const double u = *(const double *)x, v = *(const double *)y;
    return u < v ? -1 : u > v;
}

double tune_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void tune_step(tune *t, double s) {
    if (!t->measuring) {
        if (t->n_arms > 1 && ++t->kept >= TUNE_KEEP) { /* measure again */
            t->measuring = true;
            t->in_block = 0;
            memset(t->nt, 0, sizeof t->nt);
        }
        return;
    }
    if (t->in_block++ > 0 && t->nt[t->arm] < TUNE_SAMPLES) t->t[t->arm][t->nt[t->arm]++] = s;
    if (t->in_block < TUNE_BLOCK) return;
    t->in_block = 0;
    /* the next setting still short of samples, in turn */
    for (int i = 1; i <= t->n_arms; i++) {
        const int a = (t->arm + i) % t->n_arms;
        if (t->nt[a] < TUNE_SAMPLES) {
            t->arm = a;
            return;
        }
    }
    int best = 0;
    for (int a = 0; a < t->n_arms; a++) {
        t->med[a] = tune_median(t->t[a], t->nt[a]); /* the samples are done with */
        if (t->med[a] < t->med[best]) best = a;
    }
    t->arm = best;
    t->measuring = false;
    t->kept = 0;
    t->rounds++;
}
