/* fuzz_manifest: libFuzzer target for the checkpoint manifest parser (the
 * text of DIR/manifest.json, which anyone who can write the directory
 * controls). A refusal must be DATA_LOSS (or out of memory) with a
 * sentence; an accepted manifest must format and parse back the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *text = malloc(size + 1), err[512] = "";
    sm_ckpt_manifest m, back;
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = 0;
    sm_err e = sm_ckpt_manifest_parse(text, "/d/manifest.json", &m, err, sizeof err);
    free(text);
    if (e != SM_OK) {
        if ((e != SM_EDATALOSS && e != SM_ENOMEM) || !err[0])
            abort();
        return 0;
    }
    char *again = sm_ckpt_manifest_format(&m);
    if (!again)
        abort();
    if (sm_ckpt_manifest_parse(again, "/d/manifest.json", &back, err, sizeof err) != SM_OK ||
        back.nshards != m.nshards || back.dtype != m.dtype)
        abort();
    for (int k = 0; k < m.nshards; k++)
        if (strcmp(back.shards[k].file, m.shards[k].file) ||
            back.shards[k].checksum != m.shards[k].checksum ||
            back.shards[k].nchunks != m.shards[k].nchunks)
            abort();
    free(again);
    sm_ckpt_manifest_free(&back);
    sm_ckpt_manifest_free(&m);
    return 0;
}
