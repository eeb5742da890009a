/* edge0 info MODEL [--mem-budget SIZE] [--json]
 *
 * What a model is and what a run would do with it under the memory it
 * has: the figures come from e0_engine_plan, the same steps
 * e0_engine_open takes before it reads any weight. */
#include "cli/cli.h"
#include "cli/opts.h"
#include "edge0.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *HELP =
    "usage: edge0 info MODEL [engine options] [--json]\n"
    "\n"
    "Prints the model's family, layout, parameters, expert and non-expert bytes\n"
    "(and a GGUF file's MTP draft head, which is not loaded),\n"
    "the KV cache and DeltaNet state a sequence needs, and the plan a run would\n"
    "make with this machine's memory (or --mem-budget): the I/O mode, the expert\n"
    "cache's slots and share of all experts, and the bytes a decoded token would\n"
    "read from the disk when routing is uniform. Reads no weights.\n"
    "\n"
    "  --json         one JSON object instead of text\n"
    "\n";

/* Expected bytes read per decoded token at uniform routing: every MoE
 * layer asks for top-k experts, and a cache holding a share s of them
 * hits about s of the time when requests are independent. */
static double disk_per_token(const e0_plan *p) {
    if (!p->cache_slots || !p->n_bundles) return 0;
    double share = (double)p->cache_slots / (double)p->n_bundles;
    if (share > 1) share = 1;
    return (double)p->moe_layers * p->info.top_k * (1 - share) * (double)p->bundle_bytes;
}

