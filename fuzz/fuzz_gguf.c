/* libFuzzer: the GGUF header parser on arbitrary file bytes, then every
 * getter on every key it accepted, then the model configuration from the
 * metadata (io/config_gguf.c). */
#include "io/config.h"
#include "io/gguf.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    gguf_file *g;
    char err[512];
    if (gguf_parse(&g, data, size, size, "fuzz", err) != 0) return 0;
    /* every accepted tensor lies inside the data section, aligned */
    for (size_t i = 0; i < gguf_n_tensors(g); i++) {
        const gguf_tensor_info *t = gguf_tensor_at(g, i);
        if (gguf_data_start(g) > size || t->offset > size - gguf_data_start(g) ||
            t->nbytes > size - gguf_data_start(g) - t->offset || t->offset % gguf_alignment(g) ||
            gguf_tensor_find(g, t->name) != t)
            __builtin_trap();
    }
    volatile uint64_t sink = 0;
    for (size_t i = 0; i < gguf_n_kv(g); i++) {
        const char *k = gguf_key_at(g, i);
        uint32_t u32;
        int32_t i32;
        uint64_t u64, n;
        int64_t i64;
        float f;
        bool b;
        const char *s;
        gguf_vtype el;
        gguf_str v;
        sink += (uint64_t)gguf_get_u32(g, k, &u32, err) + (uint64_t)gguf_get_i32(g, k, &i32, err) +
                (uint64_t)gguf_get_u64(g, k, &u64, err) + (uint64_t)gguf_get_i64(g, k, &i64, err) +
                (uint64_t)gguf_get_f32(g, k, &f, err) + (uint64_t)gguf_get_bool(g, k, &b, err);
        if (gguf_get_str(g, k, &s, err) == 0)
            for (; *s; s++)
                sink += (uint8_t)*s;
        if (gguf_get_arr(g, k, &el, &n, err) != 0) continue;
        for (uint64_t j = 0; j < n && j < 64; j++) {
            if (gguf_arr_str(g, k, j, &v, err) == 0) {
                for (uint64_t c = 0; c < v.len; c++)
                    sink += (uint8_t)v.p[c];
                continue;
            }
            sink += (uint64_t)gguf_arr_u32(g, k, j, &u32, err) +
                    (uint64_t)gguf_arr_i32(g, k, j, &i32, err) +
                    (uint64_t)gguf_arr_i64(g, k, j, &i64, err) +
                    (uint64_t)gguf_arr_f32(g, k, j, &f, err);
        }
        /* past the end is refused */
        if (gguf_arr_str(g, k, n, &v, err) == 0 || gguf_arr_f32(g, k, n, &f, err) == 0)
            __builtin_trap();
    }
    (void)sink;
    e0_config c;
    if (config_from_gguf(&c, g, 1024, err) == 0) {
        /* the main layers and the MTP layers after them fit block_count */
        if (c.n_layers < 1 || c.mtp_layers < 0 || c.n_layers + c.mtp_layers > 1024)
            __builtin_trap();
        for (int i = 0; i < c.n_layers; i++)
            sink += c.layer_linear[i] + c.layer_moe[i];
        config_free(&c);
    }
    gguf_free(g);
    return 0;
}
