/*
 * exec.h - run a write plan: read boxes, transform, write at planned offsets.
 *
 * The executor only moves bytes: every file name, item, offset and length
 * comes from the plan.  Rank files are written by `threads` workers (one file
 * at a time each), every item with pwrite at its planned offset, big tensors
 * in row slabs so data buffers never exceed max_memory in total (plus one
 * row when a single row is larger than a worker's share).  CRC-32 is computed
 * on the bytes as they pass.  Every file is fsynced before fc_exec_run()
 * returns FC_OK.
 */
#ifndef FC_EXEC_H
#define FC_EXEC_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_convert.h"
#include "fc_source.h"
#include "plan.h"
#include "xform.h"

struct fc_comm;

/* Where an item actually landed (differs from the plan only when compressing). */
struct fc_extent {
    uint64_t offset;
    uint64_t length;
};

struct fc_exec {
    const struct fc_plan *plan;
    const struct fc_source *src;
    const struct fc_xform_result *xr;
    const size_t *tensor_spec;       /* plan tensor index -> xr spec index */
    const struct fc_buf *value_blob; /* plan value index -> its torch.save blob */
    const char *dir;                 /* directory the rank files go to */
    uint64_t max_memory;
    int threads;
    fc_progress_fn progress;
    void *progress_ctx;
    int compress_level;             /* > 0: each item is one zstd frame (torch's stream.zstd/1) */
    struct fc_extent *extents;      /* per plan item, filled by fc_exec_run (may be NULL) */
    int engine;                     /* resolved fc_engine: FC_ENGINE_CPU or FC_ENGINE_CUDA */
    int device;                     /* CUDA device (LOCAL_RANK, default 0) */
    struct fc_comm *comm;           /* multi-process: files of other ranks go to their owner */
    const struct fc_buf *file_head; /* per plan file: bytes before its first item, or NULL */
    int raw_items; /* tensor items are the chunk's bare bytes (safetensors), not torch.save blobs */
};

/* Returns FC_OK, FC_EIO (with the file named), FC_ECORRUPT (source), FC_ENOMEM. */
int fc_exec_run(const struct fc_exec *ex);

#endif
