/*
 * share.c - the shares of a write job and their commit (see share.h): the
 * staging directory named by the job's hash, each share's lock and record,
 * and the checks of every record before the commit.
 */
#include "share.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "fc_alloc.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "fc_zip.h"

#define FC_SHARE_MAGIC      "fsdpconv-share 1"
#define FC_SHARE_RECORD_CAP ((size_t)1 << 30)

/*
 * SHA-256 (libcrypto), not a fast non-cryptographic hash: two different jobs
 * writing the same OUT must never agree on a staging directory, and the
 * identity text is hashed once per job.
 */
int fc_share_hash(const void *p, size_t n, uint64_t *out)
{
    unsigned char digest[32];
    if (EVP_Digest(p, n, digest, NULL, EVP_sha256(), NULL) != 1)
        return fc_error_set(FC_ENOMEM, "cannot compute the job's SHA-256");
    uint64_t h = 0;
    for (int i = 0; i < 8; i++)
        h = (h << 8) | digest[i];
    *out = h;
    return FC_OK;
}

static int fc_cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* "<name> <size> <mtime s>.<ns>\n": what identifies a file's content without reading it. */
static int fc_share_add_stat(struct fc_buf *id, const char *name, const struct stat *st)
{
    return fc_buf_printf(id, "%s %" PRIu64 " %lld.%09ld\n", name, (uint64_t)st->st_size,
                         (long long)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec);
}

/*
 * Names, sizes and mtimes, not the path: every node may mount the inputs
 * elsewhere, and a rerun after `touch` or a rewrite of an input is another job.
 */
int fc_share_add_path(struct fc_buf *id, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        return fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
    const char *base = strrchr(path, '/');
    if (!S_ISDIR(st.st_mode))
        return fc_share_add_stat(id, base != NULL ? base + 1 : path, &st);
    DIR *d = opendir(path);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    int rc = FC_OK;
    const struct dirent *de;
    while (rc == FC_OK && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.' && (de->d_name[1] == '\0' || strcmp(de->d_name, "..") == 0))
            continue;
        char **grown = fc_reallocarray(names, n + 1, sizeof(*names));
        if (grown == NULL || (grown[n] = fc_strdup(de->d_name)) == NULL) {
            names = grown != NULL ? grown : names;
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            break;
        }
        names = grown;
        n++;
    }
    closedir(d);
    /* readdir's order differs between filesystems and nodes */
    if (rc == FC_OK && n > 0)
        qsort(names, n, sizeof(*names), fc_cmp_names);
    for (size_t i = 0; i < n && rc == FC_OK; i++) {
        char *p = fc_path_join(path, names[i]);
        if (p == NULL)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        else if (stat(p, &st) == 0 && S_ISREG(st.st_mode))
            rc = fc_share_add_stat(id, names[i], &st);
        fc_free(p);
    }
    for (size_t i = 0; i < n; i++)
        fc_free(names[i]);
    fc_free(names);
    return rc;
}

/* "<staging>/<name>" into a new string. */
static char *fc_share_path(const struct fc_share *sh, const char *fmt, int a, int b)
{
    char name[64];
    snprintf(name, sizeof(name), fmt, a, b);
    return fc_path_join(sh->stage.path, name);
}

static char *fc_share_record_path(const struct fc_share *sh, int part)
{
    return fc_share_path(sh, ".share-%d-of-%d", part, sh->nparts);
}

/* One share's record as read back. */
struct fc_share_rec {
    const struct fc_share *sh;
    const struct fc_exec *ex;
    int part;
    uint64_t hash;
    long k, n;
    size_t nextents;  /* extent lines seen */
    size_t next_file; /* file lines come in the plan's order of this share's files */
    int ended;
    int verify_crc;
    char *path;
};

static int fc_share_bad(const struct fc_share_rec *r, const char *where, const char *what)
{
    return fc_error_set(FC_ECORRUPT, "%s: share %d of %d: %s", where != NULL ? where : r->path,
                        r->part, r->sh->nparts, what);
}

