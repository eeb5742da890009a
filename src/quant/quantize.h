/* The mlx affine quantizer of docs/design.md §2.4, in f32, so its output matches
 * mlx-lm's CPU quantizer bit for bit. Used by `edge0 convert` and
 * `edge0 synth`. */
#ifndef E0_QUANT_QUANTIZE_H
#define E0_QUANT_QUANTIZE_H

#include <stdint.h>

/* Quantizes one row of `cols` f32 values (cols % group == 0,
 * (cols * bits) % 32 == 0) into words [cols * bits / 32] and bf16 scales,
 * biases [cols / group]. bits in {2, 3, 4, 5, 6, 8}. */
void quant_row(const float *w, int64_t cols, int bits, int group, uint32_t *words,
               uint16_t *scales, uint16_t *biases);
/* The scalar reference quant_row is tested against (tests/test_quant.c); any
 * width. quant_row runs a vectorizable form for 4 and 8 bits and this one
 * otherwise. A NaN weight becomes code 0. */
void quant_row_ref(const float *w, int64_t cols, int bits, int group, uint32_t *words,
                   uint16_t *scales, uint16_t *biases);

#endif
