/*
 * fc_dcp_check.c - the coverage check of a model (the geometry through
 * fc_chunks_check_tiling()).
 */
#include "fc_dcp.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_chunks.h"
#include "fc_dcp_internal.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_sort.h"
#include "fc_strmap.h"

/* ------------------------------------------------------------------------ */
/* coverage check                                                           */

struct ck {
    struct fc_buf *report;
    size_t replicas;
    size_t nproblems;
    size_t lines;
    size_t dropped; /* report lines past CHECK_MAX_LINES */
    char first[768];
    int oom;
};

static void ck_line(struct ck *k, const char *line)
{
    if (k->first[0] == '\0')
        snprintf(k->first, sizeof(k->first), "%s", line);
    if (k->report != NULL && k->lines < CHECK_MAX_LINES && !k->oom) {
        if (fc_buf_printf(k->report, "%s\n", line) < 0)
            k->oom = 1;
        k->lines++;
    } else {
        k->dropped++;
    }
}

static void ck_problem(struct ck *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void ck_problem(struct ck *k, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    ck_line(k, line);
    k->nproblems++;
}

/*
 * The geometry of one tensor's chunks: replicas (rank-local metadata lists a
 * replicated item once per rank) counted and set aside, the distinct boxes
 * proven to tile the tensor by fc_chunks_check_tiling().
 */
static int check_tensor(struct ck *k, const struct fc_dcp_entry *e)
{
    for (size_t c = 0; c < e->nchunks; c++) {
        if (e->chunks[c].storage.relative_path == NULL) {
            char dims[256];
            fc_dcp_fmt_dims(dims, sizeof(dims), e->chunks[c].offsets, e->ndim);
            ck_problem(k, "tensor '%s': chunk %zu (offsets %s) has no storage", e->fqn, c, dims);
        }
    }
    struct fc_box *boxes = fc_calloc(e->nchunks + 1, sizeof(*boxes));
    size_t *first_of = fc_calloc(e->nchunks + 1, sizeof(*first_of));
    size_t nrep = 0, m = 0;
    int rc = FC_OK;
    if (boxes == NULL || first_of == NULL) {
        rc = fc_error_set(FC_ENOMEM, "dcp metadata: out of memory checking '%s'", e->fqn);
        goto done;
    }
    for (size_t c = 0; c < e->nchunks; c++)
        boxes[c] = (struct fc_box){e->chunks[c].offsets, e->chunks[c].sizes};
    FC_TRY_GOTO(fc_chunks_replicas(e->ndim, boxes, e->nchunks, first_of, &nrep), rc, done);
    k->replicas += nrep;
    for (size_t c = 0; c < e->nchunks; c++) {
        if (first_of[c] == c)
            boxes[m++] = boxes[c];
    }
    rc = fc_chunks_check_tiling(e->ndim, e->size, boxes, m, NULL, e->fqn);
    if (rc == FC_ECORRUPT) {
        ck_problem(k, "%s", fc_error_last());
        rc = FC_OK;
    }
done:
    fc_free(first_of);
    fc_free(boxes);
    return rc;
}

int fc_dcp_check(const struct fc_dcp_meta *m, struct fc_buf *report, size_t *replicas)
{
    struct ck k;
    memset(&k, 0, sizeof(k));
    k.report = report;
    if (replicas != NULL)
        *replicas = 0;
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        if (e->kind == FC_DCP_BYTES) {
            if (e->storage.relative_path == NULL)
                ck_problem(&k, "bytes entry '%s' has no storage", e->fqn);
            continue;
        }
        FC_TRY(check_tensor(&k, e));
    }
    if (k.report != NULL && k.dropped > 0 && !k.oom) {
        if (fc_buf_printf(k.report, "... and %zu more lines\n", k.dropped) < 0)
            k.oom = 1;
    }
    if (replicas != NULL)
        *replicas = k.replicas;
    if (k.oom)
        return fc_error_set(FC_ENOMEM, "dcp metadata: out of memory writing the check report");
    if (k.nproblems > 0)
        return fc_error_set(FC_ECORRUPT, "dcp metadata: %zu coverage problem%s; first: %s",
                            k.nproblems, k.nproblems == 1 ? "" : "s", k.first);
    return FC_OK;
}
