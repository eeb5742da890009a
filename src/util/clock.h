/* Seconds on the monotonic clock, for timings and timeouts: the one clock
 * every room uses. */
#ifndef E0_UTIL_CLOCK_H
#define E0_UTIL_CLOCK_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#endif
