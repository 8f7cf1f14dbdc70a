/*
 * fc_io.c - file I/O for every layer: pread/pwrite loops, the descriptor pool
 * that keeps many-file checkpoints under ulimit -n, text-file lines for rules
 * and plans, atomic small writes, and the staged output (unguessable names,
 * O_EXCL|O_NOFOLLOW, fsync, rename) that --force never loses both of.
 */
#define _GNU_SOURCE /* O_DIRECT */
#include "fc_io.h"

#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_dio_internal.h"
#include "fc_error.h"

/* What a non-regular file is, for the message that refuses it. */
static const char *fc_file_type_name(mode_t mode)
{
    if (S_ISDIR(mode))
        return "is a directory, not a file";
    if (S_ISFIFO(mode))
        return "is a FIFO, not a regular file";
    if (S_ISSOCK(mode))
        return "is a socket, not a regular file";
    if (S_ISCHR(mode) || S_ISBLK(mode))
        return "is a device, not a regular file";
    return "not a regular file";
}

/*
 * ---- the descriptor pool ----
 *
 * A checkpoint of N ranks is N files read in any order by many threads; one
 * descriptor each runs out at `ulimit -n` (1024 by default).  Every file
 * fc_file_open_read() opens gets a slot; at most fc_pool_limit() slots hold a
 * descriptor, and one in use by a pread is never closed.
 */
struct fc_fd_slot {
    int fd;         /* -1 while the pool has closed it */
    int dfd;        /* O_DIRECT twin of fd, opened on the first direct read; -1 none, -2 refused */
    int dfd_off;    /* a direct read was refused (alignment): read buffered from now on */
    unsigned users; /* preads in flight on fd */
    dev_t dev;      /* identity at first open: a reopen must find the same file */
    ino_t ino;      /* (inode numbers are reused: the change time tells a new file) */
    struct timespec ctime;
    struct fc_fd_slot *prev, *next; /* open slots, most recently used first */
};

static pthread_mutex_t fc_pool_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fc_fd_slot *fc_pool_head, *fc_pool_tail;
static size_t fc_pool_nopen, fc_pool_cap;

/*
 * The soft descriptor limit, first raised to the hard one (as far as 65536:
 * default soft limits of 1024 are for select(), which we do not use), less 64
 * left to outputs, sockets and libraries.
 */
static size_t fc_pool_limit(void)
{
    if (fc_pool_cap == 0) {
        struct rlimit rl;
        rlim_t n = 65536;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0) {
            const rlim_t want = rl.rlim_max < n ? rl.rlim_max : n;
            if (rl.rlim_cur < want) {
                rl.rlim_cur = want;
                if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
                    (void)getrlimit(RLIMIT_NOFILE, &rl);
            }
            n = rl.rlim_cur < n ? rl.rlim_cur : n;
        }
        fc_pool_cap = n < 128 ? 8 + n / 2 : (size_t)(n - 64);
    }
    return fc_pool_cap;
}

static void fc_pool_unlink(struct fc_fd_slot *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        fc_pool_head = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    else
        fc_pool_tail = s->prev;
    s->prev = s->next = NULL;
}

static void fc_pool_push_front(struct fc_fd_slot *s)
{
    s->prev = NULL;
    s->next = fc_pool_head;
    if (fc_pool_head != NULL)
        fc_pool_head->prev = s;
    else
        fc_pool_tail = s;
    fc_pool_head = s;
}

/* Close a slot's O_DIRECT descriptor (pool lock held); a refusal is remembered. */
static void fc_slot_close_direct(struct fc_fd_slot *s)
{
    if (s->dfd >= 0) {
        close(s->dfd);
        s->dfd = -1;
        fc_pool_nopen--;
    }
}

/* Close the least recently used idle descriptor; 0 when every open one is being read. */
static int fc_pool_evict(void)
{
    for (struct fc_fd_slot *s = fc_pool_tail; s != NULL; s = s->prev) {
        if (s->users == 0) {
            fc_pool_unlink(s);
            close(s->fd);
            s->fd = -1;
            fc_pool_nopen--;
            fc_slot_close_direct(s);
            return 1;
        }
    }
    return 0;
}

