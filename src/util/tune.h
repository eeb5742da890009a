/* The fastest of a few settings of a knob, found by timing each while the
 * work runs (the GPU's host misses: gpu/hostmiss.c). Results must not
 * depend on the setting; only the speed does.
 *
 * Measuring: the settings take turns in blocks of TUNE_BLOCK steps, the
 * first step of a block not counted (it may straddle the switch), until
 * each has TUNE_SAMPLES timed steps; then the setting of the lowest median
 * step time is kept for TUNE_KEEP steps, and everything is measured again
 * (the machine or the routing may have changed). */
#ifndef E0_UTIL_TUNE_H
#define E0_UTIL_TUNE_H

#include <stdbool.h>

enum { TUNE_MAX_ARMS = 8, TUNE_BLOCK = 5, TUNE_SAMPLES = 8, TUNE_KEEP = 512 };

typedef struct {
    int n_arms;
    int arm;                 /* the setting in force */
    bool measuring;
    int in_block;            /* steps of the current block so far */
    int nt[TUNE_MAX_ARMS];   /* timed steps of each setting */
    double t[TUNE_MAX_ARMS][TUNE_SAMPLES];
    double med[TUNE_MAX_ARMS]; /* the last round's medians (seconds a step) */
    int kept;                /* steps since the choice */
    int rounds;              /* choices made */
} tune;

/* n_arms settings, 0 .. n_arms - 1 (at most TUNE_MAX_ARMS). */
void tune_init(tune *t, int n_arms);
/* The setting the next step should use. */
static inline int tune_arm(const tune *t) { return t->arm; }
/* A step under the setting in force took s seconds. */
void tune_step(tune *t, double s);
/* The median of v[0 .. n) (n > 0), sorting v in place (--mtp auto's too). */
double tune_median(double *v, int n);

#endif
