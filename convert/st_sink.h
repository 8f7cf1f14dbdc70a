/*
 * st_sink.h - the safetensors sink: the same plan as a DCP, written as one
 * safetensors file per rank that torch's HuggingFaceStorageReader loads
 * (torch >= 2.8; the layout of HuggingFaceStorageWriter(save_distributed=True)).
 *
 * Only the item encoding and the metadata differ from DCP (dcp_sink.h; both
 * implement exec.h's struct fc_sink_ops): an item is the
 * chunk's bare C-contiguous bytes, and instead of .metadata every file
 * starts with a safetensors header listing its chunks with their global
 * offsets (__metadata__.DCP_SHARDING_INFO).  Files are named
 * shard-{rank+1:05d}-model-00001-of-00001.safetensors, as torch names them.
 * The header is padded so the data starts on a page boundary; within a file
 * chunks go by descending element size so each starts aligned to it, and
 * otherwise in the input's order.  Not in sorted-key order, although
 * dcp.load reads keys sorted: a file read front to back gets huge-page
 * mapped page-cache folios, which loaded 2x slower on the project's VM
 * (README, "Performance").
 */
#ifndef FC_ST_SINK_H
#define FC_ST_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "fc_buf.h"
#include "fc_dtype.h"
#include "plan.h"

/* Data in every file starts at a multiple of this. */
#define FC_ST_SINK_ALIGN 4096

struct fc_st_sink {
    struct fc_buf *heads; /* per plan file: its header bytes */
    size_t nfiles;
};

/*
 * fc_st_sink_check_dtype() - FC_OK when torch's reader can load `dtype`
 * from safetensors, else FC_EFORMAT naming the tensor and --format dcp.
 */
int fc_st_sink_check_dtype(const char *key, fc_dtype dtype);

/* fc_plan_blob_size_fn for bare chunk bytes: numel * element size. */
int fc_st_sink_item_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                         uint64_t *nbytes_out);

/*
 * fc_st_sink_layout() - lay plan out as safetensors files (fc_plan_relayout)
 * and build every file's header into sink->heads.  The plan must hold no
 * values and no aliases.  Returns FC_OK, FC_EINVAL, FC_EFORMAT, FC_ENOMEM.
 */
int fc_st_sink_layout(struct fc_st_sink *sink, struct fc_plan *plan);
void fc_st_sink_release(struct fc_st_sink *sink);

/* The executor's view of the sink (borrows it; after fc_st_sink_layout()). */
struct fc_sink fc_st_sink_sink(const struct fc_st_sink *sink);

/*
 * fc_sink_bare_item() - the tensor_head of formats whose items are the chunk's
 * bare bytes (safetensors, torch_checkpointing's .pt storages): nothing before
 * them; *item_len is the planned length.
 */
int fc_sink_bare_item(const void *ctx, const struct fc_plan *plan, const struct fc_plan_item *it,
                      struct fc_buf *hdr, uint64_t *item_len);

#endif
