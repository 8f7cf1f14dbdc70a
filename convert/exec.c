/*
 * exec.c - the streaming executor (see exec.h): worker threads, the two
 * write orders (source order across every file, or file by file), slab
 * streaming of tensor data into the output format's sink, progress, fsync.
 * It knows no output format: item framing, file headers and compression are
 * the sink's (dcp_sink.c, st_sink.c).
 */
#include "exec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_sort.h"
#include "fc_zip.h"
#include "comm.h"
#include "stream.h"

/* Items written from one read at most (a tensor and its copies: BAGEL has 2 to 4). */
#define FC_EXEC_GROUP_MAX 16

struct fc_exec_shared {
    const struct fc_exec *ex;
    atomic_size_t next_file;
    /* Source-order mode: every rank file open at once, items taken in input order. */
    int *fds;  /* per file, or NULL in file-by-file mode */
    int *dfds; /* their O_DIRECT twins (fc_dio_open()), -1 where buffered */
    char **paths;
    size_t *order;     /* this share's item indices sorted by where their bytes come from */
    size_t nitems;     /* in order */
    size_t *group_end; /* order[i .. group_end[i]) hold the same bytes (0: inside a group) */
    atomic_size_t next_item;
    atomic_uint_fast64_t bytes_done;
    atomic_int workers_left;
    pthread_mutex_t lock;
    int rc;         /* first failure */
    char msg[1024]; /* its message (fc_error is per thread) */
    uint64_t worker_budget;
};

int fc_out_write(struct fc_out *o, const void *p, size_t n)
{
    if (o->comm != NULL)
        FC_TRY(fc_comm_write(o->comm, o->peer, o->file, o->pos, p, n));
    else if (o->dio != NULL)
        FC_TRY(fc_dio_put(o->dio, o->fd, o->dfd, o->path, o->pos, p, n));
    else
        FC_TRY(fc_pwrite_full(o->fd, p, n, o->pos, o->path));
    o->pos += n;
    return FC_OK;
}

/*
 * n zero bytes: the gap before an aligned item (fc_plan_align_items()).  A file
 * written front to back writes it rather than skipping it, so that its bytes stay
 * one run of whole blocks for the direct writer (and for a remote owner).
 */
static int fc_out_zeros(struct fc_out *o, uint64_t n)
{
    static const unsigned char zeros[4096];
    while (n > 0) {
        const size_t k = n < sizeof(zeros) ? (size_t)n : sizeof(zeros);
        FC_TRY(fc_out_write(o, zeros, k));
        n -= k;
    }
    return FC_OK;
}

/*
 * One destination of an item's bytes: the file, and the sink's per-file
 * stream when it has one (then bytes pass through it and the file is
 * appended to front to back).  Without a stream, appending in file order
 * lands every byte exactly at its planned offset (checked per item).
 */
struct fc_dest {
    struct fc_out out;
    void *stream;
};

static int fc_dest_put(const struct fc_sink *sink, struct fc_dest *d, const void *p, size_t n)
{
    if (d->stream != NULL)
        return sink->ops->stream_put(d->stream, &d->out, p, n);
    return fc_out_write(&d->out, p, n);
}

struct fc_worker {
    struct fc_exec_shared *sh;
    struct fc_slabs slabs;
    struct fc_buf hdr;
    struct fc_dio_writer dio; /* the first destination's writes, when it takes O_DIRECT */
};

/*
 * Slab sink of tensor items holding the same bytes: CRC once (when the sink
 * stores one), write to each, count progress.
 */
struct fc_item_sink {
    struct fc_dest *const *d;
    size_t nd;
    struct fc_exec_shared *sh;
    int want_crc;
    uint32_t crc;
    uint64_t nbytes;
};

static int fc_item_sink_put(void *ctx, const void *p, size_t n)
{
    struct fc_item_sink *is = ctx;
    if (fc_cancel_requested())
        return fc_error_set(FC_ERROR, "%s: interrupted", is->d[0]->out.path);
    if (is->want_crc)
        is->crc = fc_crc32(is->crc, p, n);
    for (size_t i = 0; i < is->nd; i++)
        FC_TRY(fc_dest_put(&is->sh->ex->sink, is->d[i], p, n));
    is->nbytes += n;
    atomic_fetch_add(&is->sh->bytes_done, n * is->nd);
    return FC_OK;
}