/* open() for reading with the pool lock held, making room first; -1 with errno set. */
static int fc_pool_open_fd(const char *path)
{
    while (fc_pool_nopen >= fc_pool_limit() && fc_pool_evict())
        ;
    for (;;) {
        /*
         * O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise
         * wait for a writer forever.  It changes nothing for the regular files
         * we accept.
         */
        const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        /* Descriptors held elsewhere (outputs, other libraries) can still run out. */
        if (fd >= 0 || !(errno == EMFILE || errno == ENFILE) || !fc_pool_evict())
            return fd;
    }
}

/* The descriptor to pread f with, reopened if the pool closed it; fc_file_release() after. */
static int fc_file_acquire(const struct fc_file *f, int *fd_out)
{
    struct fc_fd_slot *s = f->slot;
    struct stat st;
    int rc = FC_OK;
    if (s == NULL) {
        *fd_out = f->fd;
        return FC_OK;
    }
    pthread_mutex_lock(&fc_pool_lock);
    if (s->fd >= 0) {
        fc_pool_unlink(s);
    } else {
        const int fd = fc_pool_open_fd(f->path);
        if (fd < 0) {
            rc = fc_error_set(FC_EIO, "%s: cannot reopen: %s", f->path, strerror(errno));
            goto done;
        }
        if (fstat(fd, &st) != 0 || st.st_dev != s->dev || st.st_ino != s->ino ||
            st.st_ctim.tv_sec != s->ctime.tv_sec || st.st_ctim.tv_nsec != s->ctime.tv_nsec ||
            (uint64_t)st.st_size != f->size) {
            close(fd);
            rc = fc_error_set(FC_ECORRUPT, "%s: replaced or resized while being read", f->path);
            goto done;
        }
        s->fd = fd;
        fc_pool_nopen++;
    }
    fc_pool_push_front(s);
    s->users++;
    *fd_out = s->fd;
done:
    pthread_mutex_unlock(&fc_pool_lock);
    return rc;
}

/*
 * The O_DIRECT descriptor of f (opened beside the one fc_file_acquire() gave,
 * checked to be the same file), or -1: not pooled, or refused by the
 * filesystem (counted once per file).  Pool lock not held; f acquired.
 */
