/*
 * fc_dio.c - direct I/O (see fc_io.h): the --io mode, the aligned writer of
 * output runs, and aligned reads through bounce buffers for fc_file_pread().
 * The page cache's copies in and out were 84% of a conversion's CPU (issue
 * 25); O_DIRECT requests of FC_DIO_CHUNK_MAX bytes move the same bytes with a
 * tenth of the system time.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef FC_HAVE_LIBURING
#include <liburing.h>
#endif

#include "fc_dio_internal.h"
#include "fc_error.h"
#include "fc_io.h"

static _Atomic int fc_mode = FC_IO_AUTO;
static atomic_uint_fast64_t fc_st_dr, fc_st_br, fc_st_dw, fc_st_bw, fc_st_refused;
/* Bytes of each bounce and writer buffer (fc_dio_fit()); 0: direct I/O off, no room for them. */
static atomic_size_t fc_chunk = FC_DIO_CHUNK_MAX;
/* Direct writes a writer keeps in flight through io_uring (FC_DIO_DEPTH, as fc_dio_fit() leaves
 * room for their buffers), or 0: one synchronous pwrite at a time. */
static _Atomic int fc_depth;
static _Atomic int fc_inflight_peak;
static atomic_uint_fast64_t fc_st_queued;
/* An io_uring could not be set up (the kernel, seccomp, limits): writes went one at a time. */
static _Atomic int fc_uring_refused;

void fc_io_set_mode(enum fc_io_mode mode)
{
    atomic_store(&fc_mode, (int)mode);
}

enum fc_io_mode fc_io_get_mode(void)
{
    return (enum fc_io_mode)atomic_load(&fc_mode);
}

void fc_io_stats(struct fc_io_stats *out)
{
    out->direct_read = atomic_load(&fc_st_dr);
    out->buffered_read = atomic_load(&fc_st_br);
    out->direct_written = atomic_load(&fc_st_dw);
    out->buffered_written = atomic_load(&fc_st_bw);
    out->refused = atomic_load(&fc_st_refused);
    out->no_room = fc_io_get_mode() != FC_IO_BUFFERED && atomic_load(&fc_chunk) == 0;
    out->queued_written = atomic_load(&fc_st_queued);
    out->uring_refused = atomic_load(&fc_uring_refused);
}

int fc_dio_inflight_peak(void)
{
    return atomic_load(&fc_inflight_peak);
}

void fc_dio_count(int direct, int write, uint64_t n)
{
    atomic_fetch_add(write ? (direct ? &fc_st_dw : &fc_st_bw) : (direct ? &fc_st_dr : &fc_st_br),
                     n);
}

void fc_dio_count_refused(void)
{
    atomic_fetch_add(&fc_st_refused, 1);
}

int fc_dio_wanted(size_t n)
{
    const enum fc_io_mode m = fc_io_get_mode();
    if (atomic_load(&fc_chunk) == 0)
        return 0;
    return m == FC_IO_DIRECT || (m == FC_IO_AUTO && n >= FC_DIO_AUTO_MIN);
}

static uint64_t fc_align_down(uint64_t x)
{
    return x & ~(uint64_t)(FC_DIO_ALIGN - 1);
}

static uint64_t fc_align_up(uint64_t x)
{
    return fc_align_down(x + FC_DIO_ALIGN - 1);
}

/* ---- bounce buffers: fc_chunk bytes, aligned, kept for reuse (a fresh one faults in) */

#define FC_BOUNCE_KEEP 16
static pthread_mutex_t fc_bounce_lock = PTHREAD_MUTEX_INITIALIZER;
static void *fc_bounce_kept[FC_BOUNCE_KEEP];
static int fc_bounce_n;

static void *fc_bounce_get(size_t size)
{
    void *p = NULL;
    pthread_mutex_lock(&fc_bounce_lock);
    if (fc_bounce_n > 0)
        p = fc_bounce_kept[--fc_bounce_n];
    pthread_mutex_unlock(&fc_bounce_lock);
    if (p == NULL && posix_memalign(&p, FC_DIO_ALIGN, size) != 0)
        p = NULL;
    return p;
}

/* Free the kept bounce buffers (their size is about to change). */
static void fc_bounce_drop(void)
{
    pthread_mutex_lock(&fc_bounce_lock);
    while (fc_bounce_n > 0)
        free(fc_bounce_kept[--fc_bounce_n]);
    pthread_mutex_unlock(&fc_bounce_lock);
}

