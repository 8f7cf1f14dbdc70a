/*
 * exec.c - the streaming executor (see exec.h).
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
#include "fc_torchsave.h"
#include "fc_zip.h"
#include "comm.h"
#include "stream.h"

#include <zstd.h>

/* Items written from one read at most (a tensor and its copies: BAGEL has 2 to 4). */
#define FC_EXEC_GROUP_MAX 16

struct fc_exec_shared {
    const struct fc_exec *ex;
    atomic_size_t next_file;
    /* Source-order mode: every rank file open at once, items taken in input order. */
    int *fds; /* per file, or NULL in file-by-file mode */
    char **paths;
    size_t *order;     /* item indices sorted by where their bytes come from */
    size_t *group_end; /* order[i .. group_end[i]) hold the same bytes (0: inside a group) */
    atomic_size_t next_item;
    atomic_uint_fast64_t bytes_done;
    atomic_int workers_left;
    pthread_mutex_t lock;
    int rc;         /* first failure */
    char msg[1024]; /* its message (fc_error is per thread) */
    uint64_t worker_budget;
};

/*
 * Where an item's bytes go: appended to the rank file at `pos`, through a zstd
 * stream when compressing.  Uncompressed, appending in file order lands every
 * byte exactly at its planned offset (checked per item).
 */
struct fc_sink {
    int fd;
    const char *path;
    uint64_t pos;
    ZSTD_CStream *zs; /* NULL: no compression */
    unsigned char *zbuf;
    size_t zcap;
    struct fc_comm *comm; /* non-NULL: the file belongs to worker `peer` */
    int peer;
    uint32_t file;
};

/* Bytes at the file's current end: written here, or sent to the worker that owns the file. */
static int fc_sink_emit(struct fc_sink *k, const void *p, size_t n)
{
    if (k->comm != NULL)
        return fc_comm_write(k->comm, k->peer, k->file, k->pos, p, n);
    return fc_pwrite_full(k->fd, p, n, k->pos, k->path);
}

static int fc_sink_put(struct fc_sink *k, const void *p, size_t n)
{
    if (k->zs == NULL) {
        FC_TRY(fc_sink_emit(k, p, n));
        k->pos += n;
        return FC_OK;
    }
    ZSTD_inBuffer in = {p, n, 0};
    while (in.pos < in.size) {
        ZSTD_outBuffer out = {k->zbuf, k->zcap, 0};
        const size_t r = ZSTD_compressStream2(k->zs, &out, &in, ZSTD_e_continue);
        if (ZSTD_isError(r))
            return fc_error_set(FC_ERROR, "%s: zstd: %s", k->path, ZSTD_getErrorName(r));
        FC_TRY(fc_sink_emit(k, k->zbuf, out.pos));
        k->pos += out.pos;
    }
    return FC_OK;
}

/* End the item: close its zstd frame (one frame per item, as torch writes them). */
static int fc_sink_end_item(struct fc_sink *k)
{
    if (k->zs == NULL)
        return FC_OK;
    for (;;) {
        ZSTD_inBuffer in = {NULL, 0, 0};
        ZSTD_outBuffer out = {k->zbuf, k->zcap, 0};
        const size_t r = ZSTD_compressStream2(k->zs, &out, &in, ZSTD_e_end);
        if (ZSTD_isError(r))
            return fc_error_set(FC_ERROR, "%s: zstd: %s", k->path, ZSTD_getErrorName(r));
        FC_TRY(fc_sink_emit(k, k->zbuf, out.pos));
        k->pos += out.pos;
        if (r == 0)
            return FC_OK;
    }
}

struct fc_worker {
    struct fc_exec_shared *sh;
    struct fc_slabs slabs;
    struct fc_buf hdr;
};

/* Slab sink of tensor items holding the same bytes: CRC once, write to each, count progress. */
struct fc_item_sink {
    struct fc_sink *const *k;
    size_t nk;
    struct fc_exec_shared *sh;
    uint32_t crc;
    uint64_t nbytes;
};

static int fc_item_sink_put(void *ctx, const void *p, size_t n)
{
    struct fc_item_sink *is = ctx;
    if (fc_cancel_requested())
        return fc_error_set(FC_ERROR, "%s: interrupted", is->k[0]->path);
    is->crc = fc_crc32(is->crc, p, n);
    for (size_t i = 0; i < is->nk; i++)
        FC_TRY(fc_sink_put(is->k[i], p, n));
    is->nbytes += n;
    atomic_fetch_add(&is->sh->bytes_done, n * is->nk);
    return FC_OK;
}