static int fc_file_direct_fd(const struct fc_file *f)
{
    struct fc_fd_slot *s = f->slot;
    int dfd = -1;
    if (s == NULL)
        return -1;
    pthread_mutex_lock(&fc_pool_lock);
    if (s->dfd == -1) {
        while (fc_pool_nopen >= fc_pool_limit() && fc_pool_evict())
            ;
        const int fd = open(f->path, O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
        struct stat st;
        if (fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == s->dev && st.st_ino == s->ino) {
            s->dfd = fd;
            fc_pool_nopen++;
        } else {
            if (fd >= 0)
                close(fd);
            else
                fc_dio_count_refused();
            s->dfd = -2;
        }
    }
    dfd = s->dfd_off ? -1 : s->dfd;
    pthread_mutex_unlock(&fc_pool_lock);
    return dfd;
}

/* A direct read of f was refused: its later reads go buffered (dfd stays open for readers). */
static void fc_file_direct_off(const struct fc_file *f)
{
    pthread_mutex_lock(&fc_pool_lock);
    if (!f->slot->dfd_off)
        fc_dio_count_refused();
    f->slot->dfd_off = 1;
    pthread_mutex_unlock(&fc_pool_lock);
}

static void fc_file_release(const struct fc_file *f)
{
    if (f->slot == NULL)
        return;
    pthread_mutex_lock(&fc_pool_lock);
    f->slot->users--;
    pthread_mutex_unlock(&fc_pool_lock);
}

int fc_file_open_read(struct fc_file *f, const char *path)
{
    struct stat st;
    *f = (struct fc_file)FC_FILE_INIT;
    f->path = fc_strdup(path);
    f->slot = fc_calloc(1, sizeof(*f->slot));
    if (f->slot != NULL)
        f->slot->fd = f->slot->dfd = -1; /* not open: a failed open must not close fd 0 */
    if (f->path == NULL || f->slot == NULL) {
        fc_file_close(f);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    }
    pthread_mutex_lock(&fc_pool_lock);
    const int fd = fc_pool_open_fd(path);
    const int e = errno;
    int rc = FC_OK;
    if (fd < 0) {
        rc = fc_error_set(e == ENOENT ? FC_ENOENT : FC_EIO, "%s: cannot open: %s", path,
                          strerror(e));
    } else if (fstat(fd, &st) != 0) {
        rc = fc_error_set(FC_EIO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(st.st_mode)) {
        rc = fc_error_set(FC_ECORRUPT, "%s: %s", path, fc_file_type_name(st.st_mode));
    } else {
        f->size = (uint64_t)st.st_size;
        f->slot->fd = fd;
        f->slot->dev = st.st_dev;
        f->slot->ino = st.st_ino;
        f->slot->ctime = st.st_ctim;
        fc_pool_push_front(f->slot);
        fc_pool_nopen++;
    }
    if (rc < 0 && fd >= 0)
        close(fd);
    pthread_mutex_unlock(&fc_pool_lock);
    if (rc < 0)
        fc_file_close(f);
    return rc;
}

void fc_file_close(struct fc_file *f)
{
    struct fc_fd_slot *s = f->slot;
    if (s != NULL) {
        pthread_mutex_lock(&fc_pool_lock);
        if (s->fd >= 0) {
            fc_pool_unlink(s);
            close(s->fd);
            fc_pool_nopen--;
        }
        fc_slot_close_direct(s);
        pthread_mutex_unlock(&fc_pool_lock);
        fc_free(s);
        f->slot = NULL;
    }
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    fc_free(f->path);
    f->path = NULL;
}

int fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off)
{
    unsigned char *p = dst;
    int fd, rc = FC_OK;
    /* fc_io.h: an open file names its path and is either pooled or has its own descriptor. */
    assert(f->path != NULL && (f->slot != NULL) != (f->fd >= 0));
    if (off > f->size || n > f->size - off)
        return fc_error_set(FC_ECORRUPT,
                            "%s: truncated: need bytes %" PRIu64 "..%" PRIu64
                            " but the file has %" PRIu64,
                            f->path, off, off + (uint64_t)n, f->size);
    FC_TRY(fc_file_acquire(f, &fd));
    if (n > 0 && fc_dio_wanted(n)) {
        const int dfd = fc_file_direct_fd(f);
        int refused = 1;
        if (dfd >= 0)
            rc = fc_dio_pread(dfd, p, n, off, f->path, &refused);
        if (rc < 0 || !refused) {
            fc_file_release(f);
            return rc;
        }
        if (dfd >= 0)
            fc_file_direct_off(f);
    }
    fc_dio_count(0, 0, n);
    while (n > 0) {
        /* Linux caps one read at ~2 GiB; ask for at most 1 GiB per call. */
        const size_t want = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        const ssize_t got = pread(fd, p, want, (off_t)off);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            rc = fc_error_set(FC_EIO, "%s: read at offset %" PRIu64 " failed: %s", f->path, off,
                              strerror(errno));
            break;
        }
        if (got == 0) {
            rc = fc_error_set(FC_ECORRUPT, "%s: truncated at offset %" PRIu64 " (file shrank?)",
                              f->path, off);
            break;
        }
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    fc_file_release(f);
    return rc;
}

int fc_file_read_alloc(const struct fc_file *f, uint64_t off, size_t n, size_t cap,
                       unsigned char **out)
{
    *out = NULL;
    if (n > cap)
        return fc_error_set(FC_ECORRUPT,
                            "%s: declared length %zu at offset %" PRIu64
                            " exceeds the limit of %zu bytes",
                            f->path, n, off, cap);
    unsigned char *p = fc_malloc(n + 1);
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory reading %zu bytes", f->path, n);
    const int rc = fc_file_pread(f, p, n, off);
    if (rc < 0) {
        fc_free(p);
        return rc;
    }
    p[n] = '\0';
    *out = p;
    return FC_OK;
}

void fc_file_advise_sequential(const struct fc_file *f, uint64_t off, uint64_t n)
{
    int fd;
    if (fc_file_acquire(f, &fd) < 0)
        return; /* a hint: the read that needs the file reports it */
    (void)posix_fadvise(fd, (off_t)off, (off_t)n, POSIX_FADV_SEQUENTIAL);
    fc_file_release(f);
}

int fc_pwrite_full(int fd, const void *p, size_t n, uint64_t off, const char *path)
{
    const unsigned char *q = p;
    fc_dio_count(0, 1, n);
    while (n > 0) {
        const size_t want = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        const ssize_t put = pwrite(fd, q, want, (off_t)off);
        if (put < 0) {
            if (errno == EINTR)
                continue;
            return fc_error_set(FC_EIO, "%s: write at offset %" PRIu64 " failed: %s", path, off,
                                strerror(errno));
        }
        q += put;
        n -= (size_t)put;
        off += (uint64_t)put;
    }
    return FC_OK;
}

int fc_file_create(const char *path, int *fd_out)
{
    /* O_EXCL fails on any name that exists, a symlink included: nothing planted is written. */
    *fd_out = open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd_out < 0)
        return fc_error_set(FC_EIO, "%s: cannot create: %s", path, strerror(errno));
    return FC_OK;
}

