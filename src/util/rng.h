/* splitmix64 (Steele, Lea and Flood's; the constants of Vigna's reference
 * code): the one small generator behind the sampler's seeding, the test
 * hooks' coins, synth's weights, the route profiles and the servers' ids.
 * Written here (a dozen lines) because no Debian library offers it alone. */
#ifndef E0_UTIL_RNG_H
#define E0_UTIL_RNG_H

#include <stdint.h>

/* The next output; advances *x. */
static inline uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#endif
