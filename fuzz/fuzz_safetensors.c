/* libFuzzer: the safetensors header parser on arbitrary file bytes. */
#include "io/safetensors.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    st_header h;
    char err[512];
    if (st_header_parse(&h, data, size, size, "fuzz", err) == 0) {
        /* every accepted entry must lie inside the data section */
        for (size_t i = 0; i < h.n; i++)
            if (h.entries[i].end > size - h.data_start || h.entries[i].begin > h.entries[i].end) __builtin_trap();
        st_header_free(&h);
    }
    return 0;
}
