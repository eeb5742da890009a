/* Helpers shared by the test programs (cmocka). */
#ifndef E0_TESTUTIL_H
#define E0_TESTUTIL_H

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "edge0.h"
#include "io/safetensors.h"
#include "quant/mat.h"

/* $E0_SHARED (default ../shared) + "/" + rel, in a static buffer. */
const char *tu_shared(const char *rel);
/* The edge0 binary under test: $E0_BIN (default build/edge0). */
const char *tu_bin(void);
/* A fresh temporary directory (removed by tu_rmtree). */
char *tu_tmpdir(void);
void tu_rmtree(const char *dir);

/* The checkpoints the engine-level tests run every path on: the fixture
 * families in each layout, and ../shared/gguf files written by llama.cpp's
 * tools (family "gguf/DIR", layout the file name). */
enum { TU_NCHECKPOINTS = 15 };
extern const char *const TU_CHECKPOINTS[TU_NCHECKPOINTS][2];
/* A TU_CHECKPOINTS family that is a GGUF directory. */
int tu_is_gguf(const char *family);
/* The path (under $E0_SHARED) of checkpoint family/layout, in a static buffer. */
const char *tu_checkpoint(const char *family, const char *layout);

/* The streaming configurations (expert path, I/O mode, cache slots, further
 * LayerOptions "field=value ...") the engine-level tests run every model
 * under, each bit-identical to exact. */
typedef struct {
    const char *name;
    e0_path path;
    e0_io_mode io;
    int slots;
    const char *opts;
} tu_config;
enum { TU_NCONFIGS = 8 };
extern const tu_config TU_CONFIGS[TU_NCONFIGS];
/* o: the defaults with configuration c, `threads` threads, no memory budget. */
void tu_apply_config(e0_engine_opts *o, const tu_config *c, int threads);

/* ||a - b|| / ||b|| */
double tu_rel_l2(const float *a, const float *b, size_t n);
/* The index of v's largest value (the first of equals). */
size_t tu_argmax(const float *v, size_t n);

/* An F32 / I32 tensor of an opened set; fails the test if missing or mistyped. */
const float *tu_f32(const st_set *s, const char *name, size_t numel);
const int32_t *tu_i32(const st_set *s, const char *name, size_t *numel);

/* mat_matmul under the kernel set in force against mat_matmul_ref on T
 * random tokens (`rnd` draws each activation; x and y rows padded to ldx /
 * ldy): the NMSE; fails the test if a padding column of y is written. */
double tu_matmul_nmse(const e0_mat *m, int64_t T, int64_t ldx, int64_t ldy, float (*rnd)(void));

/* Writes `len` bytes to dir/name; returns the malloc'd path. */
char *tu_write(const char *dir, const char *name, const void *data, size_t len);

/* The tiny synthetic model with route stickiness P written into the new
 * directory root/NAME (fails the test on error); returns its malloc'd path. */
char *tu_synth_sticky(const char *root, const char *name, double P);
/* The same with the routing profile `profile` (synth --route-profile). */
char *tu_synth_profile(const char *root, const char *name, const char *profile);

/* The model at dir opened so that its expert cache sees every routed
 * expert (the routing tests read routing from its request trace): 2
 * threads, pread I/O, `slots` cache slots, no speculative loads, cache
 * policy `policy` (< 0: the engine's default); fails the test unless the
 * model has `layers` layers, `experts` experts and top-k `top_k`. */
e0_engine *tu_open_cached(const char *dir, int32_t slots, int policy, int32_t layers,
                          int32_t experts, int32_t top_k);

/* Runs a shell command line; returns its exit status (-1 if it did not exit). */
int tu_run(const char *cmd);

#endif
