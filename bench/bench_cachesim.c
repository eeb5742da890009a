/* Replays a request trace written by `edge0 bench --trace FILE` through the
 * cache policies of stream/cachesim.h, for capacities given as shares of
 * all experts, and LFU at several half-lives (in requests, as multiples of
 * the capacity; 0 = no decay). The decode part is scored, the prefill part
 * warms the caches, as `edge0 bench --stats` does.
 *
 *   build/bench/bench_cachesim TRACE [SHARE...]      (default 0.1 0.3 0.5)
 */
#include "stream/cachesim.h"

#include "edge0.h"

#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s TRACE [SHARE...]\n", argv[0]);
        return 2;
    }
    FILE *f = fopen(argv[1], "r");
    if (!f) {
        perror(argv[1]);
        return 1;
    }
    int L, E;
    size_t from;
    if (fscanf(f, "# layers %d experts %d decode_from %zu", &L, &E, &from) != 3 || L < 1 || E < 1) {
        fprintf(stderr, "%s: not an edge0 trace\n", argv[1]);
        return 1;
    }
    size_t n = 0, cap = 1 << 16;
    uint32_t *keys = malloc(cap * sizeof *keys);
    unsigned l, e;
    while (keys && fscanf(f, "%u %u", &l, &e) == 2) {
        if (l >= (unsigned)L || e >= (unsigned)E) {
            fprintf(stderr, "%s: request %zu is outside %d layers x %d experts\n", argv[1], n, L,
                    E);
            return 1;
        }
        if (n == cap) {
            uint32_t *k = realloc(keys, (cap *= 2) * sizeof *keys);
            if (!k) break;
            keys = k;
        }
        keys[n++] = l * (unsigned)E + e;
    }
    fclose(f);
    if (!keys) return 1;
    double shares[16] = {0.1, 0.3, 0.5};
    int ns = 3;
    if (argc > 2)
        for (ns = 0; ns < 16 && ns + 2 < argc; ns++)
            shares[ns] = atof(argv[ns + 2]);
    static const double half_lives[] = {0.25, 0.5, 1, 2, 4, 0};
    printf("%s: %zu requests, %zu scored (decode), %d layers x %d experts\n", argv[1], n, n - from,
           L, E);
    char err[E0_ERR_MAX];
    for (int s = 0; s < ns; s++) {
        const int32_t slots = (int32_t)(shares[s] * L * E + 0.5);
        printf("%4.0f%% (%5d slots):", 100 * shares[s], slots);
        for (int p = 0; p < CACHESIM_N; p++) {
            uint64_t h;
            if (p == CACHESIM_ROUTER || p == CACHESIM_RECENT) { /* they need the router's logits */
                printf(" %s -", cachesim_name((cachesim_policy)p));
                continue;
            }
            if (cachesim_run((cachesim_policy)p, keys, n, from, (uint32_t)(L * E), slots, slots, NULL, &h,
                             err)) {
                fprintf(stderr, "%s\n", err);
                return 1;
            }
            printf(" %s %5.1f%%", cachesim_name((cachesim_policy)p),
                   100.0 * (double)h / (double)(n - from));
        }
        printf(" | lfu half-life x slots:");
        for (size_t i = 0; i < sizeof half_lives / sizeof *half_lives; i++) {
            uint64_t h;
            cachesim_run(CACHESIM_LFU, keys, n, from, (uint32_t)(L * E), slots,
                         half_lives[i] * slots, NULL, &h, err);
            printf(" %g:%.1f%%", half_lives[i], 100.0 * (double)h / (double)(n - from));
        }
        printf("\n");
    }
    free(keys);
    return 0;
}
