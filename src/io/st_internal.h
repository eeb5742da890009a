/* The inside of an opened st_set, shared by the two readers that build one:
 * safetensors.c (JSON headers) and gguf.c (GGUF headers). Nothing outside
 * src/io/ includes this; everyone else sees st_set through safetensors.h.
 *
 * Building a set: st_set_alloc (n files), st_file_map each file, parse its
 * header, st_set_reserve(total tensors), then st_set_add every tensor (which
 * rejects a name seen before, naming both files). st_set_free releases
 * everything, including each file's parsed header (`hdr` for safetensors,
 * `gguf` for GGUF, through the destructor its reader left in `gguf_free`,
 * so that safetensors.c never calls into gguf.c).
 */
#ifndef E0_IO_ST_INTERNAL_H
#define E0_IO_ST_INTERNAL_H

#include "io/safetensors.h"

#include <stdatomic.h>

struct gguf_file;

typedef struct {
    char *path;
    int fd;
    int dfd;               /* the same file opened O_DIRECT, or -1 when the filesystem refuses it */
    atomic_bool direct_on; /* dfd >= 0 and no direct read has failed with EINVAL */
    atomic_bool fail_next; /* tests: the next direct read fails with EINVAL */
    const uint8_t *map; /* 2 MiB-aligned (st_file_map) */
    uint64_t size;
    bool loaded; /* st_set_load put an anonymous copy in the mapping's place */
    int guard;   /* its slot in the SIGBUS guard's table (st_set_fault), or -1 */
    st_header hdr;          /* safetensors files */
    struct gguf_file *gguf; /* GGUF files (views into `map`), else NULL */
    void (*gguf_free)(struct gguf_file *); /* its destructor (gguf.c sets both) */
} st_file;

struct st_set {
    st_file *files;
    uint32_t nfiles;
    st_tensor *tensors;
    size_t n;
    uint32_t *slots; /* open-addressing table of tensor indices + 1 */
    size_t nslots;
};

/* A set with room for `nfiles` files (none opened yet: nfiles = 0). */
int st_set_alloc(st_set **out, uint32_t nfiles, char *err);
/* Opens, checks (a regular file) and maps `path` read-only into *f, with a
 * second O_DIRECT descriptor where the filesystem takes one; an empty file
 * is not mapped (map = NULL, size = 0). On error *f is still safe to close
 * (st_set_free). */
int st_file_map(st_file *f, const char *path, char *err);
/* Room for `n` tensors in all (call once, before st_set_add). */
int st_set_reserve(st_set *s, size_t n, char *err);
/* Appends a copy of *t (its name must outlive the set); E0_EFORMAT when the
 * name is already in the set. */
int st_set_add(st_set *s, const st_tensor *t, char *err);
/* The bytes a file of `size` bytes is mapped over (whole huge pages), and
 * an anonymous reservation of `span` bytes aligned to a huge page with
 * protection `prot` (NULL on failure): a loaded copy replaces the mapping
 * at the same address (st_load.c). */
uint64_t st_map_span(uint64_t size);
uint8_t *st_reserve_aligned(uint64_t span, int prot);

#endif