/* The sink's bytes before file fi's first item, or NULL. */
static const struct fc_buf *fc_file_head(const struct fc_sink *sink, size_t fi)
{
    return sink->ops->file_head != NULL ? sink->ops->file_head(sink->ctx, fi) : NULL;
}

static int fc_dests_put(const struct fc_sink *sink, struct fc_dest *const *d, size_t nd,
                        const struct fc_buf *b)
{
    for (size_t i = 0; i < nd && b->len > 0; i++)
        FC_TRY(fc_dest_put(sink, d[i], b->data, b->len));
    return FC_OK;
}

/*
 * Write tensor chunk items that hold the same bytes (one item, or a chunk and
 * its --copy twins, all with the same box, dtype and ops): the sink's head,
 * data slabs read once and written to every destination (CRC on the fly if
 * the sink stores one), the sink's tail.
 */
static int fc_write_tensor_items(struct fc_worker *w, struct fc_dest *const *d,
                                 const struct fc_plan_item *const *its, size_t n)
{
    const struct fc_exec *ex = w->sh->ex;
    const struct fc_sink *sink = &ex->sink;
    const struct fc_plan_item *it = its[0];
    const struct fc_plan_chunk *ch = &ex->plan->chunks[it->chunk];
    const struct fc_plan_tensor *pt = &ex->plan->tensors[it->index];
    const struct fc_xspec *spec = &ex->xr->specs[pt->tag];
    const int want_crc = sink->ops->tensor_tail != NULL || sink->ops->item_crc != NULL;
    struct fc_item_sink is = {d, n, w->sh, want_crc, 0, 0};
    uint64_t item_len = 0;
    fc_buf_clear(&w->hdr);
    FC_TRY(sink->ops->tensor_head(sink->ctx, ex->plan, it, &w->hdr, &item_len));
    for (size_t i = 0; i < n; i++)
        if (item_len != its[i]->length)
            return fc_error_set(
                FC_ERROR, "%s: internal error: item of '%s' is %" PRIu64 " bytes, planned %" PRIu64,
                d[i]->out.path, pt->key, item_len, its[i]->length);
    const uint64_t head_len = w->hdr.len;
    FC_TRY(fc_dests_put(sink, d, n, &w->hdr));
    FC_TRY(fc_stream_box(ex->src, spec, ch->box.offsets, ch->box.sizes, w->sh->worker_budget,
                         &w->slabs, fc_item_sink_put, &is));
    fc_buf_clear(&w->hdr);
    if (sink->ops->tensor_tail != NULL)
        FC_TRY(sink->ops->tensor_tail(sink->ctx, ex->plan, it, is.crc, &w->hdr));
    for (size_t i = 0; sink->ops->item_crc != NULL && i < n; i++)
        sink->ops->item_crc(sink->ctx, (size_t)(its[i] - ex->plan->items), is.crc);
    if (head_len + is.nbytes + w->hdr.len != item_len)
        return fc_error_set(FC_ERROR,
                            "%s: internal error: wrote %" PRIu64 " data bytes of '%s', "
                            "planned %" PRIu64,
                            d[0]->out.path, is.nbytes, pt->key, item_len - head_len - w->hdr.len);
    return fc_dests_put(sink, d, n, &w->hdr);
}

static int fc_write_tensor_item(struct fc_worker *w, struct fc_dest *d,
                                const struct fc_plan_item *it)
{
    return fc_write_tensor_items(w, &d, &it, 1);
}

/*
 * Items in the order their bytes sit in the inputs: values first, then
 * tensors by input, source entry and chunk position, so that a chunk and its
 * --copy twins come next to each other.  Reading the input front to back is
 * what makes a copy fast.
 */
static const struct fc_xspec *fc_item_spec(const struct fc_exec *ex, const struct fc_plan_item *it)
{
    return &ex->xr->specs[ex->plan->tensors[it->index].tag];
}

static int fc_cmp_source_order(const void *ctx, size_t a, size_t b)
{
    const struct fc_exec *ex = ctx;
    const struct fc_plan_item *x = &ex->plan->items[a];
    const struct fc_plan_item *y = &ex->plan->items[b];
    if (x->kind != y->kind)
        return x->kind == FC_ITEM_BYTES ? -1 : 1;
    if (x->kind == FC_ITEM_BYTES)
        return x->index < y->index ? -1 : x->index > y->index;
    const struct fc_xspec *sx = fc_item_spec(ex, x), *sy = fc_item_spec(ex, y);
    if (sx->input != sy->input)
        return sx->input < sy->input ? -1 : 1;
    if (sx->entry != sy->entry)
        return sx->entry < sy->entry ? -1 : 1;
    const size_t cx = x->chunk - ex->plan->tensors[x->index].first_chunk;
    const size_t cy = y->chunk - ex->plan->tensors[y->index].first_chunk;
    if (cx != cy)
        return cx < cy ? -1 : 1;
    return x->index < y->index ? -1 : x->index > y->index;
}

