/*
 * fc_dcp_internal.h - what the files of the DCP metadata module share;
 * nothing outside them includes it.
 *
 * The module is cut in four around this header: the model and its builders
 * (fc_dcp.c), the .metadata pickle writer (fc_dcp_write.c), its reader
 * (fc_dcp_read.c) and the coverage check (fc_dcp_check.c).
 */
#ifndef FC_DCP_INTERNAL_H
#define FC_DCP_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "fc_dcp.h"

#define MOD_MD     "torch.distributed.checkpoint.metadata"
#define MOD_FS     "torch.distributed.checkpoint.filesystem"
#define MOD_LEGACY "torch.distributed._shard.sharded_tensor.metadata"

/* Python's pickler batches SETITEMS/APPENDS by 1000; do the same. */
#define BATCH 1000

/* At most this many report lines from fc_dcp_check(). */
#define CHECK_MAX_LINES 100

/* A block of the dims store: chunk offsets and sizes, appended and never moved. */
struct fc_dcp_dims {
    struct fc_dcp_dims *next;
    size_t used, cap;
    int64_t v[];
};

#define DIMS_BLOCK ((size_t)1 << 16) /* int64 values per block (512 KiB) */

/* The model's builders without the public checks (fc_dcp.c), for the reader. */
int fc_dcp_add_entry(struct fc_dcp_meta *m, const char *fqn, size_t fqn_len, enum fc_dcp_kind kind,
                     size_t *index_out);
int fc_dcp_bad_relative_path(const char *p);
int fc_dcp_entry_add_chunk(struct fc_dcp_meta *m, struct fc_dcp_entry *e, const int64_t *offsets,
                           const int64_t *sizes, size_t *chunk_out);
int fc_dcp_reserve_chunks(struct fc_dcp_entry *e, size_t n);
int fc_dcp_set_str(char **dst, const char *src);

/* "[a, b, c]" into buf (fc_dcp_read.c), for messages of the reader and the check. */
void fc_dcp_fmt_dims(char *buf, size_t size, const int64_t *v, int n);

#endif