static int fc_sinks_put(struct fc_sink *const *k, size_t nk, const struct fc_buf *b)
{
    for (size_t i = 0; i < nk; i++)
        FC_TRY(fc_sink_put(k[i], b->data, b->len));
    return FC_OK;
}

/*
 * Write tensor chunk items that hold the same bytes (one item, or a chunk and
 * its --copy twins, all with the same box, dtype and ops): blob head, data
 * slabs read once and written to every sink (CRC on the fly), tail.
 */
static int fc_write_tensor_items(struct fc_worker *w, struct fc_sink *const *k,
                                 const struct fc_plan_item *const *its, size_t n)
{
    const struct fc_exec *ex = w->sh->ex;
    const struct fc_plan_item *it = its[0];
    const struct fc_plan_chunk *ch = &ex->plan->chunks[it->chunk];
    const struct fc_plan_tensor *pt = &ex->plan->tensors[it->index];
    const struct fc_xspec *spec = &ex->xr->specs[ex->tensor_spec[it->index]];
    struct fc_item_sink is = {k, n, w->sh, 0, 0};
    struct fc_tsblob blob;
    int rc = FC_OK;
    if (ex->raw_items) {
        FC_TRY(fc_stream_box(ex->src, spec, ch->box.offsets, ch->box.sizes, w->sh->worker_budget,
                             &w->slabs, fc_item_sink_put, &is));
        if (is.nbytes != it->length)
            return fc_error_set(FC_ERROR,
                                "%s: internal error: wrote %" PRIu64 " bytes of '%s', "
                                "planned %" PRIu64,
                                k[0]->path, is.nbytes, pt->key, it->length);
        return FC_OK;
    }
    FC_TRY(fc_tsblob_init(&blob, pt->dtype, ch->box.sizes, pt->ndim));
    for (size_t i = 0; i < n; i++)
        if (blob.total_size != its[i]->length) {
            rc = fc_error_set(
                FC_ERROR, "%s: internal error: item of '%s' is %" PRIu64 " bytes, planned %" PRIu64,
                k[i]->path, pt->key, blob.total_size, its[i]->length);
            goto done;
        }
    fc_buf_clear(&w->hdr);
    FC_TRY_GOTO(fc_tsblob_head(&blob, &w->hdr), rc, done);
    FC_TRY_GOTO(fc_sinks_put(k, n, &w->hdr), rc, done);
    FC_TRY_GOTO(fc_stream_box(ex->src, spec, ch->box.offsets, ch->box.sizes, w->sh->worker_budget,
                              &w->slabs, fc_item_sink_put, &is),
                rc, done);
    if (is.nbytes != blob.data_size) {
        rc = fc_error_set(FC_ERROR,
                          "%s: internal error: wrote %" PRIu64 " data bytes of '%s', "
                          "planned %" PRIu64,
                          k[0]->path, is.nbytes, pt->key, blob.data_size);
        goto done;
    }
    fc_buf_clear(&w->hdr);
    FC_TRY_GOTO(fc_tsblob_tail(&blob, is.crc, &w->hdr), rc, done);
    FC_TRY_GOTO(fc_sinks_put(k, n, &w->hdr), rc, done);
done:
    fc_tsblob_release(&blob);
    return rc;
}

static int fc_write_tensor_item(struct fc_worker *w, struct fc_sink *k,
                                const struct fc_plan_item *it)
{
    return fc_write_tensor_items(w, &k, &it, 1);
}

/*
 * Items in the order their bytes sit in the inputs: values first, then
 * tensors by input, source entry and chunk position, so that a chunk and its
 * --copy twins come next to each other.  Reading the input front to back is
 * what makes a copy fast.
 */
