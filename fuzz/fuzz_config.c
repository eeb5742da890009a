/* libFuzzer: config.json parsing (flat, nested text_config, quantization). */
#include "io/config.h"

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    e0_config c;
    char err[512];
    if (config_parse(&c, (const char *)data, size, "fuzz/config.json", err) == 0) {
        int bits, group;
        config_quant_for(&c, "model.layers.0.mlp.gate", &bits, &group);
        config_free(&c);
    }
    return 0;
}
