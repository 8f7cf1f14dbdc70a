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
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fc_dio_internal.h"
#include "fc_error.h"
#include "fc_io.h"

static _Atomic int fc_mode = FC_IO_AUTO;
static atomic_uint_fast64_t fc_st_dr, fc_st_br, fc_st_dw, fc_st_bw, fc_st_refused;
/* Bytes of each bounce and writer buffer (fc_dio_fit()); 0: direct I/O off, no room for them. */
static atomic_size_t fc_chunk = FC_DIO_CHUNK_MAX;

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

uint64_t fc_dio_thread_bytes(void)
{
    return fc_io_get_mode() == FC_IO_BUFFERED ? 0 : 2 * (uint64_t)atomic_load(&fc_chunk);
}

uint64_t fc_dio_fit(uint64_t room)
{
    uint64_t chunk = fc_align_down(room / 2);
    chunk = chunk > FC_DIO_CHUNK_MAX ? FC_DIO_CHUNK_MAX : chunk < FC_DIO_CHUNK_MIN ? 0 : chunk;
    if (chunk != atomic_load(&fc_chunk))
        fc_bounce_drop();
    atomic_store(&fc_chunk, (size_t)chunk);
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

/* Write [from, to) of the run's buffer: direct when aligned, wanted and taken, else buffered. */
static int fc_dio_write_range(struct fc_dio_writer *w, uint64_t from, uint64_t to, int aligned)
{
    const unsigned char *p = w->buf + (from - w->base);
    const size_t n = (size_t)(to - from);
    if (n == 0)
        return FC_OK;
    if (aligned && w->dfd >= 0 && fc_dio_wanted(n)) {
        size_t done = 0;
        while (done < n) {
            const ssize_t put = pwrite(w->dfd, p + done, n - done, (off_t)(from + done));
            if (put < 0 && errno == EINTR)
                continue;
            if (put < 0 && errno == EINVAL && done == 0) {
                fc_dio_count_refused(); /* stricter alignment than ours: buffered below */
                break;
            }
            if (put < 0)
                return fc_error_set(FC_EIO, "%s: write at offset %" PRIu64 " failed: %s", w->path,
                                    from + done, strerror(errno));
            done += (size_t)put;
            if (done < n && (done & (FC_DIO_ALIGN - 1)) != 0) /* short: finish buffered */
                break;
        }
        fc_dio_count(1, 1, done);
        p += done;
        from += done;
        if (done == n)
            return FC_OK;
    }
    return fc_pwrite_full(w->fd, p, (size_t)(to - from), from, w->path); /* counts it */
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
    if (body_end > head_end)
        FC_TRY(fc_dio_write_range(w, head_end, body_end, 1));
    if (final && e > body_end && body_end >= head_end)
        FC_TRY(fc_dio_write_range(w, body_end, e, 0));
    return FC_OK;
}

int fc_dio_put(struct fc_dio_writer *w, int fd, int dfd, const char *path, uint64_t pos,
               const void *p, size_t n)
{
    const unsigned char *q = p;
    if (w->fd >= 0 && (w->fd != fd || w->base + w->len != pos))
        FC_TRY(fc_dio_flush(w));
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
    if (w->fd < 0)
        return FC_OK;
    const int rc = fc_dio_write_out(w, 1);
    w->fd = -1;
    w->len = 0;
    return rc;
}

void fc_dio_release(struct fc_dio_writer *w)
{
    free(w->buf);
    memset(w, 0, sizeof(*w));
    w->fd = w->dfd = -1;
}