/* The next file of share r->part in plan order at or after fi, or nfiles. */
static size_t fc_share_next_owned(const struct fc_exec *ex, int part, int nparts, size_t fi)
{
    while (fi < ex->plan->nfiles && ex->plan->files[fi].rank % nparts != part)
        fi++;
    return fi;
}

/* How many items share part's files hold. */
static size_t fc_share_items(const struct fc_exec *ex, int part, int nparts)
{
    size_t n = 0;
    for (size_t i = 0; i < ex->plan->nitems; i++)
        n += ex->plan->items[i].rank % nparts == part;
    return n;
}

static int fc_file_crc(const char *path, uint64_t size, uint32_t *crc)
{
    struct fc_file f = FC_FILE_INIT;
    const size_t cap = (size_t)4 << 20;
    unsigned char *buf = fc_malloc(cap);
    int rc = FC_OK;
    *crc = 0;
    if (buf == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    FC_TRY_GOTO(fc_file_open_read(&f, path), rc, done);
    fc_file_advise_sequential(&f, 0, size);
    for (uint64_t off = 0; off < size;) {
        const size_t n = size - off < cap ? (size_t)(size - off) : cap;
        FC_TRY_GOTO(fc_file_pread(&f, buf, n, off), rc, done);
        *crc = fc_crc32(*crc, buf, n);
        off += n;
    }
done:
    fc_file_close(&f);
    fc_free(buf);
    return rc;
}

/* "file NAME SIZE CRC": the next file of the share, there with that size (and CRC). */
static int fc_share_rec_file(struct fc_share_rec *r, char *args, const char *where)
{
    const struct fc_exec *ex = r->ex;
    char *sp = strchr(args, ' ');
    char *end = NULL;
    if (sp == NULL)
        return fc_share_bad(r, where, "bad file line");
    *sp = '\0';
    const uint64_t size = strtoull(sp + 1, &end, 10);
    const unsigned long crc = end != NULL && *end == ' ' ? strtoul(end + 1, &end, 16) : 0;
    if (end == NULL || *end != '\0')
        return fc_share_bad(r, where, "bad file line");
    const size_t fi = fc_share_next_owned(ex, r->part, r->sh->nparts, r->next_file);
    if (fi >= ex->plan->nfiles || strcmp(ex->plan->files[fi].name, args) != 0)
        return fc_share_bad(r, where, "its files are not the plan's");
    r->next_file = fi + 1;
    if (ex->extents == NULL && size != ex->plan->files[fi].nbytes)
        return fc_share_bad(r, where, "a file's size is not the plan's");
    char *p = fc_path_join(r->sh->stage.path, args);
    struct stat st;
    int rc = FC_OK;
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    if (lstat(p, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size != size) {
        rc = fc_error_set(FC_ECORRUPT, "%s: share %d of %d recorded %" PRIu64 " bytes; %s", p,
                          r->part, r->sh->nparts, size,
                          lstat(p, &st) != 0 ? "the file is gone" : "the file differs");
    } else if (r->verify_crc) {
        uint32_t got;
        rc = fc_file_crc(p, size, &got);
        if (rc == FC_OK && got != crc)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: share %d of %d: CRC-32 %08" PRIx32
                              " differs from the recorded %08lx",
                              p, r->part, r->sh->nparts, got, crc);
    }
    fc_free(p);
    return rc;
}

/* "extent ITEM OFFSET LENGTH": where a compressed item of this share landed. */
static int fc_share_rec_extent(struct fc_share_rec *r, char *args, const char *where)
{
    const struct fc_exec *ex = r->ex;
    char *end = NULL;
    const unsigned long long item = strtoull(args, &end, 10);
    const uint64_t off = *end == ' ' ? strtoull(end + 1, &end, 10) : 0;
    const uint64_t len = *end == ' ' ? strtoull(end + 1, &end, 10) : 0;
    if (*end != '\0' || item >= ex->plan->nitems ||
        ex->plan->items[item].rank % r->sh->nparts != r->part)
        return fc_share_bad(r, where, "bad extent line");
    if (ex->extents != NULL)
        ex->extents[item] = (struct fc_extent){off, len};
    r->nextents++;
    return FC_OK;
}

static int fc_share_rec_line(void *ctx, char *line, const char *where)
{
    struct fc_share_rec *r = ctx;
    char *end = NULL;
    if (r->ended)
        return fc_share_bad(r, where, "text after its end");
    if (strcmp(line, FC_SHARE_MAGIC) == 0)
        return FC_OK;
    if (strncmp(line, "plan ", 5) == 0) {
        r->hash = strtoull(line + 5, &end, 16);
        if (*end != '\0' || r->hash != r->sh->hash)
            return fc_share_bad(r, where, "recorded for another plan");
        return FC_OK;
    }
    if (strncmp(line, "share ", 6) == 0) {
        r->k = strtol(line + 6, &end, 10);
        r->n = *end == ' ' ? strtol(end + 1, &end, 10) : -1;
        if (*end != '\0' || r->k != r->part || r->n != r->sh->nparts)
            return fc_share_bad(r, where, "recorded for another share");
        return FC_OK;
    }
    if (strncmp(line, "file ", 5) == 0)
        return fc_share_rec_file(r, line + 5, where);
    if (strncmp(line, "extent ", 7) == 0)
        return fc_share_rec_extent(r, line + 7, where);
    if (strcmp(line, "end") == 0) {
        r->ended = 1;
        return FC_OK;
    }
    return fc_share_bad(r, where, "unknown line");
}

/* Read share part's record and check it against the plan; FC_ENOENT when there is none. */
static int fc_share_check(const struct fc_share *sh, const struct fc_exec *ex, int part,
                          int verify_crc)
{
    struct fc_share_rec r = {sh, ex, part, 0, -1, -1, 0, 0, 0, verify_crc, NULL};
    struct stat st;
    r.path = fc_share_record_path(sh, part);
    if (r.path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    int rc = FC_OK;
    if (lstat(r.path, &st) != 0) {
        rc = FC_ENOENT;
        goto done;
    }
    FC_TRY_GOTO(fc_file_each_line(r.path, FC_SHARE_RECORD_CAP, fc_share_rec_line, &r), rc, done);
    if (!r.ended || r.k < 0 || r.hash == 0)
        rc = fc_share_bad(&r, NULL, "incomplete record");
    else if (fc_share_next_owned(ex, part, sh->nparts, r.next_file) < ex->plan->nfiles)
        rc = fc_share_bad(&r, NULL, "files of the plan are missing from it");
    else if (ex->extents != NULL && r.nextents != fc_share_items(ex, part, sh->nparts))
        rc = fc_share_bad(&r, NULL, "it does not say where every compressed item landed");
done:
    fc_free(r.path);
    return rc;
}

/* Remove this share's files and record, for a fresh start or after a failure. */
static void fc_share_remove_files(const struct fc_share *sh, const struct fc_exec *ex)
{
    char *p = fc_share_record_path(sh, sh->part);
    if (p != NULL)
        (void)unlink(p);
    fc_free(p);
    p = fc_share_path(sh, ".share-%d-of-%d.tmp", sh->part, sh->nparts);
    if (p != NULL)
        (void)unlink(p);
    fc_free(p);
    for (size_t fi = 0; fi < ex->plan->nfiles; fi++) {
        if (!fc_exec_owns(ex, fi))
            continue;
        p = fc_path_join(sh->stage.path, ex->plan->files[fi].name);
        if (p != NULL)
            (void)unlink(p);
        fc_free(p);
    }
}

/*
 * The staging directory of this job: made, or one of ours from an earlier run.  Its name has
 * the number of shares too: shares cut another way own other files.  A commit makes none.
 */
static int fc_share_mkdir(struct fc_share *sh)
{
    const size_t n = strlen(sh->stage.target) + 48;
    char *p = fc_malloc(n);
    struct stat st;
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    snprintf(p, n, "%s.partial-job-%016" PRIx64 "-%d", sh->stage.target, sh->hash, sh->nparts);
    fc_free(sh->stage.path);
    sh->stage.path = p;
    sh->stage.is_dir = 1;
    if (sh->part >= 0 && mkdir(p, 0755) == 0)
        return FC_OK;
    if (sh->part >= 0 && errno != EEXIST)
        return fc_error_set(FC_EIO, "%s: cannot create: %s", p, strerror(errno));
    if (lstat(p, &st) != 0 && errno == ENOENT)
        return fc_error_set(FC_EINVAL,
                            "%s: no share of this job has been written (no %s; the shares must "
                            "run with the same arguments and --part K/%d)",
                            sh->stage.target, p, sh->nparts);
    /* Its name can be guessed: only a real directory of ours is written into. */
    if (lstat(p, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return fc_error_set(FC_EINVAL,
                            "%s: exists and is not a staging directory of this user; remove it", p);
    return FC_OK;
}

/* flock() share part's lock file without waiting; its descriptor into *fd. */
static int fc_share_lock(const struct fc_share *sh, int part, int *fd)
{
    char *p = fc_share_path(sh, ".share-%d.lock", part, 0);
    int rc = FC_OK;
    if (p == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    *fd = open(p, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (*fd < 0)
        rc = fc_error_set(FC_EIO, "%s: cannot create: %s", p, strerror(errno));
    else if (flock(*fd, LOCK_EX | LOCK_NB) != 0)
        rc = fc_error_set(FC_EINVAL, "%s: share %d of %d of this job is running in another process",
                          sh->stage.target, part, sh->nparts);
    if (rc < 0 && *fd >= 0) {
        close(*fd);
        *fd = -1;
    }
    fc_free(p);
    return rc;
}

int fc_share_begin(struct fc_share *sh, const char *target, int force, uint64_t hash, int part,
                   int nparts, const struct fc_exec *ex)
{
    memset(sh, 0, sizeof(*sh));
    sh->lock_fd = -1;
    sh->hash = hash;
    sh->part = part;
    sh->nparts = nparts;
    /* The target's checks and the cleaning of killed single runs' partials, without a dir. */
    FC_TRY(fc_stage_begin(&sh->stage, target, 0, force, fc_cancel_requested));
    FC_TRY(fc_share_mkdir(sh));
    if (part < 0)
        return FC_OK;
    FC_TRY(fc_share_lock(sh, part, &sh->lock_fd));
    const int rc = fc_share_check(sh, ex, part, 1);
    if (rc == FC_OK) {
        sh->resumed = 1;
        return FC_OK;
    }
    fc_share_remove_files(sh, ex);
    return FC_OK;
}

int fc_share_record(struct fc_share *sh, const struct fc_exec *ex)
{
    struct fc_buf text = FC_BUF_INIT(FC_SHARE_RECORD_CAP);
    char *path = fc_share_record_path(sh, sh->part);
    int rc = FC_OK;
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    FC_TRY_GOTO(fc_buf_printf(&text, FC_SHARE_MAGIC "\nplan %016" PRIx64 "\nshare %d %d\n",
                              sh->hash, sh->part, sh->nparts),
                rc, done);
    for (size_t fi = 0; fi < ex->plan->nfiles; fi++) {
        if (!fc_exec_owns(ex, fi))
            continue;
        const char *name = ex->plan->files[fi].name;
        char *p = fc_path_join(sh->stage.path, name);
        struct stat st;
        uint32_t crc = 0;
        if (p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        rc = lstat(p, &st) != 0 ? fc_error_set(FC_EIO, "%s: %s", p, strerror(errno))
                                : fc_file_crc(p, (uint64_t)st.st_size, &crc);
        fc_free(p);
        if (rc < 0)
            goto done;
        FC_TRY_GOTO(fc_buf_printf(&text, "file %s %" PRIu64 " %08" PRIx32 "\n", name,
                                  (uint64_t)st.st_size, crc),
                    rc, done);
    }
    for (size_t i = 0; ex->extents != NULL && i < ex->plan->nitems; i++) {
        if (!fc_exec_owns(ex, (size_t)ex->plan->items[i].rank))
            continue;
        FC_TRY_GOTO(fc_buf_printf(&text, "extent %zu %" PRIu64 " %" PRIu64 "\n", i,
                                  ex->extents[i].offset, ex->extents[i].length),
                    rc, done);
    }
    FC_TRY_GOTO(fc_buf_puts(&text, "end\n"), rc, done);
    FC_TRY_GOTO(fc_write_file_atomic(path, text.data, text.len), rc, done);
    rc = fc_fsync_dir(sh->stage.path);
done:
    fc_buf_release(&text);
    fc_free(path);
    return rc;
}

void fc_share_discard(struct fc_share *sh, const struct fc_exec *ex)
{
    if (sh->stage.path != NULL && sh->part >= 0 && sh->lock_fd >= 0)
        fc_share_remove_files(sh, ex);
}

int fc_share_collect(struct fc_share *sh, const struct fc_exec *ex)
{
    struct fc_buf missing = FC_BUF_INIT(1 << 20);
    int rc = FC_OK;
    sh->locks = fc_calloc((size_t)sh->nparts, sizeof(*sh->locks));
    if (sh->locks == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (int k = 0; k < sh->nparts; k++)
        sh->locks[k] = -1;
    /* A share still running holds its lock: no commit under it (held until released). */
    for (int k = 0; k < sh->nparts; k++)
        if (k != sh->part)
            FC_TRY_GOTO(fc_share_lock(sh, k, &sh->locks[k]), rc, done);
    for (int k = 0; k < sh->nparts; k++) {
        const int c = fc_share_check(sh, ex, k, 0);
        if (c == FC_ENOENT)
            FC_TRY_GOTO(fc_buf_printf(&missing, "%s%d", missing.len > 0 ? ", " : "", k), rc, done);
        else if (c < 0)
            FC_TRY_GOTO(c, rc, done);
    }
    if (missing.len > 0) {
        FC_TRY_GOTO(fc_buf_putc(&missing, '\0'), rc, done);
        rc = fc_error_set(FC_EINVAL,
                          "%s: share(s) %s of %d not written yet (run them with --part K/%d)",
                          sh->stage.target, (const char *)missing.data, sh->nparts, sh->nparts);
    }
done:
    fc_buf_release(&missing);
    return rc;
}

int fc_share_seal(struct fc_share *sh)
{
    for (int k = 0; k < sh->nparts; k++) {
        char *p = fc_share_record_path(sh, k);
        char *l = fc_share_path(sh, ".share-%d.lock", k, 0);
        int rc = FC_OK;
        if (p == NULL || l == NULL)
            rc = fc_error_set(FC_ENOMEM, "out of memory");
        else if ((unlink(p) != 0 && errno != ENOENT) || (unlink(l) != 0 && errno != ENOENT))
            rc = fc_error_set(FC_EIO, "%s: cannot remove the share records: %s", sh->stage.path,
                              strerror(errno));
        fc_free(p);
        fc_free(l);
        FC_TRY(rc);
    }
    return FC_OK;
}

void fc_share_release(struct fc_share *sh)
{
    if (sh->lock_fd >= 0)
        close(sh->lock_fd);
    sh->lock_fd = -1;
    for (int k = 0; sh->locks != NULL && k < sh->nparts; k++)
        if (sh->locks[k] >= 0)
            close(sh->locks[k]);
    fc_free(sh->locks);
    sh->locks = NULL;
    /* The staging directory belongs to the job, not to this process: keep it. */
    if (!sh->stage.committed) {
        fc_free(sh->stage.path);
        sh->stage.path = NULL;
    }
    fc_stage_release(&sh->stage);
}
