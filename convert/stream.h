/*
 * stream.h - move one box of one output tensor through its op list (ops.h)
 * in row slabs: read the rows from the source (whole 4-D rows when a
 * conv2d-to-linear op needs them), run every op, and hand each slab's output
 * bytes to a callback.
 *
 * Every op is row-local, so any slab of output rows comes from the same rows
 * of the input (or from a resize's fill row); memory stays within `budget`
 * bytes of slab buffers (at least one row).  A box whose rows are bigger than
 * the budget and that only casts (a stacked expert bigger than --max-memory)
 * streams in runs of a later dim instead, within the budget.  Used by the DCP
 * executor and the exporters alike, on the CPU or the GPU.
 */
#ifndef FC_STREAM_H
#define FC_STREAM_H

#include <stddef.h>
#include <stdint.h>

#include "fc_source.h"
#include "xform.h"

#include "fc_kernels.h"

/*
 * Slab buffers, reused across calls; release with fc_slabs_release().  Set
 * `engine` to FC_ENGINE_CUDA (resolved, see fc_engine_resolve()) to run the
 * permute and cast kernels on the GPU: the slab is copied to the device, the
 * kernels run there on this struct's stream, and the result comes back.
 * Slabs that need no op never touch the GPU.  One struct per thread.
 */
struct fc_slabs {
    unsigned char *in, *mid, *out;
    size_t cap_in, cap_mid, cap_out;
    fc_engine engine;
    int device; /* CUDA device of this thread (LOCAL_RANK) */
    void *stream;
    struct fc_dev_buf d_in, d_mid, d_out;
};

void fc_slabs_release(struct fc_slabs *s);

/*
 * fc_slab_budget() - the slab budget of a worker whose share of --max-memory
 * is share bytes: the share less its read scratch and direct-I/O buffers,
 * which it sizes (fc_source_fit_read_scratch(), fc_dio_fit()) to take at most
 * half of it.  At full size they are 32 MiB: under a fixed size they would
 * leave slabs of one row at a time to a small share.  Call before the workers
 * start.
 */
uint64_t fc_slab_budget(uint64_t share);

/* Receives consecutive output bytes of the box, C order; returns FC_OK or an error. */
typedef int (*fc_stream_sink_fn)(void *ctx, const void *p, size_t n);

/*
 * fc_stream_box() - stream the box (off, size; spec->ndim dims; its trailing
 * dims may be partial only when the spec has no conv2d-to-linear op) of
 * output tensor `spec` (read from spec->src, else src) to sink, in
 * spec->dtype.  Mean-filled resizes need fc_stream_fill_means() first.
 * Returns FC_OK, the source's read errors, the sink's errors, FC_ENOMEM.
 */
int fc_stream_box(const struct fc_source *src, const struct fc_xspec *spec, const int64_t *off,
                  const int64_t *size, uint64_t budget, struct fc_slabs *slabs,
                  fc_stream_sink_fn sink, void *ctx);

/*
 * fc_stream_fill_means() - compute the fill row of every mean resize-rows op
 * of xr that grows its tensor: one pass over the rows entering the op (the
 * ops before it applied), summed per column in float64, divided once and
 * rounded once to the op's input dtype.  Memory: one row of sums plus the
 * slab buffers.  Returns FC_OK, the source's read errors, FC_ENOMEM.
 */
int fc_stream_fill_means(struct fc_xform_result *xr, uint64_t budget, struct fc_slabs *slabs);

#endif
