/* sm_diagram: the text picture of a sharding's layout (see
 * sm_sharding_diagram in sm_sharding.h). Boxes are drawn with '+', '-' and
 * '|'. Every distinct block gets a box labelled "dev <ids>" with the ids of
 * the devices holding it in increasing order. */
#include "sm_sharding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SM_DIAGRAM_WIDTH      80 /* target width of the whole picture */
#define SM_DIAGRAM_MAX_HEIGHT 12 /* most content lines of a 2-D picture */
#define SM_DIAGRAM_LABEL_MAX  72 /* longer labels are abbreviated */

typedef struct {
    int64_t block; /* linear block number, row-major over blocks */
    int32_t device;
    int pos;
} sm_diagram_item;

static int sm_diagram_item_cmp(const void *a, const void *b)
{
    const sm_diagram_item *x = a, *y = b;
    if (x->block != y->block)
        return x->block < y->block ? -1 : 1;
    return (x->device > y->device) - (x->device < y->device);
}

/* Writes "dev 0,4" for items[0..n) into label (abbreviated when long). */
static void sm_diagram_label(const sm_diagram_item *items, int n, char *label, size_t len)
{
    size_t k = (size_t)snprintf(label, len, "dev ");
    for (int i = 0; i < n && k < len; i++) {
        char num[16];
        int w = snprintf(num, sizeof num, "%s%d", i ? "," : "", (int)items[i].device);
        if (k + (size_t)w + 16 > SM_DIAGRAM_LABEL_MAX && i + 1 < n) {
            snprintf(label + k, len - k, ",... (%d devices)", n);
            return;
        }
        k += (size_t)snprintf(label + k, len - k, "%s", num);
    }
}

/* The grid picture for rank 1 (one row) and rank 2. */
static void sm_diagram_grid(const sm_shape *g, int nrows, int ncols,
                            char (*labels)[SM_DIAGRAM_LABEL_MAX + 24], sm_strbuf *out)
{
    size_t maxlab = 0;
    for (int b = 0; b < nrows * ncols; b++)
        if (strlen(labels[b]) > maxlab)
            maxlab = strlen(labels[b]);
    /* Interior width and height of the whole picture, proportional to the
     * array's aspect (a character is about twice as tall as wide). */
    int64_t W = SM_DIAGRAM_WIDTH - (ncols + 1);
    int64_t H = 1;
    if (g->rank == 2) {
        /* rows / cols in floating point: the sizes may be huge. */
        double aspect =
            (double)(g->dims[0] > 0 ? g->dims[0] : 1) / (double)(g->dims[1] > 0 ? g->dims[1] : 1);
        double h = (double)W * aspect / 2;
        if (h > SM_DIAGRAM_MAX_HEIGHT) {
            H = SM_DIAGRAM_MAX_HEIGHT;
            W = (int64_t)(2.0 * SM_DIAGRAM_MAX_HEIGHT / aspect);
        } else {
            H = (int64_t)h;
        }
    }
    int64_t cw = W / ncols;
    if (cw < (int64_t)maxlab + 2)
        cw = (int64_t)maxlab + 2;
    int64_t ch = H / nrows;
    if (ch < 1)
        ch = 1;

    for (int r = 0; r <= nrows; r++) {
        sm_strbuf_puts(out, "+");
        for (int c = 0; c < ncols; c++) {
            sm_strbuf_repeat(out, '-', (size_t)cw);
            sm_strbuf_puts(out, "+");
        }
        sm_strbuf_puts(out, "\n");
        if (r == nrows)
            break;
        for (int64_t line = 0; line < ch; line++) {
            sm_strbuf_puts(out, "|");
            for (int c = 0; c < ncols; c++) {
                const char *lab = line == (ch - 1) / 2 ? labels[r * ncols + c] : "";
                size_t ll = strlen(lab);
                size_t left = ((size_t)cw - ll) / 2;
                sm_strbuf_repeat(out, ' ', left);
                sm_strbuf_puts(out, lab);
                sm_strbuf_repeat(out, ' ', (size_t)cw - ll - left);
                sm_strbuf_puts(out, "|");
            }
            sm_strbuf_puts(out, "\n");
        }
    }
}

sm_err sm_sharding_diagram(const sm_sharding *s, const sm_shape *global, sm_strbuf *out, char *err,
                           size_t errlen)
{
    int n = s->mesh.ndevices;
    sm_device_slice *ix = NULL;
    sm_diagram_item *items = NULL;
    int *first = NULL;
    char(*labels)[SM_DIAGRAM_LABEL_MAX + 24] = NULL;
    sm_err rc = SM_ENOMEM;

    ix = malloc(sizeof *ix * (size_t)n);
    items = malloc(sizeof *items * (size_t)n);
    first = malloc(sizeof *first * ((size_t)n + 1));
    labels = malloc(sizeof *labels * (size_t)n);
    if (!ix || !items || !first || !labels) {
        sm_fail(err, errlen, SM_ENOMEM, "out of memory drawing the layout of %d devices", n);
        goto fail;
    }
    rc = sm_sharding_indices(s, global, ix, err, errlen);
    if (rc)
        goto fail;

    /* Block number: mixed radix of the shard numbers over dimensions. */
    int64_t nb[SM_MAX_RANK];
    for (int d = 0; d < global->rank; d++)
        nb[d] = global->dims[d] > 0 ? sm_pspec_dim_factor(&s->spec, &s->mesh, d) : 1;
    for (int i = 0; i < n; i++) {
        int64_t b = 0;
        for (int d = 0; d < global->rank; d++) {
            int64_t size = ix[i].index.r[d].stop - ix[i].index.r[d].start;
            b = b * nb[d] + (size > 0 ? ix[i].index.r[d].start / size : 0);
        }
        items[i] = (sm_diagram_item){b, ix[i].device, i};
    }
    qsort(items, (size_t)n, sizeof *items, sm_diagram_item_cmp);
    int nblocks = 0;
    for (int i = 0; i < n; i++)
        if (i == 0 || items[i].block != items[i - 1].block)
            first[nblocks++] = i;
    first[nblocks] = n;
    for (int b = 0; b < nblocks; b++)
        sm_diagram_label(items + first[b], first[b + 1] - first[b], labels[b], sizeof labels[b]);

    if (global->rank == 1 || global->rank == 2) {
        int ncols = (int)nb[global->rank - 1];
        int nrows = global->rank == 2 ? (int)nb[0] : 1;
        sm_diagram_grid(global, nrows, ncols, labels, out);
    } else {
        for (int b = 0; b < nblocks; b++) {
            char box[SM_MAX_RANK * 48 + 8];
            sm_index_format(&ix[items[first[b]].pos].index, box, sizeof box);
            sm_strbuf_printf(out, "%s  %s\n", box, labels[b]);
        }
    }
    if (out->oom) {
        rc = sm_fail(err, errlen, SM_ENOMEM, "out of memory drawing the layout");
        goto fail;
    }
    rc = SM_OK;
fail:
    free(ix);
    free(items);
    free(first);
    free(labels);
    return rc;
}