static void fc_bounce_put(void *p)
{
    pthread_mutex_lock(&fc_bounce_lock);
    if (fc_bounce_n < FC_BOUNCE_KEEP) {
        fc_bounce_kept[fc_bounce_n++] = p;
        p = NULL;
    }
    pthread_mutex_unlock(&fc_bounce_lock);
    free(p);
}

int fc_dio_pread(int dfd, void *dst, size_t n, uint64_t off, const char *path, int *refused)
{
    unsigned char *out = dst;
    const uint64_t end = off + n;
    uint64_t a = fc_align_down(off);
    const size_t chunk = atomic_load(&fc_chunk);
    unsigned char *b = fc_bounce_get(chunk);
    int rc = FC_OK;
    *refused = 0;
    if (b == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory for a direct-I/O buffer", path);
    while (a < end) {
        const uint64_t want = fc_align_up(end) - a < chunk ? fc_align_up(end) - a : chunk;
        const ssize_t got = pread(dfd, b, (size_t)want, (off_t)a);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0 && errno == EINVAL && a == fc_align_down(off)) {
            *refused = 1; /* alignment the filesystem does not take: the caller reads buffered */
            break;
        }
        if (got < 0) {
            rc = fc_error_set(FC_EIO, "%s: read at offset %" PRIu64 " failed: %s", path, a,
                              strerror(errno));
            break;
        }
        if (got == 0 || a + (uint64_t)got <= off) {
            rc = fc_error_set(FC_ECORRUPT, "%s: truncated at offset %" PRIu64 " (file shrank?)",
                              path, a);
            break;
        }
        /* Copy out what of [a, a + got) lies in [off, end). */
        const uint64_t from = a > off ? a : off;
        const uint64_t to = a + (uint64_t)got < end ? a + (uint64_t)got : end;
        memcpy(out + (from - off), b + (from - a), (size_t)(to - from));
        a += (uint64_t)got;
    }
    fc_bounce_put(b);
    if (rc == FC_OK && !*refused)
        fc_dio_count(1, 0, n);
    return rc;
}

/* ---- the writer ---- */

/* A read's bounce buffer, the writer's current one and those of its writes in flight. */
static uint64_t fc_dio_buffers(int depth)
{
    return 2 + (uint64_t)depth;
}

uint64_t fc_dio_thread_bytes(void)
{
    if (fc_io_get_mode() == FC_IO_BUFFERED)
        return 0;
    return fc_dio_buffers(atomic_load(&fc_depth)) * (uint64_t)atomic_load(&fc_chunk);
}

/* Can this process set up an io_uring (the kernel, seccomp, io_uring_disabled)?  Asked once. */
static int fc_uring_usable(void)
{
#ifdef FC_HAVE_LIBURING
    static _Atomic int usable = -1;
    if (atomic_load(&usable) < 0) {
        struct io_uring ring;
        const int ok = io_uring_queue_init(FC_DIO_DEPTH, &ring, 0) == 0;
        if (ok)
            io_uring_queue_exit(&ring);
        else
            atomic_store(&fc_uring_refused, 1);
        atomic_store(&usable, ok);
    }
    return atomic_load(&usable);
#else
    return 0;
#endif
}

/* Buffers of room / n bytes for a writer of depth writes in flight, or 0 when below the floor. */
static uint64_t fc_dio_chunk_for(uint64_t room, int depth)
{
    const uint64_t chunk = fc_align_down(room / fc_dio_buffers(depth));
    return chunk > FC_DIO_CHUNK_MAX ? FC_DIO_CHUNK_MAX : chunk < FC_DIO_CHUNK_MIN ? 0 : chunk;
}

uint64_t fc_dio_fit(uint64_t room)
{
    int depth = fc_uring_usable() ? FC_DIO_DEPTH : 0;
    uint64_t chunk = fc_dio_chunk_for(room, depth);
    if (chunk == 0 && depth > 0) /* too small for a queue: one write at a time */
        chunk = fc_dio_chunk_for(room, depth = 0);
    if (chunk != atomic_load(&fc_chunk))
        fc_bounce_drop();
    atomic_store(&fc_chunk, (size_t)chunk);
    atomic_store(&fc_depth, depth);
    return fc_dio_thread_bytes();
}