int fc_write_file_atomic(const char *path, const void *data, size_t n)
{
    int rc = FC_OK;
    int fd = -1, created = 0;
    const size_t len = strlen(path);
    char *tmp = fc_malloc(len + 5);
    if (tmp == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    FC_TRY_GOTO(fc_file_create(tmp, &fd), rc, done);
    created = 1;
    FC_TRY_GOTO(fc_pwrite_full(fd, data, n, 0, tmp), rc, done);
    if (fsync(fd) != 0) {
        rc = fc_error_set(FC_EIO, "%s: fsync failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (close(fd) != 0) {
        fd = -1;
        rc = fc_error_set(FC_EIO, "%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    fd = -1;
    if (rename(tmp, path) != 0) {
        rc = fc_error_set(FC_EIO, "%s: rename into place failed: %s", path, strerror(errno));
        goto done;
    }
done:
    if (fd >= 0)
        close(fd);
    if (rc < 0 && created)
        unlink(tmp);
    fc_free(tmp);
    return rc;
}

/* fsync a directory: 0 or the errno (EINVAL, a filesystem that cannot, is success). */
static int fc_fsync_dir_errno(const char *dir)
{
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return errno;
    const int r = fsync(fd);
    const int e = errno;
    close(fd);
    return r != 0 && e != EINVAL ? e : 0;
}

int fc_fsync_dir(const char *dir)
{
    const int e = fc_fsync_dir_errno(dir);
    if (e != 0)
        return fc_error_set(FC_EIO, "%s: fsync failed: %s", dir, strerror(e));
    return FC_OK;
}

char *fc_path_join(const char *dir, const char *name)
{
    const size_t a = strlen(dir), b = strlen(name);
    char *p = fc_malloc(a + b + 2);
    if (p == NULL)
        return NULL;
    memcpy(p, dir, a);
    p[a] = '/';
    memcpy(p + a + 1, name, b + 1);
    return p;
}

int fc_ends_with(const char *s, const char *suffix)
{
    const size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

int fc_path_is_dir(const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fc_error_set(errno == ENOENT ? FC_ENOENT : FC_EIO, "%s: %s", path, strerror(errno));
    return S_ISDIR(st.st_mode) ? 1 : 0;
}

int fc_remove_tree(const char *path)
{
    struct stat st;
    if (lstat(path, &st) != 0)
        return errno == ENOENT ? FC_OK : fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(st.st_mode)) {
        if (unlink(path) != 0 && errno != ENOENT)
            return fc_error_set(FC_EIO, "%s: cannot remove: %s", path, strerror(errno));
        return FC_OK;
    }
    DIR *d = opendir(path);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", path, strerror(errno));
    int rc = FC_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *child = fc_path_join(path, de->d_name);
        if (child == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", path);
            break;
        }
        rc = fc_remove_tree(child);
        fc_free(child);
        if (rc < 0)
            break;
    }
    closedir(d);
    if (rc == FC_OK && rmdir(path) != 0)
        rc = fc_error_set(FC_EIO, "%s: cannot remove directory: %s", path, strerror(errno));
    return rc;
}

int fc_text_each_line(char *text, size_t size, const char *name, fc_line_fn fn, void *ctx)
{
    /* A NUL would silently end the text (and every rule after it): refuse it. */
    const char *nul = memchr(text, '\0', size);
    if (nul != NULL) {
        unsigned at = 1;
        for (const char *p = text; p < nul; p++)
            at += *p == '\n';
        return fc_error_set(FC_EINVAL, "%s:%u: a NUL byte in a text file", name, at);
    }
    int rc = FC_OK;
    char *line = text;
    unsigned lineno = 0;
    while (rc == FC_OK && line != NULL && *line != '\0') {
        char *next = strchr(line, '\n');
        if (next != NULL)
            *next++ = '\0';
        lineno++;
        char *hash = strchr(line, '#');
        if (hash != NULL)
            *hash = '\0';
        while (*line == ' ' || *line == '\t' || *line == '\r')
            line++;
        size_t len = strlen(line);
        while (len > 0 && (line[len - 1] == ' ' || line[len - 1] == '\t' || line[len - 1] == '\r'))
            line[--len] = '\0';
        if (len > 0) {
            char where[512];
            snprintf(where, sizeof(where), "%s:%u", name, lineno);
            rc = fn(ctx, line, where);
        }
        line = next;
    }
    return rc;
}

int fc_file_each_line(const char *path, size_t cap, fc_line_fn fn, void *ctx)
{
    struct fc_file f = FC_FILE_INIT;
    unsigned char *text = NULL;
    FC_TRY(fc_file_open_read(&f, path));
    const size_t size = (size_t)f.size;
    int rc = fc_file_read_alloc(&f, 0, size, cap, &text);
    fc_file_close(&f);
    FC_TRY(rc);
    rc = fc_text_each_line((char *)text, size, path, fn, ctx);
    fc_free(text);
    return rc;
}

/* ---- staged output ---- */

/* renameat2(2) flags (linux/fs.h); syscall() because glibc declares it only for _GNU_SOURCE. */
#define FC_RENAME_NOREPLACE 1u
#define FC_RENAME_EXCHANGE  2u

static int fc_rename2(const char *from, const char *to, unsigned flags)
{
#ifdef SYS_renameat2
    return (int)syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, flags);
#else
    (void)from;
    (void)to;
    (void)flags;
    errno = ENOSYS;
    return -1;
#endif
}

/* Split path into its directory ("." when none) and base name, both new strings. */
static int fc_split_path(const char *path, char **dir_out, char **base_out)
{
    const char *slash = strrchr(path, '/');
    *dir_out = NULL;
    *base_out = NULL;
    if (slash == NULL) {
        *dir_out = fc_strdup(".");
        *base_out = fc_strdup(path);
    } else {
        const size_t dl = slash == path ? 1 : (size_t)(slash - path);
        *dir_out = fc_malloc(dl + 1);
        if (*dir_out != NULL) {
            memcpy(*dir_out, path, dl);
            (*dir_out)[dl] = '\0';
        }
        *base_out = fc_strdup(slash + 1);
    }
    if (*dir_out == NULL || *base_out == NULL) {
        fc_free(*dir_out);
        fc_free(*base_out);
        *dir_out = *base_out = NULL;
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    }
    return FC_OK;
}

/* "<dir>/<base>.partial-<pid>-<n>" entries whose process is gone are leftovers of a killed run. */
static int fc_remove_stale_partials(const char *dir, const char *base)
{
    const size_t bl = strlen(base);
    int rc = FC_OK;
    DIR *d = opendir(dir);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open the output's directory: %s", dir,
                            strerror(errno));
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (strncmp(de->d_name, base, bl) != 0 || strncmp(de->d_name + bl, ".partial-", 9) != 0)
            continue;
        char *end = NULL;
        const long pid = strtol(de->d_name + bl + 9, &end, 10);
        if (end == NULL || *end != '-' || pid <= 0)
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* a live process owns it */
        char *p = fc_path_join(dir, de->d_name);
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        rc = fc_remove_tree(p);
        fc_free(p);
        if (rc < 0)
            break;
    }
    closedir(d);
    return rc;
}

