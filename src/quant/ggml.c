/* ggml's weight types: the layout table (quant/ggml.h). */
#include "quant/ggml.h"

#include "edge0.h"

/* Sizes as ggml-common.h's block structs pin them; `supported` marks the
 * types edge0 dequantizes and multiplies. */
static const ggml_type_info g_types[GGML_NTYPES] = {
    [GGML_F32] = {"F32", 1, 4, 1},
    [GGML_F16] = {"F16", 1, 2, 1},
    [GGML_Q4_0] = {"Q4_0", 32, 18, 1},
    [GGML_Q4_1] = {"Q4_1", 32, 20, 1},
    [GGML_Q5_0] = {"Q5_0", 32, 22, 1},
    [GGML_Q5_1] = {"Q5_1", 32, 24, 1},
    [GGML_Q8_0] = {"Q8_0", 32, 34, 1},
    [GGML_Q8_1] = {"Q8_1", 32, 36, 0},
    [GGML_Q2_K] = {"Q2_K", 256, 84, 1},
    [GGML_Q3_K] = {"Q3_K", 256, 110, 1},
    [GGML_Q4_K] = {"Q4_K", 256, 144, 1},
    [GGML_Q5_K] = {"Q5_K", 256, 176, 1},
    [GGML_Q6_K] = {"Q6_K", 256, 210, 1},
    [GGML_Q8_K] = {"Q8_K", 256, 292, 0},
    [GGML_IQ2_XXS] = {"IQ2_XXS", 256, 66, 0},
    [GGML_IQ2_XS] = {"IQ2_XS", 256, 74, 0},
    [GGML_IQ3_XXS] = {"IQ3_XXS", 256, 98, 0},
    [GGML_IQ1_S] = {"IQ1_S", 256, 50, 0},
    [GGML_IQ4_NL] = {"IQ4_NL", 32, 18, 1},
    [GGML_IQ3_S] = {"IQ3_S", 256, 110, 0},
    [GGML_IQ2_S] = {"IQ2_S", 256, 82, 0},
    [GGML_IQ4_XS] = {"IQ4_XS", 256, 136, 1},
    [GGML_I8] = {"I8", 1, 1, 0},
    [GGML_I16] = {"I16", 1, 2, 0},
    [GGML_I32] = {"I32", 1, 4, 0},
    [GGML_I64] = {"I64", 1, 8, 0},
    [GGML_F64] = {"F64", 1, 8, 0},
    [GGML_IQ1_M] = {"IQ1_M", 256, 56, 0},
    [GGML_BF16] = {"BF16", 1, 2, 1},
    [GGML_TQ1_0] = {"TQ1_0", 256, 54, 0},
    [GGML_TQ2_0] = {"TQ2_0", 256, 66, 0},
    [GGML_MXFP4] = {"MXFP4", 32, 17, 0},
};

const ggml_type_info *ggml_info(uint32_t type) {
    if (type >= GGML_NTYPES || !g_types[type].name) return 0;
    return &g_types[type];
}

uint64_t ggml_row_bytes(uint32_t type, uint64_t cols) {
    const ggml_type_info *t = ggml_info(type);
    if (!t || cols % (uint64_t)t->blck) return 0;
    return cols / (uint64_t)t->blck * (uint64_t)t->size;
}

const char *e0_ggml_type_name(uint32_t type) {
    const ggml_type_info *ti = ggml_info(type);
    return ti ? ti->name : NULL;
}
