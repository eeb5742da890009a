/* Option parsing by table (opts.h). */
#include "cli/opts.h"

#include <stdlib.h>
#include <string.h>

static const cli_opt *find(const cli_opt *t, const char *a) {
    for (; t && t->name; t++)
        if (!strcmp(t->name, a)) return t;
    return NULL;
}

static bool takes_value(const cli_opt *o) {
    return o->kind != CLI_SET && o->kind != CLI_CLEAR && o->kind != CLI_ISET && o->kind != CLI_BITS;
}

/* One option with its value v (NULL: none given): 0, or -1 (message printed). */
static int apply(const cli_opt *o, const char *v) {
    long n;
    switch (o->kind) {
    case CLI_SET:
        *(bool *)o->ptr = true;
        return 0;
    case CLI_CLEAR:
        *(bool *)o->ptr = false;
        return 0;
    case CLI_ISET:
        *(int *)o->ptr = 1;
        return 0;
    case CLI_BITS:
        *(unsigned *)o->ptr |= (unsigned)o->lo;
        return 0;
    case CLI_STR:
        if (!v) {
            cli_error("%s needs %s", o->name, o->need ? o->need : "a value");
            return -1;
        }
        *(const char **)o->ptr = v;
        return 0;
    case CLI_INT:
        if ((n = cli_parse_long(o->name, v, o->lo, o->hi)) < 0) return -1;
        *(int *)o->ptr = (int)n;
        return 0;
    case CLI_LONG:
        if ((n = cli_parse_long(o->name, v, o->lo, o->hi)) < 0) return -1;
        *(long *)o->ptr = n;
        return 0;
    case CLI_FN:
        if (!v && o->need) {
            cli_error("%s needs %s", o->name, o->need);
            return -1;
        }
        return o->fn(o->ptr, o->name, v);
    }
    return -1;
}

int cli_parse(const cli_args *p, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (p->ce) {
            const int r = cli_engine_arg(p->ce, argc, argv, &i, p->help);
            if (r < 0) return 2;
            if (r == 2) return 1;
            if (r == 1) continue;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            if (p->help_fn) p->help_fn(stdout);
            else fputs(p->help, stdout);
            return 1;
        }
        const cli_opt *o = find(p->opts, a);
        if (!o) o = find(p->more, a);
        if (o && !takes_value(o)) {
            apply(o, NULL);
            continue;
        }
        if (p->value_first && a[0] == '-' && !v) {
            cli_error("%s needs a value (see edge0 %s --help)", a, p->cmd);
            return 2;
        }
        if (o) {
            if (apply(o, v)) return 2;
            i++;
        } else if (a[0] == '-' && (a[1] || !p->dash_is_arg)) {
            cli_error("%s: unknown option '%s' (see edge0 %s --help)", p->cmd, a, p->cmd);
            return 2;
        } else if (p->pos && !*p->pos) {
            *p->pos = a;
        } else if (p->pos2 && !*p->pos2) {
            *p->pos2 = a;
        } else {
            cli_error("%s: unexpected argument '%s'", p->cmd, a);
            return 2;
        }
    }
    return 0;
}

int cli_opt_text_file(void *ptr, const char *name, const char *v) {
    char **text = ptr;
    free(*text);
    return (*text = cli_read_text_file(name, v)) ? 0 : -1;
}

static int shard_gb(void *ptr, const char *name, const char *v) {
    const long n = cli_parse_long(name, v, 1, 1024);
    if (n < 0) return -1;
    *(uint64_t *)ptr = (uint64_t)n << 30;
    return 0;
}

static int shard_mb(void *ptr, const char *name, const char *v) {
    const long n = cli_parse_long(name, v, 1, 1 << 20);
    if (n < 0) return -1;
    *(uint64_t *)ptr = (uint64_t)n << 20;
    return 0;
}

void cli_write_table(cli_opt *out, cli_write_opts *w) {
    const cli_opt t[CLI_WRITE_ROWS] = {
        CLI_OPT("--threads", CLI_INT, &w->n_threads, .lo = 1, .hi = 256),
        CLI_OPT("--shard-gb", CLI_FN, &w->shard_bytes, .fn = shard_gb),
        CLI_OPT("--shard-mb", CLI_FN, &w->shard_bytes, .fn = shard_mb),
        CLI_OPT("--no-sync", CLI_ISET, &w->no_sync),
        CLI_OPT("--dry-run", CLI_ISET, &w->dry),
        {0},
    };
    memcpy(out, t, sizeof t);
}
