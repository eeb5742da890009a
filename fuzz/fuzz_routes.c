/* libFuzzer: routing traces for bench --replay (io/routes.h), read for a
 * model of 4 layers x 16 experts, top-2. */
#include "io/routes.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    struct e0_routes r;
    char err[512];
    if (routes_parse((const char *)data, size, "fuzz.trace", 4, 16, 2, &r, err) == 0) {
        long sum = 0; /* every id the parser accepted is read */
        for (int64_t i = 0; i < (int64_t)r.n_tokens * r.n_layers * r.top_k; i++)
            sum += r.ids[i];
        routes_clear(&r);
        if (sum == -1) return 1;
    }
    return 0;
}