int fc_dio_open(int fd, const char *path)
{
    if (fc_io_get_mode() == FC_IO_BUFFERED || atomic_load(&fc_chunk) == 0)
        return -1;
    const int dfd = open(path, O_WRONLY | O_DIRECT | O_NOFOLLOW | O_CLOEXEC);
    struct stat a, b;
    if (dfd < 0) {
        fc_dio_count_refused(); /* EINVAL: tmpfs and others; the buffered fd carries on */
        return -1;
    }
    if (fstat(fd, &a) != 0 || fstat(dfd, &b) != 0 || a.st_dev != b.st_dev || a.st_ino != b.st_ino) {
        close(dfd); /* not the file we created: write through fd alone */
        return -1;
    }
    return dfd;
}

/*
 * Write n bytes at off through dfd, one synchronous pwrite at a time; where the
 * filesystem refuses the alignment, or a short write leaves a partial block,
 * the rest goes buffered through fd.
 */
static int fc_dio_pwrite(int fd, int dfd, const char *path, const unsigned char *p, size_t n,
                         uint64_t off)
{
    size_t done = 0;
    while (done < n) {
        const ssize_t put = pwrite(dfd, p + done, n - done, (off_t)(off + done));
        if (put < 0 && errno == EINTR)
            continue;
        if (put < 0 && errno == EINVAL && done == 0) {
            fc_dio_count_refused(); /* stricter alignment than ours: buffered below */
            break;
        }
        if (put < 0)
            return fc_error_set(FC_EIO, "%s: write at offset %" PRIu64 " failed: %s", path,
                                off + done, strerror(errno));
        done += (size_t)put;
        if (done < n && (done & (FC_DIO_ALIGN - 1)) != 0) /* short: finish buffered */
            break;
    }
    fc_dio_count(1, 1, done);
    if (done == n)
        return FC_OK;
    return fc_pwrite_full(fd, p + done, n - done, off + done, path); /* counts it */
}

#ifdef FC_HAVE_LIBURING
/*
 * ---- the write queue: up to FC_DIO_DEPTH direct writes of a writer in
 * flight through its io_uring, each from a buffer of its own.  The writer
 * fills its current buffer while the disk takes the others: one synchronous
 * pwrite at a time left the disk idle during each copy and CRC. ----
 */
struct fc_dio_slot {
    unsigned char *buf; /* owned by the slot; in flight while busy */
    const unsigned char *p;
    size_t n;
    uint64_t off;
    int fd, dfd, busy;
    const char *path;
};

struct fc_dio_queue {
    struct io_uring ring;
    int ready;    /* the ring is set up; 0: it could not be, writes go synchronously */
    int inflight; /* busy slots */
    int rc;       /* the first failure (sticky until release), its message in msg */
    char msg[512];
    struct fc_dio_slot slot[FC_DIO_DEPTH];
};

/* Record the first failure; later calls return it. */
static int fc_dio_queue_fail(struct fc_dio_queue *q, int rc)
{
    if (q->rc == FC_OK) {
        q->rc = rc;
        snprintf(q->msg, sizeof(q->msg), "%s", fc_error_last());
    }
    return q->rc;
}

/* Take one completion (waiting for it); a short or refused write is finished synchronously. */
static int fc_dio_queue_reap(struct fc_dio_queue *q)
{
    struct io_uring_cqe *cqe;
    int r;
    while ((r = io_uring_wait_cqe(&q->ring, &cqe)) == -EINTR)
        ;
    if (r < 0)
        return fc_dio_queue_fail(
            q, fc_error_set(FC_EIO, "waiting for a direct write failed: %s", strerror(-r)));
    struct fc_dio_slot *sl = &q->slot[io_uring_cqe_get_data64(cqe)];
    const int res = cqe->res;
    io_uring_cqe_seen(&q->ring, cqe);
    sl->busy = 0;
    q->inflight--;
    if (q->rc != FC_OK)
        return q->rc;
    if (res < 0 && res != -EINVAL && res != -EAGAIN && res != -EINTR)
        return fc_dio_queue_fail(q,
                                 fc_error_set(FC_EIO, "%s: write at offset %" PRIu64 " failed: %s",
                                              sl->path, sl->off, strerror(-res)));
    const size_t done = res > 0 ? (size_t)res : 0;
    if (res == -EINVAL)
        fc_dio_count_refused();
    fc_dio_count(1, 1, done);
    atomic_fetch_add(&fc_st_queued, done);
    if (done < sl->n) {
        const int rc =
            fc_dio_pwrite(sl->fd, sl->dfd, sl->path, sl->p + done, sl->n - done, sl->off + done);
        if (rc < 0)
            return fc_dio_queue_fail(q, rc);
    }
    return FC_OK;
}

