#include "fc_io.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fc_alloc.h"
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

int fc_file_open_read(struct fc_file *f, const char *path)
{
    struct stat st;
    f->fd = -1;
    f->size = 0;
    f->path = fc_strdup(path);
    if (f->path == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    /*
     * O_NONBLOCK: opening a FIFO (or a device) for reading would otherwise wait
     * for a writer forever.  It changes nothing for the regular files we accept.
     */
    f->fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (f->fd < 0) {
        const int e = errno;
        fc_free(f->path);
        f->path = NULL;
        return fc_error_set(e == ENOENT ? FC_ENOENT : FC_EIO, "%s: cannot open: %s", path,
                            strerror(e));
    }
    if (fstat(f->fd, &st) != 0) {
        const int e = errno;
        fc_file_close(f);
        return fc_error_set(FC_EIO, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        fc_file_close(f);
        return fc_error_set(FC_ECORRUPT, "%s: %s", path, fc_file_type_name(st.st_mode));
    }
    f->size = (uint64_t)st.st_size;
    return FC_OK;
}

void fc_file_close(struct fc_file *f)
{
    if (f->fd >= 0)
        close(f->fd);
    f->fd = -1;
    fc_free(f->path);
    f->path = NULL;
}

int fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off)
{
    unsigned char *p = dst;
    if (off > f->size || n > f->size - off)
        return fc_error_set(FC_ECORRUPT,
                            "%s: truncated: need bytes %" PRIu64 "..%" PRIu64
                            " but the file has %" PRIu64,
                            f->path, off, off + (uint64_t)n, f->size);
    while (n > 0) {
        /* Linux caps one read at ~2 GiB; ask for at most 1 GiB per call. */
        const size_t want = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        const ssize_t got = pread(f->fd, p, want, (off_t)off);
        if (got < 0) {
            if (errno == EINTR)
                continue;
            return fc_error_set(FC_EIO, "%s: read at offset %" PRIu64 " failed: %s", f->path, off,
                                strerror(errno));
        }
        if (got == 0)
            return fc_error_set(FC_ECORRUPT, "%s: truncated at offset %" PRIu64 " (file shrank?)",
                                f->path, off);
        p += got;
        n -= (size_t)got;
        off += (uint64_t)got;
    }
    return FC_OK;
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
    (void)posix_fadvise(f->fd, (off_t)off, (off_t)n, POSIX_FADV_SEQUENTIAL);
}

int fc_pwrite_full(int fd, const void *p, size_t n, uint64_t off, const char *path)
{
    const unsigned char *q = p;
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

int fc_write_file_atomic(const char *path, const void *data, size_t n)
{
    int rc = FC_OK;
    int fd = -1;
    const size_t len = strlen(path);
    char *tmp = fc_malloc(len + 5);
    if (tmp == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    memcpy(tmp, path, len);
    memcpy(tmp + len, ".tmp", 5);
    fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = fc_error_set(FC_EIO, "%s: cannot create: %s", tmp, strerror(errno));
        goto done;
    }
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
    if (rc < 0)
        unlink(tmp);
    fc_free(tmp);
    return rc;
}

int fc_fsync_dir(const char *dir)
{
    const int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", dir, strerror(errno));
    const int r = fsync(fd);
    const int e = errno;
    close(fd);
    if (r != 0 && e != EINVAL)
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

int fc_file_each_line(const char *path, size_t cap, fc_line_fn fn, void *ctx)
{
    struct fc_file f = FC_FILE_INIT;
    unsigned char *text = NULL;
    FC_TRY(fc_file_open_read(&f, path));
    int rc = fc_file_read_alloc(&f, 0, (size_t)f.size, cap, &text);
    fc_file_close(&f);
    FC_TRY(rc);
    char *line = (char *)text;
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
            snprintf(where, sizeof(where), "%s:%u", path, lineno);
            rc = fn(ctx, line, where);
        }
        line = next;
    }
    fc_free(text);
    return rc;
}
