#include "util/arr.h"

#include <stdint.h>
#include <stdlib.h>

int arr_reserve(void **p, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return 0;
    if (elem == 0 || need > SIZE_MAX / elem) return -1;
    size_t c = *cap ? *cap : 16;
    while (c < need)
        c = c <= SIZE_MAX / 2 ? 2 * c : need;
    if (c > SIZE_MAX / elem) c = need; /* doubling went past what fits: just enough */
    void *q = realloc(*p, c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}
