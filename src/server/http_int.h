/* The HTTP front's own state (http.c), shared with the protocol files that
 * render its answers (openai.c). */
#ifndef E0_SERVER_HTTP_INT_H
#define E0_SERVER_HTTP_INT_H

#include "server/engine.h"
#include "server/metrics.h"
#include "server/server.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

struct MHD_Daemon;

struct srv {
    srv_opts o;
    char *model_name;
    char *api_key;  /* NULL: no authentication */
    struct MHD_Daemon *d;
    srv_engine *E;
    srv_metrics m;
    int port;
    int64_t started;
    uint64_t seq;   /* request ids; atomic */
    e0_model_info info;
    atomic_int live;     /* requests begun and not completed (their answers not all sent) */
    bool starting;       /* MHD_start_daemon is running: mhd_log keeps its words */
    char start_why[256]; /* ... here */
};

#endif