/*
 * 64 bits nobody can predict, for staging names: a name that cannot be guessed
 * cannot be planted (as a symlink) before we create it.  O_EXCL and mkdir()
 * refuse a planted name anyway; this keeps such a plant from stopping the run.
 */
static uint64_t fc_random64(void)
{
    static uint64_t counter;
    uint64_t v = 0;
#ifdef SYS_getrandom
    if (syscall(SYS_getrandom, &v, sizeof(v), 0) == (long)sizeof(v))
        return v;
#endif
    const int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        const ssize_t got = read(fd, &v, sizeof(v));
        close(fd);
        if (got == (ssize_t)sizeof(v))
            return v;
    }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ((uint64_t)ts.tv_sec << 30 ^ (uint64_t)ts.tv_nsec) * 0x9e3779b97f4a7c15u ^
           ++counter << 48 ^ (uint64_t)getpid();
}

/* "<target><tag>-<pid>-<16 random hex digits>"; the pid is what fc_remove_stale_partials reads. */
static char *fc_stage_name(const char *target, const char *tag)
{
    const size_t n = strlen(target) + strlen(tag) + 48;
    char *p = fc_malloc(n);
    if (p != NULL)
        snprintf(p, n, "%s%s-%ld-%016" PRIx64, target, tag, (long)getpid(), fc_random64());
    return p;
}

