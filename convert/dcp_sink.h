/*
 * dcp_sink.h - the DCP sink: how a plan's items are stored in DCP rank files
 * (__{r}_0.distcp) and described by .metadata, as torch's
 * FileSystemWriter writes them.
 *
 * A tensor item is one torch.save archive of the chunk (fc_tsblob: a zip
 * head, the chunk's C-contiguous bytes, a tail carrying their CRC-32); a
 * value item is its torch.save blob, built before planning so the planner
 * knows its length.  With compress_level > 0 each item is one zstd frame
 * (torch's stream.zstd/1 transform): items then land at other offsets than
 * planned, which the executor records in extents and .metadata names.  The
 * safetensors sink (st_sink.h) is the other implementation of struct
 * fc_sink_ops.
 */
#ifndef FC_DCP_SINK_H
#define FC_DCP_SINK_H

#include <stddef.h>
#include <stdint.h>

#include "exec.h"
#include "fc_buf.h"
#include "fc_dtype.h"
#include "plan.h"
#include "xform.h"

/*
 * Item alignment (uncompressed DCPs).  A tensor item whose chunk holds at
 * least FC_DCP_ALIGN_MIN bytes starts at a multiple of FC_DCP_ITEM_ALIGN in
 * its rank file, and its zip head's "FB" pad puts the data/0 payload at
 * FC_DCP_ITEM_ALIGN from the item's start: the tensor bytes start on a 4 KiB
 * boundary of the file, so direct I/O writes and reads them in whole blocks
 * with no partial block shared with the item before.  torch takes the
 * payload's offset from the local header (any pad up to 65535 bytes is
 * legal), and .metadata names each item's offset and length, so the gaps
 * between items are never read.  Smaller chunks stay packed back to back:
 * direct I/O leaves requests under 256 KiB to the page cache anyway (--io
 * auto), and the pad and gap (up to 8 KiB an item) would grow a model of
 * thousands of small tensors (norms, biases) by more than its data; at
 * 256 KiB they cost at most 3%.  Both numbers are part of the output format,
 * not of the I/O code's tuning: output bytes do not change with it.
 */
#define FC_DCP_ITEM_ALIGN ((uint32_t)4096)
#define FC_DCP_ALIGN_MIN  ((uint64_t)256 << 10)

struct fc_dcp_sink {
    struct fc_buf *values; /* per plan value, in plan order: its torch.save blob */
    size_t nvalues;
    size_t cap;
    int compress_level; /* 0: plain items; 1..22: zstd level */
};

/* fc_dcp_sink_init() - room for up to `cap` values.  FC_OK or FC_ENOMEM. */
int fc_dcp_sink_init(struct fc_dcp_sink *sink, size_t cap, int compress_level);
void fc_dcp_sink_release(struct fc_dcp_sink *sink);

/*
 * fc_dcp_sink_add_value() - store the bytes of value spec s as the next plan
 * value (a DCP bytes item from the input is carried verbatim, other values
 * are pickled) and set *size to their length.  Returns FC_OK, FC_ENOMEM,
 * or the source's or pickler's error.
 */
int fc_dcp_sink_add_value(struct fc_dcp_sink *sink, const struct fc_xspec *s, uint64_t *size);

/* fc_plan_blob_size_fn of DCP tensor items (ctx: the sink): the torch.save blob's length. */
int fc_dcp_sink_item_size(void *ctx, fc_dtype dtype, const int64_t *sizes, int ndim,
                          uint64_t *nbytes_out);

/*
 * fc_dcp_sink_layout() - place the items of a plan built with
 * fc_dcp_sink_item_size: large tensor items 4 KiB-aligned (see
 * FC_DCP_ITEM_ALIGN) unless compressing (zstd frames land where they end).
 * Returns FC_OK or fc_plan_align_items()'s error.
 */
int fc_dcp_sink_layout(const struct fc_dcp_sink *sink, struct fc_plan *plan);

/* The executor's view of the sink (borrows it). */
struct fc_sink fc_dcp_sink_sink(const struct fc_dcp_sink *sink);

/*
 * fc_dcp_sink_write_metadata() - build .metadata from the plan and write it
 * atomically into dir: entries in xr's order (the plan's tensors and values
 * are in that order), each item where extents says it landed when
 * compressed (extents non-NULL), else where the plan put it; storage_meta
 * names `output`.  With rank_local, write instead one __{r}.metadata per
 * rank r (and no .metadata), as torch's dcp.save(use_collectives=False)
 * does: every entry, but of each tensor only the chunk rank r holds, stored
 * wherever the plan put it (an HSDP replica's chunk is in another rank's
 * file), so that rank r's dcp.load at the same mesh plans alone.  Returns
 * FC_OK, FC_EIO, FC_ENOMEM.
 */
int fc_dcp_sink_write_metadata(const struct fc_dcp_sink *sink, const struct fc_plan *plan,
                               const struct fc_xform_result *xr, const struct fc_extent *extents,
                               const char *dir, const char *output, int rank_local);

#endif