/* Wait for every write in flight; the first failure. */
static int fc_dio_queue_drain(struct fc_dio_queue *q)
{
    while (q->inflight > 0)
        (void)fc_dio_queue_reap(q);
    return q->rc;
}

/*
 * Hand [from, to) of the writer's current buffer to the queue: the buffer goes
 * with it, and the writer carries on in a free slot's.  FC_ERROR (nothing
 * queued) when there is no queue to take it.
 */
static int fc_dio_queue_write(struct fc_dio_writer *w, uint64_t from, uint64_t to)
{
    struct fc_dio_queue *q = w->q;
    if (q == NULL) {
        q = w->q = calloc(1, sizeof(*q));
        if (q == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory for a write queue", w->path);
        q->ready = io_uring_queue_init(FC_DIO_DEPTH, &q->ring, 0) == 0;
        if (!q->ready)
            atomic_store(&fc_uring_refused, 1);
    }
    if (!q->ready)
        return FC_ERROR;
    if (q->rc != FC_OK)
        return fc_error_set(q->rc, "%s", q->msg);
    if (q->inflight == FC_DIO_DEPTH)
        FC_TRY(fc_dio_queue_reap(q));
    int k = 0;
    while (q->slot[k].busy)
        k++;
    struct fc_dio_slot *sl = &q->slot[k];
    if (sl->buf == NULL) {
        void *b = NULL;
        if (posix_memalign(&b, FC_DIO_ALIGN, w->cap) != 0)
            return fc_error_set(FC_ENOMEM, "%s: out of memory for a direct-I/O buffer", w->path);
        sl->buf = b;
    }
    struct io_uring_sqe *sqe = io_uring_get_sqe(&q->ring);
    if (sqe == NULL) /* cannot happen: as many entries as slots */
        return fc_error_set(FC_ERROR, "%s: write queue full", w->path);
    unsigned char *const mine = sl->buf;
    sl->buf = w->buf;
    w->buf = mine;
    sl->p = sl->buf + (from - w->base);
    sl->n = (size_t)(to - from);
    sl->off = from;
    sl->fd = w->fd;
    sl->dfd = w->dfd;
    sl->path = w->path;
    sl->busy = 1;
    io_uring_prep_write(sqe, sl->dfd, sl->p, (unsigned)sl->n, sl->off);
    io_uring_sqe_set_data64(sqe, (uint64_t)k);
    const int r = io_uring_submit(&q->ring);
    if (r < 0) { /* not taken: write it here */
        sl->busy = 0;
        return fc_dio_pwrite(sl->fd, sl->dfd, sl->path, sl->p, sl->n, sl->off);
    }
    q->inflight++;
    int peak = atomic_load(&fc_inflight_peak);
    while (q->inflight > peak &&
           !atomic_compare_exchange_weak(&fc_inflight_peak, &peak, q->inflight))
        ;
    return FC_OK;
}

static int fc_dio_queue_flush(struct fc_dio_writer *w)
{
    if (w->q == NULL || !w->q->ready)
        return FC_OK;
    const int rc = fc_dio_queue_drain(w->q);
    return rc < 0 ? fc_error_set(rc, "%s", w->q->msg) : FC_OK;
}

static void fc_dio_queue_release(struct fc_dio_writer *w)
{
    struct fc_dio_queue *q = w->q;
    if (q == NULL)
        return;
    if (q->ready) {
        (void)fc_dio_queue_drain(q); /* the kernel may not write from freed buffers */
        io_uring_queue_exit(&q->ring);
    }
    for (int k = 0; k < FC_DIO_DEPTH; k++)
        free(q->slot[k].buf);
    free(q);
    w->q = NULL;
}
#else
static int fc_dio_queue_write(struct fc_dio_writer *w, uint64_t from, uint64_t to)
{
    (void)w, (void)from, (void)to;
    return FC_ERROR;
}
static int fc_dio_queue_flush(struct fc_dio_writer *w)
{
    (void)w;
    return FC_OK;
}
static void fc_dio_queue_release(struct fc_dio_writer *w)
{
    (void)w;
}
#endif

/*
 * Write [from, to) of the run's buffer: direct when aligned, wanted and taken
 * (queued when the writer has a queue, which then owns the buffer), else
 * buffered.
 */
static int fc_dio_write_range(struct fc_dio_writer *w, uint64_t from, uint64_t to, int aligned)
{
    const unsigned char *p = w->buf + (from - w->base);
    const size_t n = (size_t)(to - from);
    if (n == 0)
        return FC_OK;
    if (aligned && w->dfd >= 0 && fc_dio_wanted(n)) {
        if (atomic_load(&fc_depth) > 0) {
            const int rc = fc_dio_queue_write(w, from, to);
            if (rc != FC_ERROR)
                return rc;
        }
        return fc_dio_pwrite(w->fd, w->dfd, w->path, p, n, from);
    }
    return fc_pwrite_full(w->fd, p, n, from, w->path); /* counts it */
}

/*
 * Write the run's bytes in the buffer: its first partial block (shared with
 * the bytes before the run) and, when final, its last partial block (shared
 * with the bytes after it) buffered; the aligned blocks between direct.
 */
static int fc_dio_write_out(struct fc_dio_writer *w, int final)
{
    const uint64_t s = w->start > w->base ? w->start : w->base;
    const uint64_t e = w->base + w->len;
    const uint64_t head_end = fc_align_up(s) < e ? fc_align_up(s) : e;
    const uint64_t body_end = final ? fc_align_down(e) : e;
    FC_TRY(fc_dio_write_range(w, s, head_end, 0));
    if (final && e > body_end && body_end >= head_end)
        FC_TRY(fc_dio_write_range(w, body_end, e, 0));
    /* The body last: a queued write takes the buffer with it. */
    if (body_end > head_end)
        FC_TRY(fc_dio_write_range(w, head_end, body_end, 1));
    return FC_OK;
}

/* Write out the run's last bytes (its writes may stay in flight). */
static int fc_dio_end_run(struct fc_dio_writer *w)
{
    if (w->fd < 0)
        return FC_OK;
    const int rc = fc_dio_write_out(w, 1);
    w->fd = -1;
    w->len = 0;
    return rc;
}

int fc_dio_put(struct fc_dio_writer *w, int fd, int dfd, const char *path, uint64_t pos,
               const void *p, size_t n)
{
    const unsigned char *q = p;
    if (w->fd >= 0 && (w->fd != fd || w->base + w->len != pos))
        FC_TRY(fc_dio_end_run(w));
    if (w->fd < 0) {
        if (w->buf == NULL) {
            const size_t cap = atomic_load(&fc_chunk) > 0 ? atomic_load(&fc_chunk) : FC_DIO_ALIGN;
            void *b = NULL;
            if (posix_memalign(&b, FC_DIO_ALIGN, cap) != 0)
                return fc_error_set(FC_ENOMEM, "%s: out of memory for a direct-I/O buffer", path);
            w->buf = b;
            w->cap = cap;
        }
        w->fd = fd;
        w->dfd = dfd;
        w->path = path;
        w->base = fc_align_down(pos);
        w->start = pos;
        w->len = (size_t)(pos - w->base);
    }
    while (n > 0) {
        const size_t k = n < w->cap - w->len ? n : w->cap - w->len;
        memcpy(w->buf + w->len, q, k);
        w->len += k;
        q += k;
        n -= k;
        if (w->len == w->cap) {
            FC_TRY(fc_dio_write_out(w, 0));
            w->base += w->cap;
            w->len = 0;
        }
    }
    return FC_OK;
}

int fc_dio_flush(struct fc_dio_writer *w)
{
    const int rc = fc_dio_end_run(w);
    const int qrc = fc_dio_queue_flush(w);
    return rc < 0 ? rc : qrc;
}

void fc_dio_release(struct fc_dio_writer *w)
{
    fc_dio_queue_release(w);
    free(w->buf);
    memset(w, 0, sizeof(*w));
    w->fd = w->dfd = -1;
}
