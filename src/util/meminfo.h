/* The memory this process may use: MemAvailable and the cgroup limits it
 * lives under (v1 and v2, every level up to the root). Read from /proc
 * and /sys on every call: cheap enough for a monitor's poll. */
#ifndef E0_UTIL_MEMINFO_H
#define E0_UTIL_MEMINFO_H

#include <stdint.h>

/* MemAvailable from /proc/meminfo, in bytes (0 if unknown). */
uint64_t mem_available(void);

/* The smallest memory limit of the cgroups this process lives in, or 0
 * when there is none. */
uint64_t mem_cgroup_limit(void);

/* Bytes that can still be allocated before the kernel must take memory
 * from someone (reclaim beyond the page cache, or the OOM killer): the
 * smaller of MemAvailable and, for the cgroup with the smallest limit,
 * the limit less what it holds other than file pages. 0 if unknown. */
uint64_t mem_headroom(void);

#endif
