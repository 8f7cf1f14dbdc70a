/*
 * exec.h - run a write plan: read boxes, transform, write at planned offsets.
 *
 * The executor only moves bytes: every file name, item, offset and length
 * comes from the plan, and every byte that is not tensor data (file headers,
 * item framing, compression) comes from the output format's sink
 * (struct fc_sink: dcp_sink.h, st_sink.h).  `threads` workers write.  By
 * default every rank file is open at once and the workers take items in the
 * order their bytes sit in the inputs (a chunk and its --copy twins are read
 * once), each item with pwrite at its planned offset.  When items pass
 * through a per-file stream (compression), go to another process (NCCL),
 * or there are more than 512 files, the workers take whole files instead, one
 * file at a time each, appending.  Big tensors go in row slabs so data
 * buffers never exceed max_memory in total (plus one row when a single row is
 * larger than a worker's share).  CRC-32 is computed on the bytes as they
 * pass.  Every file is fsynced before fc_exec_run() returns FC_OK.
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

/*
 * Where bytes land: the rank file at `pos` (pwrite), or, in a multi-process
 * job, the worker process `peer` that owns the file.
 */
struct fc_out {
    int fd;
    const char *path;
    uint64_t pos;
    struct fc_comm *comm; /* non-NULL: the file belongs to worker `peer` */
    int peer;
    uint32_t file;
    struct fc_dio_writer *dio; /* non-NULL: writes go through it, direct to dfd (fc_io.h) */
    int dfd;
};

/* fc_out_write() - write n bytes at o->pos and advance it.  FC_OK or FC_EIO. */
int fc_out_write(struct fc_out *o, const void *p, size_t n);

/*
 * An output format's encoding of the plan's items, which the executor drives
 * (one interface, three implementations: dcp_sink.c, st_sink.c, tcp_pt.c).  A tensor
 * item is tensor_head's bytes, the chunk's C-contiguous data, then
 * tensor_tail's bytes.  Only a format that stores the data's CRC-32 pays for
 * it: the executor computes it for a sink with a tensor_tail, and only then.
 * When open_stream is non-NULL, every byte of a file passes through a
 * per-file stream that it creates (compression): such files are written front
 * to back, one item after the other, and each item ends with end_item.
 */
struct fc_sink_ops {
    /* Bytes of file `file` before its first item, or NULL for none. */
    const struct fc_buf *(*file_head)(const void *sink, size_t file);
    /* The stored bytes of plan value `value` (a DCP bytes item). */
    const struct fc_buf *(*value_bytes)(const void *sink, size_t value);
    /* Append the bytes before tensor item it's data to hdr; *item_len: the whole item's bytes. */
    int (*tensor_head)(const void *sink, const struct fc_plan *plan, const struct fc_plan_item *it,
                       struct fc_buf *hdr, uint64_t *item_len);
    /* Append the bytes after its data to out, given the data's CRC-32; NULL: none and no CRC. */
    int (*tensor_tail)(const void *sink, const struct fc_plan *plan, const struct fc_plan_item *it,
                       uint32_t data_crc, struct fc_buf *out);
    /* NULL, or a new stream for file `path` into *stream (freed by free_stream). */
    int (*open_stream)(const void *sink, const char *path, void **stream);
    int (*stream_put)(void *stream, struct fc_out *out, const void *p, size_t n);
    int (*end_item)(void *stream, struct fc_out *out);
    void (*free_stream)(void *stream);
    /*
     * For formats that keep each item's CRC-32 away from it (a torch.save
     * archive's central directory at the end of a file of many items), or
     * NULL: the data CRC-32 of plan item `item`, once its bytes are written
     * (from any worker thread; each item once), and, once every item of file
     * `file` is written, the file's other bytes (out is buffered, at any pos),
     * before the file is fsynced.  Such formats may leave gaps between items.
     */
    void (*item_crc)(const void *sink, size_t item, uint32_t data_crc);
    int (*finish_file)(const void *sink, const struct fc_plan *plan, size_t file,
                       struct fc_out *out);
};

struct fc_sink {
    const struct fc_sink_ops *ops;
    const void *ctx; /* the format's state: struct fc_dcp_sink, fc_st_sink or fc_tcp_sink */
};

struct fc_exec {
    const struct fc_plan *plan; /* plan->tensors[t].tag: the tensor's index in xr->specs */
    const struct fc_source *src;
    const struct fc_xform_result *xr;
    struct fc_sink sink;
    const char *dir; /* directory the rank files go to */
    uint64_t max_memory;
    int threads;
    fc_progress_fn progress;
    void *progress_ctx;
    struct fc_extent *extents; /* per plan item, filled by fc_exec_run (may be NULL) */
    int engine;                /* resolved fc_engine: FC_ENGINE_CPU or FC_ENGINE_CUDA */
    int device;                /* CUDA device (fc_local_rank()) */
    struct fc_comm *comm;      /* NCCL star: files of other ranks go to their owner */
    int part, nparts;          /* write only the files of share `part` of `nparts` (0: all) */
};

/* fc_exec_owns() - does this run write file fi (its rank file's share is ex->part)? */
int fc_exec_owns(const struct fc_exec *ex, size_t fi);

/* Returns FC_OK, FC_EIO (with the file named), FC_ECORRUPT (source), FC_ENOMEM. */
int fc_exec_run(const struct fc_exec *ex);

#endif