/* Do items x and y store the same bytes (same entry, ops, dtype and box)? */
static int fc_same_bytes(const struct fc_exec *ex, const struct fc_plan_item *x,
                         const struct fc_plan_item *y)
{
    if (x->kind != FC_ITEM_TENSOR || y->kind != FC_ITEM_TENSOR)
        return 0;
    const struct fc_xspec *sx = fc_item_spec(ex, x), *sy = fc_item_spec(ex, y);
    const struct fc_plan_tensor *tx = &ex->plan->tensors[x->index];
    const struct fc_plan_chunk *cx = &ex->plan->chunks[x->chunk], *cy = &ex->plan->chunks[y->chunk];
    const size_t dims = sizeof(int64_t) * (size_t)tx->ndim;
    if (sx->src != sy->src || sx->entry != sy->entry || sx->dtype != sy->dtype ||
        sx->ndim != sy->ndim || sx->nops != sy->nops ||
        memcmp(cx->box.offsets, cy->box.offsets, dims) != 0 ||
        memcmp(cx->box.sizes, cy->box.sizes, dims) != 0)
        return 0;
    for (size_t k = 0; k < sx->nops; k++)
        if (!fc_op_same(&sx->ops[k], &sy->ops[k]))
            return 0;
    return 1;
}

int fc_exec_owns(const struct fc_exec *ex, size_t fi)
{
    return ex->nparts <= 1 || ex->plan->files[fi].rank % ex->nparts == ex->part;
}

/* Open every rank file and order the items, or leave sh->order NULL (file-by-file mode). */
static int fc_source_order_setup(struct fc_exec_shared *sh)
{
    const struct fc_exec *ex = sh->ex;
    const size_t nf = ex->plan->nfiles;
    /* A sink's stream (compression) appends per file, remote files go through their owner,
     * and very wide meshes would need too many descriptors: those run file by file. */
    if (ex->sink.ops->open_stream != NULL || ex->comm != NULL || nf > 512)
        return FC_OK;
    sh->fds = fc_calloc(nf, sizeof(*sh->fds));
    sh->dfds = fc_calloc(nf, sizeof(*sh->dfds));
    sh->paths = fc_calloc(nf, sizeof(*sh->paths));
    sh->order = fc_calloc(ex->plan->nitems + 1, sizeof(*sh->order));
    if (sh->fds == NULL || sh->dfds == NULL || sh->paths == NULL || sh->order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t f = 0; f < nf; f++)
        sh->fds[f] = sh->dfds[f] = -1;
    for (size_t f = 0; f < nf; f++) {
        if (!fc_exec_owns(ex, f))
            continue; /* another share's file */
        sh->paths[f] = fc_path_join(ex->dir, ex->plan->files[f].name);
        if (sh->paths[f] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_file_create(sh->paths[f], &sh->fds[f]));
        sh->dfds[f] = fc_dio_open(sh->fds[f], sh->paths[f]);
        const struct fc_buf *head = fc_file_head(&ex->sink, f);
        if (head != NULL)
            FC_TRY(fc_pwrite_full(sh->fds[f], head->data, head->len, 0, sh->paths[f]));
    }
    /* Only this share's items: it reads just the input bytes its files hold. */
    for (size_t i = 0; i < ex->plan->nitems; i++)
        if (fc_exec_owns(ex, (size_t)ex->plan->items[i].rank))
            sh->order[sh->nitems++] = i;
    FC_TRY(fc_sort_idx(sh->order, sh->nitems, fc_cmp_source_order, ex));
    /* Runs of items with the same bytes are written together (read once). */
    sh->group_end = fc_calloc(ex->plan->nitems + 1, sizeof(*sh->group_end));
    if (sh->group_end == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < sh->nitems;) {
        size_t j = i + 1;
        while (j < sh->nitems && j - i < FC_EXEC_GROUP_MAX &&
               fc_same_bytes(ex, &ex->plan->items[sh->order[i]], &ex->plan->items[sh->order[j]]))
            j++;
        sh->group_end[i] = j;
        i = j;
    }
    return FC_OK;
}

