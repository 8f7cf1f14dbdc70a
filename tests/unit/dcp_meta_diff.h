/*
 * dcp_meta_diff.h - compare two DCP metadata models field by field, for the
 * unit tests and the metadata fuzz target (round trips through the writer and
 * the reader).  Header-only: each test binary is one translation unit.
 *
 * fc_dcp_meta_diff() compares entries in order, chunks, storages, paths,
 * storage_meta and version.  Ignored: strides (never written),
 * checkpoint_id_was_path, and the counters of dropped/orphan data.  Returns 0
 * when equal, 1 when they differ (a description of the first difference is
 * appended to out, which may be NULL), FC_ENOMEM.
 */
#ifndef FC_DCP_META_DIFF_H
#define FC_DCP_META_DIFF_H

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "fc_buf.h"
#include "fc_dcp.h"
#include "fc_error.h"

static int diff_out(struct fc_buf *out, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int diff_out(struct fc_buf *out, const char *fmt, ...)
{
    char line[768];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    if (out != NULL)
        FC_TRY(fc_buf_printf(out, "%s\n", line));
    return 1;
}

static int opt_str_eq(const char *a, const char *b)
{
    if (a == NULL || b == NULL)
        return a == b;
    return strcmp(a, b) == 0;
}

static int storage_diff(struct fc_buf *out, const struct fc_dcp_storage *a,
                        const struct fc_dcp_storage *b, const char *fqn, size_t chunk)
{
    if (!opt_str_eq(a->relative_path, b->relative_path) || a->offset != b->offset ||
        a->length != b->length)
        return diff_out(
            out, "'%s' item %zu: storage %s@%" PRIu64 "+%" PRIu64 " vs %s@%" PRIu64 "+%" PRIu64,
            fqn, chunk, a->relative_path ? a->relative_path : "-", a->offset, a->length,
            b->relative_path ? b->relative_path : "-", b->offset, b->length);
    if (a->ntransforms != b->ntransforms)
        return diff_out(out, "'%s' item %zu: %zu vs %zu transforms", fqn, chunk, a->ntransforms,
                        b->ntransforms);
    for (size_t i = 0; i < a->ntransforms; i++)
        if (strcmp(a->transforms[i], b->transforms[i]) != 0)
            return diff_out(out, "'%s' item %zu: transform %zu differs", fqn, chunk, i);
    return 0;
}

static int entry_diff(struct fc_buf *out, const struct fc_dcp_entry *a,
                      const struct fc_dcp_entry *b)
{
    if (strcmp(a->fqn, b->fqn) != 0)
        return diff_out(out, "entry '%s' vs '%s'", a->fqn, b->fqn);
    if (a->kind != b->kind)
        return diff_out(out, "'%s': kind differs", a->fqn);
    if ((a->path == NULL) != (b->path == NULL) || a->path_len != b->path_len)
        return diff_out(out, "'%s': planner path presence/length differs", a->fqn);
    for (size_t i = 0; i < a->path_len; i++) {
        const struct fc_path_elem *x = &a->path[i], *y = &b->path[i];
        if (x->is_index != y->is_index || (x->is_index && x->index != y->index) ||
            (!x->is_index && strcmp(x->key, y->key) != 0))
            return diff_out(out, "'%s': planner path element %zu differs", a->fqn, i);
    }
    if (a->kind == FC_DCP_BYTES)
        return storage_diff(out, &a->storage, &b->storage, a->fqn, 0);
    if (a->dtype != b->dtype || a->ndim != b->ndim || a->requires_grad != b->requires_grad ||
        a->pin_memory != b->pin_memory || a->mem_format != b->mem_format)
        return diff_out(out, "'%s': dtype/ndim/properties differ", a->fqn);
    if (memcmp(a->size, b->size, (size_t)a->ndim * sizeof(int64_t)) != 0)
        return diff_out(out, "'%s': size differs", a->fqn);
    if (a->nchunks != b->nchunks)
        return diff_out(out, "'%s': %zu vs %zu chunks", a->fqn, a->nchunks, b->nchunks);
    for (size_t c = 0; c < a->nchunks; c++) {
        const struct fc_dcp_chunk *x = &a->chunks[c], *y = &b->chunks[c];
        if (a->ndim > 0 && (memcmp(x->offsets, y->offsets, (size_t)a->ndim * 8) != 0 ||
                            memcmp(x->sizes, y->sizes, (size_t)a->ndim * 8) != 0))
            return diff_out(out, "'%s': chunk %zu box differs", a->fqn, c);
        const int rc = storage_diff(out, &x->storage, &y->storage, a->fqn, c);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int fc_dcp_meta_diff(struct fc_buf *out, const struct fc_dcp_meta *a,
                            const struct fc_dcp_meta *b)
{
    if (a->nentries != b->nentries)
        return diff_out(out, "%zu vs %zu entries", a->nentries, b->nentries);
    for (size_t i = 0; i < a->nentries; i++) {
        const int rc = entry_diff(out, &a->entries[i], &b->entries[i]);
        if (rc != 0)
            return rc;
    }
    if (a->has_planner_data != b->has_planner_data)
        return diff_out(out, "planner_data presence differs");
    if (a->has_storage_meta != b->has_storage_meta ||
        !opt_str_eq(a->checkpoint_id, b->checkpoint_id) || !opt_str_eq(a->save_id, b->save_id))
        return diff_out(out, "storage_meta differs");
    if (a->nmodules != b->nmodules)
        return diff_out(out, "storage_meta.modules length differs");
    for (size_t i = 0; i < a->nmodules; i++)
        if (strcmp(a->modules[i], b->modules[i]) != 0)
            return diff_out(out, "storage_meta.modules[%zu] differs", i);
    if (!opt_str_eq(a->version, b->version))
        return diff_out(out, "version differs");
    return 0;
}

#endif