static const struct fc_xspec *fc_item_spec(const struct fc_exec *ex, const struct fc_plan_item *it)
{
    return &ex->xr->specs[ex->tensor_spec[it->index]];
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

/* Open every rank file and order the items, or leave sh->order NULL (file-by-file mode). */
static int fc_source_order_setup(struct fc_exec_shared *sh)
{
    const struct fc_exec *ex = sh->ex;
    const size_t nf = ex->plan->nfiles;
    /* Compression appends per file, remote files go through their owner, and very wide
     * meshes would need too many descriptors: those run file by file. */
    if (ex->compress_level > 0 || ex->comm != NULL || nf > 512)
        return FC_OK;
    sh->fds = fc_calloc(nf, sizeof(*sh->fds));
    sh->paths = fc_calloc(nf, sizeof(*sh->paths));
    sh->order = fc_calloc(ex->plan->nitems + 1, sizeof(*sh->order));
    if (sh->fds == NULL || sh->paths == NULL || sh->order == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t f = 0; f < nf; f++)
        sh->fds[f] = -1;
    for (size_t f = 0; f < nf; f++) {
        sh->paths[f] = fc_path_join(ex->dir, ex->plan->files[f].name);
        if (sh->paths[f] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        FC_TRY(fc_file_create(sh->paths[f], &sh->fds[f]));
        if (ex->file_head != NULL)
            FC_TRY(fc_pwrite_full(sh->fds[f], ex->file_head[f].data, ex->file_head[f].len, 0,
                                  sh->paths[f]));
    }
    for (size_t i = 0; i < ex->plan->nitems; i++)
        sh->order[i] = i;
    FC_TRY(fc_sort_idx(sh->order, ex->plan->nitems, fc_cmp_source_order, ex));
    /* Runs of items with the same bytes are written together (read once). */
    sh->group_end = fc_calloc(ex->plan->nitems + 1, sizeof(*sh->group_end));
    if (sh->group_end == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < ex->plan->nitems;) {
        size_t j = i + 1;
        while (j < ex->plan->nitems && j - i < FC_EXEC_GROUP_MAX &&
               fc_same_bytes(ex, &ex->plan->items[sh->order[i]], &ex->plan->items[sh->order[j]]))
            j++;
        sh->group_end[i] = j;
        i = j;
    }
    return FC_OK;
}

/* Source-order mode: sync and close every file; the first failure wins. */
static int fc_source_order_finish(struct fc_exec_shared *sh, int rc)
{
    for (size_t f = 0; sh->fds != NULL && f < sh->ex->plan->nfiles; f++) {
        if (sh->fds[f] < 0)
            continue;
        /* fsyncs can take half a run on a slow disk: a signal between them still stops it */
        if (rc == FC_OK && fc_cancel_requested())
            rc = fc_error_set(FC_ERROR, "%s: interrupted", sh->paths[f]);
        if (rc == FC_OK && fsync(sh->fds[f]) != 0)
            rc = fc_error_set(FC_EIO, "%s: fsync failed: %s", sh->paths[f], strerror(errno));
        if (close(sh->fds[f]) != 0 && rc == FC_OK)
            rc = fc_error_set(FC_EIO, "%s: close failed: %s", sh->paths[f], strerror(errno));
    }
    for (size_t f = 0; sh->paths != NULL && f < sh->ex->plan->nfiles; f++)
        fc_free(sh->paths[f]);
    fc_free(sh->paths);
    fc_free(sh->fds);
    fc_free(sh->order);
    fc_free(sh->group_end);
    sh->group_end = NULL;
    sh->paths = NULL;
    sh->fds = NULL;
    sh->order = NULL;
    return rc;
}

static int fc_write_file(struct fc_worker *w, size_t fi)
{
    const struct fc_exec *ex = w->sh->ex;
    const struct fc_plan_file *f = &ex->plan->files[fi];
    char *path = fc_path_join(ex->dir, f->name);
    struct fc_sink k = {-1, path, 0, NULL, NULL, 0, NULL, 0, (uint32_t)fi};
    const int owner = fc_comm_owner(ex->comm, f->rank);
    int locked = 0;
    int rc = FC_OK;
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (owner != 0) {
        /* The worker owning this rank file writes it; one file at a time per worker. */
        k.comm = ex->comm;
        k.peer = owner;
        pthread_mutex_lock(&ex->comm->locks[owner]);
        locked = 1;
        FC_TRY_GOTO(fc_comm_open(ex->comm, owner, k.file, path), rc, done);
    } else {
        FC_TRY_GOTO(fc_file_create(path, &k.fd), rc, done);
    }
    if (ex->compress_level > 0) {
        k.zs = ZSTD_createCStream();
        k.zcap = ZSTD_CStreamOutSize();
        k.zbuf = fc_malloc(k.zcap);
        if (k.zs == NULL || k.zbuf == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        ZSTD_CCtx_setParameter(k.zs, ZSTD_c_compressionLevel, ex->compress_level);
    }
    if (ex->file_head != NULL)
        FC_TRY_GOTO(fc_sink_put(&k, ex->file_head[fi].data, ex->file_head[fi].len), rc, done);
    for (size_t i = 0; i < f->nitems; i++) {
        const size_t item = f->first_item + i;
        const struct fc_plan_item *it = &ex->plan->items[item];
        const uint64_t start = k.pos;
        if (k.zs == NULL && start != it->offset) {
            rc = fc_error_set(FC_ERROR,
                              "%s: internal error: item %zu at %" PRIu64 ", planned %" PRIu64, path,
                              item, start, it->offset);
            goto done;
        }
        if (it->kind == FC_ITEM_BYTES) {
            const struct fc_buf *b = &ex->value_blob[it->index];
            FC_TRY_GOTO(fc_sink_put(&k, b->data, b->len), rc, done);
            atomic_fetch_add(&w->sh->bytes_done, b->len);
        } else {
            FC_TRY_GOTO(fc_write_tensor_item(w, &k, it), rc, done);
        }
        FC_TRY_GOTO(fc_sink_end_item(&k), rc, done);
        if (ex->extents != NULL)
            ex->extents[item] = (struct fc_extent){start, k.pos - start};
        /* Stop early when another worker failed: the output is discarded anyway. */
        if (w->sh->rc < 0)
            break;
    }
    if (k.comm != NULL) {
        FC_TRY_GOTO(fc_comm_close(k.comm, k.peer, k.file), rc, done);
    } else if (fc_cancel_requested()) {
        rc = fc_error_set(FC_ERROR, "%s: interrupted", path);
        goto done;
    } else if (fsync(k.fd) != 0) {
        rc = fc_error_set(FC_EIO, "%s: fsync failed: %s", path, strerror(errno));
        goto done;
    }
done:
    if (locked)
        pthread_mutex_unlock(&ex->comm->locks[owner]);
    if (k.fd >= 0 && close(k.fd) != 0 && rc == FC_OK)
        rc = fc_error_set(FC_EIO, "%s: close failed: %s", path, strerror(errno));
    ZSTD_freeCStream(k.zs);
    fc_free(k.zbuf);
    fc_free(path);
    return rc;
}

/* Source-order mode: the items order[i .. group_end[i]), each at its planned offset. */
static int fc_write_items_at(struct fc_worker *w, size_t i)
{
    struct fc_exec_shared *sh = w->sh;
    const struct fc_exec *ex = sh->ex;
    const size_t n = sh->group_end[i] - i;
    struct fc_sink k[FC_EXEC_GROUP_MAX];
    struct fc_sink *kp[FC_EXEC_GROUP_MAX];
    const struct fc_plan_item *its[FC_EXEC_GROUP_MAX];
    for (size_t g = 0; g < n; g++) {
        its[g] = &ex->plan->items[sh->order[i + g]];
        k[g] = (struct fc_sink){sh->fds[its[g]->rank],
                                sh->paths[its[g]->rank],
                                its[g]->offset,
                                NULL,
                                NULL,
                                0,
                                NULL,
                                0,
                                0};
        kp[g] = &k[g];
    }
    if (its[0]->kind == FC_ITEM_BYTES) {
        const struct fc_buf *b = &ex->value_blob[its[0]->index];
        FC_TRY(fc_sink_put(&k[0], b->data, b->len));
        atomic_fetch_add(&sh->bytes_done, b->len);
        return FC_OK;
    }
    return fc_write_tensor_items(w, kp, its, n);
}

static void *fc_worker_main(void *arg)
{
    struct fc_worker *w = arg;
    struct fc_exec_shared *sh = w->sh;
    for (;;) {
        int rc;
        if (sh->order != NULL) {
            const size_t i = atomic_fetch_add(&sh->next_item, 1);
            if (i >= sh->ex->plan->nitems || sh->rc < 0)
                break;
            if (sh->group_end[i] == 0)
                continue; /* inside a group its first item's worker writes */
            rc = fc_write_items_at(w, i);
        } else {
            const size_t fi = atomic_fetch_add(&sh->next_file, 1);
            if (fi >= sh->ex->plan->nfiles || sh->rc < 0)
                break;
            rc = fc_write_file(w, fi);
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
    sh.worker_budget = ex->max_memory / (uint64_t)nthreads;
    if (sh.worker_budget < 4096)
        sh.worker_budget = 4096;
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
    }
    fc_free(ws);
    fc_free(tids);
    pthread_mutex_destroy(&sh.lock);
    return rc;
}