/* The sink's bytes of file fi around its items (finish_file), written buffered. */
static int fc_finish_file(const struct fc_exec *ex, size_t fi, int fd, const char *path)
{
    if (ex->sink.ops->finish_file == NULL)
        return FC_OK;
    struct fc_out out = {fd, path, 0, NULL, 0, (uint32_t)fi, NULL, -1};
    return ex->sink.ops->finish_file(ex->sink.ctx, ex->plan, fi, &out);
}

/* Source-order mode: sync and close every file; the first failure wins. */
static int fc_source_order_finish(struct fc_exec_shared *sh, int rc)
{
    for (size_t f = 0; sh->fds != NULL && f < sh->ex->plan->nfiles; f++) {
        if (sh->dfds != NULL && sh->dfds[f] >= 0)
            close(sh->dfds[f]); /* its writes are done; fsync below covers them */
        if (sh->fds[f] < 0)
            continue;
        /* fsyncs can take half a run on a slow disk: a signal between them still stops it */
        if (rc == FC_OK && fc_cancel_requested())
            rc = fc_error_set(FC_ERROR, "%s: interrupted", sh->paths[f]);
        if (rc == FC_OK)
            rc = fc_finish_file(sh->ex, f, sh->fds[f], sh->paths[f]);
        if (rc == FC_OK && fsync(sh->fds[f]) != 0)
            rc = fc_error_set(FC_EIO, "%s: fsync failed: %s", sh->paths[f], strerror(errno));
        if (close(sh->fds[f]) != 0 && rc == FC_OK)
            rc = fc_error_set(FC_EIO, "%s: close failed: %s", sh->paths[f], strerror(errno));
    }
    for (size_t f = 0; sh->paths != NULL && f < sh->ex->plan->nfiles; f++)
        fc_free(sh->paths[f]);
    fc_free(sh->paths);
    fc_free(sh->fds);
    fc_free(sh->dfds);
    fc_free(sh->order);
    fc_free(sh->group_end);
    sh->group_end = NULL;
    sh->paths = NULL;
    sh->fds = NULL;
    sh->dfds = NULL;
    sh->order = NULL;
    return rc;
}

/* File-by-file mode: write file fi's items in file order; *d is its open destination. */
static int fc_write_file_items(struct fc_worker *w, size_t fi, struct fc_dest *d)
{
    const struct fc_exec *ex = w->sh->ex;
    const struct fc_plan_file *f = &ex->plan->files[fi];
    const struct fc_buf *head = fc_file_head(&ex->sink, fi);
    if (head != NULL)
        FC_TRY(fc_dest_put(&ex->sink, d, head->data, head->len));
    for (size_t i = 0; i < f->nitems; i++) {
        const size_t item = f->first_item + i;
        const struct fc_plan_item *it = &ex->plan->items[item];
        if (ex->sink.ops->finish_file != NULL)
            d->out.pos = it->offset; /* its format leaves gaps, filled by finish_file */
        else if (d->stream == NULL && d->out.pos < it->offset)
            FC_TRY(fc_out_zeros(&d->out, it->offset - d->out.pos)); /* an aligned item's gap */
        const uint64_t start = d->out.pos;
        if (d->stream == NULL && start != it->offset)
            return fc_error_set(FC_ERROR,
                                "%s: internal error: item %zu at %" PRIu64 ", planned %" PRIu64,
                                d->out.path, item, start, it->offset);
        if (it->kind == FC_ITEM_BYTES) {
            const struct fc_buf *b = ex->sink.ops->value_bytes(ex->sink.ctx, it->index);
            FC_TRY(fc_dest_put(&ex->sink, d, b->data, b->len));
            atomic_fetch_add(&w->sh->bytes_done, b->len);
        } else {
            FC_TRY(fc_write_tensor_item(w, d, it));
        }
        if (d->stream != NULL)
            FC_TRY(ex->sink.ops->end_item(d->stream, &d->out));
        if (ex->extents != NULL)
            ex->extents[item] = (struct fc_extent){start, d->out.pos - start};
        /* Stop early when another worker failed: the output is discarded anyway. */
        if (w->sh->rc < 0)
            break;
    }
    return FC_OK;
}

