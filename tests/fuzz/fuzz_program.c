/* fuzz_program: libFuzzer target for the program text form — the parser,
 * the verifier (JAX's shape, dtype and sharding rules), the lowering of
 * global-view programs and the printer. Any input must give a program or
 * an error with a message; nothing may crash, leak or hang. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sm_lower.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 1 << 16)
        return 0;
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    char err[1024] = "";
    sm_program *p = NULL, *l = NULL;
    sm_err e = sm_program_parse(text, "fuzz.shmap", &p, err, sizeof err);
    if (e == SM_OK)
        e = sm_program_verify(p, 1, err, sizeof err);
    if (e == SM_OK) {
        sm_strbuf b = {0};
        sm_program_print(p, &b);
        sm_program_describe(p, &b);
        sm_strbuf_free(&b);
        if (p->kind == SM_PROG_JIT && sm_lower(p, NULL, &l, err, sizeof err) != SM_OK)
            abort(); /* a verified jit program always lowers */
    } else if (!err[0]) {
        abort(); /* every refusal says why */
    }
    sm_program_free(l);
    sm_program_free(p);
    free(text);
    return 0;
}