int cmd_info(int argc, char **argv) {
    const char *model = NULL;
    bool json = false;
    cli_engine ce;
    cli_engine_init(&ce);
    const cli_opt opts[] = {
        CLI_OPT("--json", CLI_SET, &json),
        {0},
    };
    const cli_args args = {.cmd = "info", .help = HELP, .ce = &ce, .opts = opts, .pos = &model};
    const int parsed = cli_parse(&args, argc, argv);
    if (parsed) return parsed == 1 ? 0 : 2;
    if (cli_engine_finish(&ce) != 0) return 2;
    if (!model) {
        cli_error("info needs MODEL (see edge0 info --help)");
        return 2;
    }
    char err[E0_ERR_MAX];
    e0_plan p;
    if (e0_engine_plan(model, &ce.eo, &p, err) != E0_OK) {
        cli_error("%s", err);
        return 1;
    }
    const e0_model_info *in = &p.info;
    const double share = p.n_bundles ? (double)p.cache_slots / (double)p.n_bundles : 0;
    if (json) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "family", in->family);
        cJSON_AddStringToObject(o, "layout", in->layout);
        cJSON_AddNumberToObject(o, "layers", in->n_layers);
        cJSON_AddNumberToObject(o, "moe_layers", p.moe_layers);
        cJSON_AddNumberToObject(o, "experts", in->n_experts);
        cJSON_AddNumberToObject(o, "top_k", in->top_k);
        cJSON_AddNumberToObject(o, "vocab", in->vocab_size);
        cJSON_AddNumberToObject(o, "params", (double)p.params);
        cJSON_AddNumberToObject(o, "active_params", (double)p.active_params);
        cJSON_AddNumberToObject(o, "weight_bytes", (double)in->weight_bytes);
        cJSON_AddNumberToObject(o, "expert_bytes", (double)in->expert_bytes);
        cJSON_AddNumberToObject(o, "non_expert_bytes", (double)(in->weight_bytes - in->expert_bytes));
        cJSON_AddNumberToObject(o, "mtp_layers", in->mtp_layers);
        cJSON_AddNumberToObject(o, "mtp_bytes", (double)in->mtp_bytes);
        cJSON_AddBoolToObject(o, "mtp", in->mtp_on);
        cJSON_AddNumberToObject(o, "kv_bytes_per_1k_tokens", (double)p.kv_bytes_per_1k);
        cJSON_AddStringToObject(o, "kv_type", e0_kv_name(ce.eo.kv_type));
        cJSON_AddNumberToObject(o, "state_bytes", (double)p.state_bytes);
        cJSON_AddStringToObject(o, "io", e0_io_name(p.io));
        cJSON_AddNumberToObject(o, "mem_budget", (double)p.mem_budget);
        cJSON_AddBoolToObject(o, "auto_budget", p.auto_budget);
        cJSON_AddNumberToObject(o, "cache_slots", p.cache_slots);
        cJSON_AddNumberToObject(o, "bundle_bytes", (double)p.bundle_bytes);
        cJSON_AddNumberToObject(o, "slot_bytes", (double)p.slot_bytes);
        cJSON_AddNumberToObject(o, "experts_cached_share", share);
        cJSON_AddNumberToObject(o, "disk_bytes_per_token_uniform", disk_per_token(&p));
        cJSON_AddStringToObject(o, "plan", p.io_note);
        cJSON_AddNumberToObject(o, "gpu", p.gpu);
        cJSON_AddNumberToObject(o, "gpu_weight_bytes", (double)p.gpu_weight_bytes);
        cJSON_AddNumberToObject(o, "gpu_session_bytes", (double)p.gpu_session_bytes);
        cJSON_AddNumberToObject(o, "gpu_expert_slots", p.gpu_slots);
        cJSON_AddNumberToObject(o, "gpu_slot_bytes", (double)p.gpu_slot_bytes);
        cJSON_AddNumberToObject(o, "vram_budget", (double)p.vram_budget);
        cJSON_AddStringToObject(o, "compute", p.gpu_note[0] ? p.gpu_note : "CPU");
        char *s = cJSON_PrintUnformatted(o);
        if (s) puts(s);
        free(s);
        cJSON_Delete(o);
        return s ? 0 : 1;
    }
    printf("model: %s, layout %s: %d layers (%d MoE), %d experts, top-%d, vocab %d\n",
           in->family, in->layout, in->n_layers, p.moe_layers, in->n_experts, in->top_k,
           in->vocab_size);
    const bool big = p.params >= 1000000000;
    printf("parameters: %.2f %s, %.2f %s active per token\n", (double)p.params / (big ? 1e9 : 1e6),
           big ? "B" : "M", (double)p.active_params / (big ? 1e9 : 1e6), big ? "B" : "M");
    printf("weights: %.2f MiB = experts %.2f MiB + the rest %.2f MiB (resident)\n",
           (double)in->weight_bytes / (1 << 20), (double)in->expert_bytes / (1 << 20),
           (double)(in->weight_bytes - in->expert_bytes) / (1 << 20));
    if (in->mtp_layers)
        printf("MTP draft head: %d layer%s, %.2f MiB in the file (%s)\n", in->mtp_layers,
               in->mtp_layers == 1 ? "" : "s", (double)in->mtp_bytes / (1 << 20),
               in->mtp_on && ce.eo.mtp == E0_MTP_AUTO
                   ? "loaded, in the weights above: --mtp auto drafts with it once this machine measures "
                     "drafting to pay"
               : in->mtp_on ? "loaded, in the weights above: speculative decoding drafts with it"
               : ce.eo.mtp == E0_MTP_OFF ? "checked; not loaded: --mtp off"
               : in->mtp_layers != 1    ? "checked; not loaded: edge0 drafts with one block"
               : ce.eo.mtp == E0_MTP_AUTO
                   ? "checked; --mtp auto loads it and drafts once this machine measures drafting to pay"
                                        : "checked; not loaded: MTP is CPU-only for now");
    printf("per sequence: KV cache (%s) %.1f MiB per 1000 tokens of context; DeltaNet state %.1f "
           "MiB\n",
           e0_kv_name(ce.eo.kv_type), (double)p.kv_bytes_per_1k / (1 << 20),
           (double)p.state_bytes / (1 << 20));
    printf("plan: %s\n", p.io_note);
    if (p.cache_slots)
        printf("expert cache: %d slots of %.2f MiB = %.1f%% of the %llu experts; at uniform "
               "routing a decoded token reads ~%.0f MiB from the disk\n",
               p.cache_slots, (double)p.slot_bytes / (1 << 20), 100 * (share > 1 ? 1 : share),
               (unsigned long long)p.n_bundles, disk_per_token(&p) / (1 << 20));
    else
        printf("expert cache: none needed (experts are read from memory)\n");
    if (p.budget_note[0]) printf("budget: %s\n", p.budget_note);
    printf("compute: %s\n", p.gpu_note[0] ? p.gpu_note : "CPU");
    return 0;
}