/* A new staging directory: mkdir() never follows a symlink, and a name taken is tried anew. */
static int fc_stage_mkdir(struct fc_stage *st)
{
    for (int tries = 0;; tries++) {
        st->path = fc_stage_name(st->target, ".partial");
        if (st->path == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", st->target);
        if (mkdir(st->path, 0755) == 0)
            return FC_OK;
        const int e = errno;
        const int rc = fc_error_set(FC_EIO, "%s: cannot create: %s", st->path, strerror(e));
        fc_free(st->path);
        st->path = NULL;
        if (e != EEXIST || tries == 3)
            return rc;
    }
}

int fc_stage_begin(struct fc_stage *st, const char *target, int is_dir, int force,
                   int (*cancelled)(void))
{
    struct stat lst, tst;
    char *base = NULL;
    int rc = FC_OK;
    memset(st, 0, sizeof(*st));
    st->is_dir = is_dir;
    st->force = force;
    st->cancelled = cancelled;
    if (lstat(target, &lst) == 0) {
        if (S_ISLNK(lst.st_mode) && stat(target, &tst) != 0)
            return fc_error_set(FC_EINVAL,
                                "%s: output is a symbolic link to nothing; remove it or name "
                                "another output",
                                target);
        if (!force)
            return fc_error_set(FC_EINVAL, "%s: output already exists; use --force to replace it",
                                target);
    } else if (errno != ENOENT) {
        return fc_error_set(FC_EIO, "%s: %s", target, strerror(errno));
    }
    st->target = fc_strdup(target);
    if (st->target == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", target);
    FC_TRY_GOTO(fc_split_path(target, &st->parent, &base), rc, done);
    FC_TRY_GOTO(fc_remove_stale_partials(st->parent, base), rc, done);
    if (is_dir) {
        rc = fc_stage_mkdir(st);
    } else {
        st->path = fc_stage_name(target, ".partial");
        if (st->path == NULL)
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", target);
    }
done:
    fc_free(base);
    return rc;
}

/*
 * Tests only (tests/cli/hardening): hold a moment of the commit open so that a
 * test can signal or kill the process exactly there.  FSDPCONV_TEST_PAUSE_
 * BEFORE_COMMIT waits before the last cancel check; FSDPCONV_TEST_PAUSE_MID_
 * REPLACE makes --force take the two-rename path and waits between the renames.
 */
static void fc_test_pause(const char *name)
{
    const char *v = getenv(name);
    if (v != NULL)
        sleep((unsigned)strtoul(v, NULL, 10));
}

/*
 * --force where the filesystem cannot exchange two names: the old output goes
 * to "<target>.old-<pid>-<n>" first (a name no cleaner removes, so a crash
 * between the renames leaves it for the user), then the new one into place.
 */
static int fc_stage_replace_in_two(struct fc_stage *st, char **old_out)
{
    *old_out = fc_stage_name(st->target, ".old");
    if (*old_out == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", st->target);
    if (rename(st->target, *old_out) != 0)
        return fc_error_set(FC_EIO, "%s: cannot move the existing output aside: %s", st->target,
                            strerror(errno));
    fc_test_pause("FSDPCONV_TEST_PAUSE_MID_REPLACE");
    if (rename(st->path, st->target) != 0) {
        const int e = errno;
        (void)rename(*old_out, st->target);
        return fc_error_set(FC_EIO, "%s: cannot rename the finished output into place: %s",
                            st->target, strerror(e));
    }
    return FC_OK;
}

/* Rename st->path to st->target; *old_out: where the replaced output now is (removed later). */
static int fc_stage_rename(struct fc_stage *st, char **old_out)
{
    *old_out = NULL;
    if (getenv("FSDPCONV_TEST_PAUSE_MID_REPLACE") == NULL) {
        if (fc_rename2(st->path, st->target, FC_RENAME_NOREPLACE) == 0)
            return FC_OK;
        if (errno == EEXIST && st->force &&
            fc_rename2(st->path, st->target, FC_RENAME_EXCHANGE) == 0) {
            *old_out = st->path; /* the old output now has the partial name */
            st->path = NULL;
            return FC_OK;
        }
        if (errno == EEXIST && !st->force)
            return fc_error_set(FC_EINVAL,
                                "%s: output appeared while this command ran; not replacing it "
                                "(use --force to replace it)",
                                st->target);
        if (errno != EINVAL && errno != ENOSYS && errno != EEXIST)
            return fc_error_set(FC_EIO, "%s: cannot rename the finished output into place: %s",
                                st->target, strerror(errno));
    }
    /* No renameat2 here: link(2) never replaces a file; a directory is renamed when absent. */
    struct stat lst;
    if (lstat(st->target, &lst) == 0) {
        if (!st->force)
            return fc_error_set(FC_EINVAL,
                                "%s: output appeared while this command ran; not replacing it "
                                "(use --force to replace it)",
                                st->target);
        return fc_stage_replace_in_two(st, old_out);
    }
    if (!st->is_dir) {
        if (link(st->path, st->target) != 0)
            return fc_error_set(FC_EIO, "%s: cannot link the finished output into place: %s",
                                st->target, strerror(errno));
        (void)unlink(st->path);
        return FC_OK;
    }
    if (rename(st->path, st->target) != 0)
        return fc_error_set(FC_EIO, "%s: cannot rename the finished output into place: %s",
                            st->target, strerror(errno));
    return FC_OK;
}

/*
 * After the rename the target holds the new output, whatever fails next: make
 * the rename durable, remove the replaced output (old, or NULL) in any case, and
 * say in the message what state the target is in.
 */
static int fc_stage_settle(const struct fc_stage *st, const char *old)
{
    /* Tests only: FSDPCONV_TEST_FAIL_DIR_FSYNC makes this fsync fail with EIO. */
    const int sync_err =
        getenv("FSDPCONV_TEST_FAIL_DIR_FSYNC") != NULL ? EIO : fc_fsync_dir_errno(st->parent);
    const int old_rc = old != NULL ? fc_remove_tree(old) : FC_OK;
    if (sync_err == 0)
        return old_rc;
    return fc_error_set(FC_EIO,
                        "%s: the new output is in place%s%s, but syncing its directory %s "
                        "failed (%s): a crash now may lose the change",
                        st->target,
                        old == NULL       ? ""
                        : old_rc == FC_OK ? " and the old one removed"
                                          : "; the old one is left as ",
                        old != NULL && old_rc != FC_OK ? old : "", st->parent, strerror(sync_err));
}

void fc_hold_interrupts(sigset_t *saved)
{
    sigset_t hold;
    sigemptyset(&hold);
    sigaddset(&hold, SIGINT);
    sigaddset(&hold, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &hold, saved);
}

void fc_release_interrupts(const sigset_t *saved)
{
    pthread_sigmask(SIG_SETMASK, saved, NULL);
}

int fc_stage_commit(struct fc_stage *st)
{
    sigset_t saved;
    char *old = NULL;
    int rc = FC_OK;
    /* fc_io.h: a stage is committed once, from a staging path beside its target. */
    assert(!st->committed && st->path != NULL && st->target != NULL && st->parent != NULL);
    if (st->is_dir)
        FC_TRY(fc_fsync_dir(st->path));
    fc_test_pause("FSDPCONV_TEST_PAUSE_BEFORE_COMMIT");
    /* A signal from here on waits until the rename is done: before it we stop, after it not. */
    fc_hold_interrupts(&saved);
    if (st->cancelled != NULL && st->cancelled())
        rc = fc_error_set(FC_ERROR, "%s: interrupted before the output was put in place",
                          st->target);
    else
        rc = fc_stage_rename(st, &old);
    if (rc == FC_OK)
        st->committed = 1;
    fc_release_interrupts(&saved);
    if (rc == FC_OK)
        rc = fc_stage_settle(st, old);
    fc_free(old);
    return rc;
}

void fc_stage_release(struct fc_stage *st)
{
    if (!st->committed && st->path != NULL)
        (void)fc_remove_tree(st->path);
    fc_free(st->target);
    fc_free(st->path);
    fc_free(st->parent);
    memset(st, 0, sizeof(*st));
}