/* File-by-file mode: create file fi (here or at its owner), write it, make it durable. */
static int fc_write_file(struct fc_worker *w, size_t fi)
{
    const struct fc_exec *ex = w->sh->ex;
    const struct fc_plan_file *f = &ex->plan->files[fi];
    char *path = fc_path_join(ex->dir, f->name);
    struct fc_dest d = {{-1, path, 0, NULL, 0, (uint32_t)fi, NULL, -1}, NULL};
    const int owner = fc_comm_owner(ex->comm, f->rank);
    int locked = 0;
    int rc = FC_OK;
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (owner != 0) {
        /* The worker owning this rank file writes it; one file at a time per worker. */
        d.out.comm = ex->comm;
        d.out.peer = owner;
        pthread_mutex_lock(&ex->comm->locks[owner]);
        locked = 1;
        FC_TRY_GOTO(fc_comm_open(ex->comm, owner, d.out.file, path), rc, done);
    } else {
        FC_TRY_GOTO(fc_file_create(path, &d.out.fd), rc, done);
        d.out.dfd = fc_dio_open(d.out.fd, path);
        d.out.dio = d.out.dfd >= 0 ? &w->dio : NULL;
    }
    if (ex->sink.ops->open_stream != NULL)
        FC_TRY_GOTO(ex->sink.ops->open_stream(ex->sink.ctx, path, &d.stream), rc, done);
    FC_TRY_GOTO(fc_write_file_items(w, fi, &d), rc, done);
    if (d.out.dio != NULL)
        FC_TRY_GOTO(fc_dio_flush(d.out.dio), rc, done);
    if (ex->sink.ops->finish_file != NULL && d.out.comm != NULL) {
        rc = fc_error_set(FC_EINVAL, "%s: this format cannot go through another process", path);
        goto done;
    }
    if (d.out.comm == NULL)
        FC_TRY_GOTO(fc_finish_file(ex, fi, d.out.fd, path), rc, done);
    if (d.out.comm != NULL) {
        FC_TRY_GOTO(fc_comm_close(d.out.comm, d.out.peer, d.out.file), rc, done);
    } else if (fc_cancel_requested()) {
        rc = fc_error_set(FC_ERROR, "%s: interrupted", path);
        goto done;
    } else if (fsync(d.out.fd) != 0) {
        rc = fc_error_set(FC_EIO, "%s: fsync failed: %s", path, strerror(errno));
        goto done;
    }
done:
    if (locked)
        pthread_mutex_unlock(&ex->comm->locks[owner]);
    if (d.out.dio != NULL && rc < 0)
        (void)fc_dio_flush(d.out.dio); /* the output is discarded: only end the run */
    if (d.out.dfd >= 0)
        close(d.out.dfd);
    if (d.out.fd >= 0 && close(d.out.fd) != 0 && rc == FC_OK)
        rc = fc_error_set(FC_EIO, "%s: close failed: %s", path, strerror(errno));
    if (d.stream != NULL)
        ex->sink.ops->free_stream(d.stream);
    fc_free(path);
    return rc;
}

/* Source-order mode: the items order[i .. group_end[i]), each at its planned offset. */
static int fc_write_items_at(struct fc_worker *w, size_t i)
{
    struct fc_exec_shared *sh = w->sh;
    const struct fc_exec *ex = sh->ex;
    const size_t n = sh->group_end[i] - i;
    struct fc_dest d[FC_EXEC_GROUP_MAX];
    struct fc_dest *dp[FC_EXEC_GROUP_MAX];
    const struct fc_plan_item *its[FC_EXEC_GROUP_MAX];
    for (size_t g = 0; g < n; g++) {
        its[g] = &ex->plan->items[sh->order[i + g]];
        const int r = its[g]->rank;
        d[g] = (struct fc_dest){
            {sh->fds[r], sh->paths[r], its[g]->offset, NULL, 0, 0, NULL, sh->dfds[r]}, NULL};
        dp[g] = &d[g];
    }
    /* The first destination through the worker's direct-I/O writer, the copies buffered. */
    d[0].out.dio = d[0].out.dfd >= 0 ? &w->dio : NULL;
    int rc;
    if (its[0]->kind == FC_ITEM_BYTES) {
        const struct fc_buf *b = ex->sink.ops->value_bytes(ex->sink.ctx, its[0]->index);
        rc = fc_dest_put(&ex->sink, &d[0], b->data, b->len);
        atomic_fetch_add(&sh->bytes_done, b->len);
    } else {
        rc = fc_write_tensor_items(w, dp, its, n);
    }
    const int frc = fc_dio_flush(&w->dio);
    return rc < 0 ? rc : frc;
}

static void *fc_worker_main(void *arg)
{
    struct fc_worker *w = arg;
    struct fc_exec_shared *sh = w->sh;
    for (;;) {
        int rc;
        if (sh->order != NULL) {
            const size_t i = atomic_fetch_add(&sh->next_item, 1);
            if (i >= sh->nitems || sh->rc < 0)
                break;
            if (sh->group_end[i] == 0)
                continue; /* inside a group its first item's worker writes */
            rc = fc_write_items_at(w, i);
        } else {
            const size_t fi = atomic_fetch_add(&sh->next_file, 1);
            if (fi >= sh->ex->plan->nfiles || sh->rc < 0)
                break;
            rc = fc_exec_owns(sh->ex, fi) ? fc_write_file(w, fi) : FC_OK;
        }
        if (rc < 0) {
            pthread_mutex_lock(&sh->lock);
            if (sh->rc == FC_OK) {
                sh->rc = rc;
                snprintf(sh->msg, sizeof(sh->msg), "%s", fc_error_last());
            }
            pthread_mutex_unlock(&sh->lock);
            break;
        }
    }
    atomic_fetch_sub(&sh->workers_left, 1);
    return NULL;
}

int fc_exec_run(const struct fc_exec *ex)
{
    struct fc_exec_shared sh;
    int nthreads = ex->threads < 1 ? 1 : ex->threads;
    if ((size_t)nthreads > ex->plan->nfiles)
        nthreads = ex->plan->nfiles == 0 ? 1 : (int)ex->plan->nfiles;
    memset(&sh, 0, sizeof(sh));
    sh.ex = ex;
    atomic_init(&sh.next_file, 0);
    atomic_init(&sh.next_item, 0);
    atomic_init(&sh.bytes_done, 0);
    atomic_init(&sh.workers_left, nthreads);
    pthread_mutex_init(&sh.lock, NULL);
    sh.worker_budget = fc_slab_budget(ex->max_memory / (uint64_t)nthreads);
    struct fc_worker *ws = fc_calloc((size_t)nthreads, sizeof(*ws));
    pthread_t *tids = fc_calloc((size_t)nthreads, sizeof(*tids));
    int started = 0, rc = FC_OK;
    if (ws == NULL || tids == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_source_order_setup(&sh), rc, done);
    for (int i = 0; i < nthreads; i++) {
        ws[i].sh = &sh;
        ws[i].slabs.engine = (fc_engine)ex->engine;
        ws[i].slabs.device = ex->device;
        ws[i].dio = (struct fc_dio_writer)FC_DIO_WRITER_INIT;
        fc_buf_init(&ws[i].hdr, (size_t)1 << 30);
        if (pthread_create(&tids[i], NULL, fc_worker_main, &ws[i]) != 0) {
            rc = fc_error_set(FC_ERROR, "cannot start a worker thread");
            atomic_fetch_sub(&sh.workers_left, nthreads - i);
            break;
        }
        started++;
    }
    uint64_t total = 0;
    for (size_t i = 0; i < ex->plan->nitems; i++)
        if (fc_exec_owns(ex, (size_t)ex->plan->items[i].rank))
            total += ex->plan->items[i].length;
    while (atomic_load(&sh.workers_left) > 0) {
        const struct timespec ts = {0, 200 * 1000 * 1000};
        if (ex->progress != NULL)
            ex->progress(ex->progress_ctx, atomic_load(&sh.bytes_done), total);
        nanosleep(&ts, NULL);
    }
    for (int i = 0; i < started; i++)
        pthread_join(tids[i], NULL);
    if (rc == FC_OK && sh.rc < 0)
        rc = fc_error_set(sh.rc, "%s", sh.msg);
    rc = fc_source_order_finish(&sh, rc);
    if (rc == FC_OK && ex->progress != NULL)
        ex->progress(ex->progress_ctx, total, total);
done:
    if (sh.fds != NULL && rc < 0)
        rc = fc_source_order_finish(&sh, rc);
    for (int i = 0; ws != NULL && i < nthreads; i++) {
        fc_slabs_release(&ws[i].slabs);
        fc_buf_release(&ws[i].hdr);
        fc_dio_release(&ws[i].dio);
    }
    fc_free(ws);
    fc_free(tids);
    pthread_mutex_destroy(&sh.lock);
    return rc;
}
