/*
 * comm_sock.c - the socket transport of comm.h (socketpairs after fork, or TCP
 * for launcher-started jobs) and the file protocol on top of it; also
 * fc_local_rank(), the one reading of the launcher's LOCAL_RANK, which picks
 * both the NCCL device here and the executor's GPU.
 */
#include "comm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_endian.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_kernels.h"

enum { MSG_OPEN = 1, MSG_CLOSE = 3, MSG_END, MSG_DONE, MSG_ACK, MSG_WRITE_NCCL };

#define FC_COMM_HDR             21 /* u8 type, u32 file, u64 offset, u64 length */
#define FC_COMM_MAX_PATH        4096
#define FC_COMM_CONNECT_SECONDS 60

static int fc_send_all(int fd, const void *p, size_t n)
{
    const unsigned char *q = p;
    while (n > 0) {
        const ssize_t k = send(fd, q, n, MSG_NOSIGNAL);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return fc_error_set(FC_EIO,
                                "multi-process transport: send failed: %s (a peer "
                                "exited?)",
                                strerror(errno));
        }
        q += k;
        n -= (size_t)k;
    }
    return FC_OK;
}

static int fc_recv_all(int fd, void *p, size_t n)
{
    unsigned char *q = p;
    while (n > 0) {
        const ssize_t k = recv(fd, q, n, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return fc_error_set(FC_EIO, "multi-process transport: %s (a peer exited?)",
                                k == 0 ? "connection closed" : strerror(errno));
        q += k;
        n -= (size_t)k;
    }
    return FC_OK;
}

static int fc_send_msg(int fd, unsigned type, uint32_t file, uint64_t off, const void *p,
                       uint64_t n)
{
    unsigned char h[FC_COMM_HDR];
    h[0] = (unsigned char)type;
    fc_write_le32(h + 1, file);
    fc_write_le64(h + 5, off);
    fc_write_le64(h + 13, n);
    FC_TRY(fc_send_all(fd, h, sizeof(h)));
    return n > 0 ? fc_send_all(fd, p, (size_t)n) : FC_OK;
}

static int fc_recv_hdr(int fd, unsigned *type, uint32_t *file, uint64_t *off, uint64_t *n)
{
    unsigned char h[FC_COMM_HDR];
    FC_TRY(fc_recv_all(fd, h, sizeof(h)));
    *type = h[0];
    *file = fc_read_le32(h + 1);
    *off = fc_read_le64(h + 5);
    *n = fc_read_le64(h + 13);
    return FC_OK;
}

/* An ack carries the worker's status: offset = 0 ok, else 1 and the message as payload. */
static int fc_recv_ack(int fd, int peer)
{
    unsigned type;
    uint32_t file;
    uint64_t status, n;
    char msg[1024];
    FC_TRY(fc_recv_hdr(fd, &type, &file, &status, &n));
    if (type != MSG_ACK || n >= sizeof(msg))
        return fc_error_set(FC_EIO, "multi-process transport: bad reply from rank %d", peer);
    FC_TRY(fc_recv_all(fd, msg, (size_t)n));
    msg[n] = '\0';
    if (status != 0)
        return fc_error_set(FC_EIO, "rank %d: %s", peer, msg);
    return FC_OK;
}

static int fc_send_ack(int fd, int rc)
{
    const char *msg = rc < 0 ? fc_error_last() : "";
    size_t n = strlen(msg);
    if (n > 1000)
        n = 1000;
    return fc_send_msg(fd, MSG_ACK, 0, rc < 0 ? 1 : 0, msg, n);
}

static struct fc_comm *fc_comm_new(int rank, int size)
{
    struct fc_comm *c = fc_calloc(1, sizeof(*c));
    if (c == NULL)
        return NULL;
    c->rank = rank;
    c->size = size;
    c->fds = fc_calloc((size_t)size, sizeof(*c->fds));
    c->locks = fc_calloc((size_t)size, sizeof(*c->locks));
    c->pids = fc_calloc((size_t)size, sizeof(*c->pids));
    if (c->fds == NULL || c->locks == NULL || c->pids == NULL) {
        fc_free(c->fds);
        fc_free(c->locks);
        fc_free(c->pids);
        fc_free(c);
        return NULL;
    }
    for (int i = 0; i < size; i++) {
        c->fds[i] = -1;
        pthread_mutex_init(&c->locks[i], NULL);
    }
    return c;
}

int fc_comm_free(struct fc_comm *c)
{
    int rc = FC_OK;
    if (c == NULL)
        return FC_OK;
    fc_comm_nccl_free(c);
    for (int i = 0; i < c->size; i++) {
        if (c->fds[i] >= 0)
            close(c->fds[i]);
        pthread_mutex_destroy(&c->locks[i]);
    }
    if (c->forked && c->rank == 0) {
        for (int i = 1; i < c->size; i++) {
            int st = 0;
            if (c->pids[i] > 0 && waitpid(c->pids[i], &st, 0) == c->pids[i] &&
                !(WIFEXITED(st) && WEXITSTATUS(st) == 0) && rc == FC_OK)
                rc = fc_error_set(FC_ERROR, "worker rank %d exited with %s %d", i,
                                  WIFEXITED(st) ? "status" : "signal",
                                  WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
        }
    }
    fc_free(c->fds);
    fc_free(c->locks);
    fc_free(c->pids);
    fc_free(c);
    return rc;
}

int fc_comm_fork(struct fc_comm **out, int nproc)
{
    *out = NULL;
    signal(SIGPIPE, SIG_IGN);
    struct fc_comm *c = fc_comm_new(0, nproc);
    if (c == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    c->forked = 1;
    fflush(NULL); /* children must not flush the parent's buffered output again */
    for (int r = 1; r < nproc; r++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
            fc_comm_free(c);
            return fc_error_set(FC_EIO, "socketpair failed: %s", strerror(errno));
        }
        const pid_t pid = fork();
        if (pid < 0) {
            close(sv[0]);
            close(sv[1]);
            fc_comm_free(c);
            return fc_error_set(FC_EIO, "fork failed: %s", strerror(errno));
        }
        if (pid == 0) {
            /* The worker keeps only its own end; the earlier siblings' ends are closed. */
            close(sv[0]);
            for (int i = 1; i < r; i++)
                if (c->fds[i] >= 0)
                    close(c->fds[i]);
            struct fc_comm *w = fc_comm_new(r, nproc);
            if (w == NULL)
                _exit(1);
            w->fds[0] = sv[1];
            c->forked = 0;
            fc_free(c->fds);
            fc_free(c->locks);
            fc_free(c->pids);
            fc_free(c);
            *out = w;
            return FC_OK;
        }
        close(sv[1]);
        c->fds[r] = sv[0];
        c->pids[r] = pid;
    }
    *out = c;
    return FC_OK;
}

static int fc_env_int(const char *name, long min, long max, long *out)
{
    const char *s = getenv(name);
    char *end = NULL;
    if (s == NULL || s[0] == '\0')
        return fc_error_set(FC_EINVAL, "environment variable %s is not set", name);
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (*end != '\0' || errno != 0 || v < min || v > max)
        return fc_error_set(FC_EINVAL,
                            "environment variable %s='%s' is not an integer in "
                            "[%ld, %ld]",
                            name, s, min, max);
    *out = v;
    return FC_OK;
}

int fc_comm_env(struct fc_comm **out)
{
    /* The launchers' names for the rank and the size, in the order they are looked for. */
    static const char *const vars[][2] = {{"RANK", "WORLD_SIZE"},
                                          {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"},
                                          {"SLURM_PROCID", "SLURM_NTASKS"}};
    long size, rank, port;
    size_t v = 0;
    *out = NULL;
    while (v < sizeof(vars) / sizeof(vars[0]) && getenv(vars[v][1]) == NULL)
        v++;
    if (v == sizeof(vars) / sizeof(vars[0]) || strcmp(getenv(vars[v][1]), "1") == 0)
        return FC_OK;
    FC_TRY(fc_env_int(vars[v][1], 1, 1 << 16, &size));
    FC_TRY(fc_env_int(vars[v][0], 0, size - 1, &rank));
    if (getenv("MASTER_PORT") == NULL)
        return fc_error_set(FC_EINVAL,
                            "%s=%ld ranks but MASTER_PORT is not set: export MASTER_ADDR and "
                            "MASTER_PORT (rank 0's host and a free port), or give --nproc 1 to "
                            "run alone",
                            vars[v][1], size);
    FC_TRY(fc_env_int("MASTER_PORT", 1, 65535, &port));
    const char *addr = getenv("MASTER_ADDR");
    if (addr == NULL || addr[0] == '\0')
        addr = "127.0.0.1";
    signal(SIGPIPE, SIG_IGN);
    struct addrinfo hints, *ai = NULL;
    char portstr[16];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(portstr, sizeof(portstr), "%ld", port);
    const int gai = getaddrinfo(addr, portstr, &hints, &ai);
    if (gai != 0)
        return fc_error_set(FC_EINVAL, "MASTER_ADDR '%s': %s", addr, gai_strerror(gai));
    struct fc_comm *c = fc_comm_new((int)rank, (int)size);
    int rc = FC_OK;
    if (c == NULL) {
        freeaddrinfo(ai);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    const time_t deadline = time(NULL) + FC_COMM_CONNECT_SECONDS;
    if (rank == 0) {
        const int one = 1;
        const int ls = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (ls < 0 || setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0 ||
            bind(ls, ai->ai_addr, ai->ai_addrlen) != 0 || listen(ls, (int)size) != 0) {
            rc = fc_error_set(FC_EIO, "rank 0: cannot listen on %s:%ld: %s", addr, port,
                              strerror(errno));
            if (ls >= 0)
                close(ls);
            goto done;
        }
        for (long got = 1; got < size;) {
            struct pollfd pfd = {ls, POLLIN, 0};
            const int left = (int)(deadline - time(NULL));
            if (left <= 0 || poll(&pfd, 1, left * 1000) <= 0) {
                rc = fc_error_set(FC_EIO, "rank 0: only %ld of %ld ranks connected within %d s",
                                  got, size, FC_COMM_CONNECT_SECONDS);
                break;
            }
            const int fd = accept(ls, NULL, NULL);
            unsigned char rb[4];
            if (fd < 0)
                continue;
            if (fc_recv_all(fd, rb, 4) < 0 || fc_read_le32(rb) == 0 ||
                fc_read_le32(rb) >= (uint32_t)size || c->fds[fc_read_le32(rb)] >= 0) {
                close(fd);
                continue;
            }
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            c->fds[fc_read_le32(rb)] = fd;
            got++;
        }
        close(ls);
    } else {
        int fd = -1;
        while (fd < 0) {
            fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0)
                break;
            if (fd >= 0)
                close(fd);
            fd = -1;
            if (time(NULL) >= deadline) {
                rc = fc_error_set(FC_EIO,
                                  "rank %ld: cannot connect to rank 0 at %s:%ld within "
                                  "%d s",
                                  rank, addr, port, FC_COMM_CONNECT_SECONDS);
                goto done;
            }
            const struct timespec ts = {0, 100 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        unsigned char rb[4];
        fc_write_le32(rb, (uint32_t)rank);
        c->fds[0] = fd;
        rc = fc_send_all(fd, rb, 4);
    }
done:
    freeaddrinfo(ai);
    if (rc < 0) {
        fc_comm_free(c);
        return rc;
    }
    *out = c;
    return FC_OK;
}

/* ---- rank 0 ---- */

int fc_comm_open(struct fc_comm *c, int peer, uint32_t file, const char *path)
{
    return fc_send_msg(c->fds[peer], MSG_OPEN, file, 0, path, strlen(path));
}

int fc_comm_write(struct fc_comm *c, int peer, uint32_t file, uint64_t offset, const void *p,
                  size_t n)
{
    /* Header on the socket (it carries the length), payload over NCCL. */
    unsigned char h[FC_COMM_HDR];
    h[0] = MSG_WRITE_NCCL;
    fc_write_le32(h + 1, file);
    fc_write_le64(h + 5, offset);
    fc_write_le64(h + 13, n);
    FC_TRY(fc_send_all(c->fds[peer], h, sizeof(h)));
    return fc_comm_nccl_send(c, peer, p, n);
}

int fc_comm_send_raw(struct fc_comm *c, int peer, const void *p, size_t n)
{
    return fc_send_all(c->fds[peer], p, n);
}

int fc_comm_recv_raw(struct fc_comm *c, int peer, void *p, size_t n)
{
    return fc_recv_all(c->fds[peer], p, n);
}

int fc_comm_close(struct fc_comm *c, int peer, uint32_t file)
{
    FC_TRY(fc_send_msg(c->fds[peer], MSG_CLOSE, file, 0, NULL, 0));
    return fc_recv_ack(c->fds[peer], peer);
}

int fc_comm_finish(struct fc_comm *c)
{
    for (int p = 1; p < c->size; p++)
        FC_TRY(fc_send_msg(c->fds[p], MSG_END, 0, 0, NULL, 0));
    for (int p = 1; p < c->size; p++)
        FC_TRY(fc_recv_ack(c->fds[p], p));
    return FC_OK;
}

void fc_comm_done(struct fc_comm *c, int ok)
{
    if (c == NULL || c->done_sent)
        return;
    c->done_sent = 1;
    /* A worker gone already cannot be told; the job's own message stays the one reported. */
    char saved[1024];
    snprintf(saved, sizeof(saved), "%s", fc_error_last());
    for (int p = 1; p < c->size; p++)
        if (c->fds[p] >= 0)
            (void)fc_send_msg(c->fds[p], MSG_DONE, 0, ok ? 0 : 1, NULL, 0);
    fc_error_set(FC_ERROR, "%s", saved);
}

/* ---- independent workers: only the status of each share passes ---- */

int fc_comm_report(struct fc_comm *c, int rc)
{
    return fc_send_ack(c->fds[0], rc);
}

int fc_comm_gather(struct fc_comm *c)
{
    int rc = FC_OK;
    char first[1024] = "";
    /* Every worker is heard (or seen gone) before the caller commits or removes the staging. */
    for (int p = 1; p < c->size; p++) {
        const int r = fc_recv_ack(c->fds[p], p);
        if (r < 0 && rc == FC_OK) {
            /* a report names its rank already; a lost connection does not */
            const char *msg = fc_error_last();
            char rank[24] = "";
            if (strncmp(msg, "rank ", 5) != 0)
                snprintf(rank, sizeof(rank), "rank %d: ", p);
            rc = r;
            snprintf(first, sizeof(first), "%s%s", rank, msg);
        }
    }
    return rc < 0 ? fc_error_set(rc, "%s", first) : FC_OK;
}

int fc_comm_await(struct fc_comm *c)
{
    unsigned type;
    uint32_t file;
    uint64_t status, n;
    FC_TRY(fc_recv_hdr(c->fds[0], &type, &file, &status, &n));
    if (type != MSG_DONE || n != 0)
        return fc_error_set(FC_EIO, "rank %d: unexpected message %u from rank 0", c->rank, type);
    if (status != 0)
        return fc_error_set(FC_ERROR, "rank %d: the job failed on another rank", c->rank);
    return FC_OK;
}

/* ---- worker ---- */

struct fc_open_file {
    uint32_t id;
    int fd;
    char *path;
};

int fc_comm_serve(struct fc_comm *c)
{
    const int fd = c->fds[0];
    struct fc_open_file *files = NULL;
    size_t nfiles = 0;
    unsigned char *buf = NULL;
    size_t cap = 0;
    int failed = FC_OK; /* first local failure, reported at the next ack */
    int rc = FC_OK;
    char saved[1024] = "";
    for (;;) {
        unsigned type;
        uint32_t file;
        uint64_t off, n;
        FC_TRY_GOTO(fc_recv_hdr(fd, &type, &file, &off, &n), rc, done);
        /* Only OPEN carries a payload on the socket (a path); data comes over NCCL. */
        if (type != MSG_WRITE_NCCL && n >= FC_COMM_MAX_PATH) {
            rc = fc_error_set(FC_EIO, "rank %d: oversized message from rank 0", c->rank);
            goto done;
        }
        if (n > cap && type != MSG_WRITE_NCCL) {
            unsigned char *b = fc_reallocarray(buf, (size_t)n, 1);
            if (b == NULL) {
                rc = fc_error_set(FC_ENOMEM, "rank %d: out of memory", c->rank);
                goto done;
            }
            buf = b;
            cap = (size_t)n;
        }
        const unsigned char *payload = buf;
        if (type == MSG_WRITE_NCCL) {
            const void *dp;
            FC_TRY_GOTO(fc_comm_nccl_recv(c, (size_t)n, &dp), rc, done);
            payload = dp;
        } else if (n > 0) {
            FC_TRY_GOTO(fc_recv_all(fd, buf, (size_t)n), rc, done);
        }
        struct fc_open_file *of = NULL;
        for (size_t i = 0; i < nfiles; i++)
            if (files[i].id == file && files[i].fd >= 0)
                of = &files[i];
        int step = FC_OK;
        switch (type) {
        case MSG_OPEN: {
            if (n >= FC_COMM_MAX_PATH || of != NULL) {
                step = fc_error_set(FC_EIO, "rank %d: bad OPEN", c->rank);
                break;
            }
            struct fc_open_file *f = fc_reallocarray(files, nfiles + 1, sizeof(*f));
            if (f == NULL) {
                step = fc_error_set(FC_ENOMEM, "rank %d: out of memory", c->rank);
                break;
            }
            files = f;
            f[nfiles].id = file;
            f[nfiles].path = fc_strndup((const char *)buf, (size_t)n);
            f[nfiles].fd = -1;
            step = f[nfiles].path == NULL
                       ? fc_error_set(FC_ENOMEM, "rank %d: out of memory", c->rank)
                       : fc_file_create(f[nfiles].path, &f[nfiles].fd);
            nfiles++;
            break;
        }
        case MSG_WRITE_NCCL:
            if (failed == FC_OK && of == NULL)
                step = fc_error_set(FC_EIO, "rank %d: WRITE to a file that is not open", c->rank);
            else if (failed == FC_OK)
                step = fc_pwrite_full(of->fd, payload, (size_t)n, off, of->path);
            break;
        case MSG_CLOSE:
            if (of != NULL) {
                if (failed == FC_OK && fc_cancel_requested())
                    step = fc_error_set(FC_ERROR, "%s: interrupted", of->path);
                else if (failed == FC_OK && fsync(of->fd) != 0)
                    step = fc_error_set(FC_EIO, "%s: fsync failed: %s", of->path, strerror(errno));
                if (close(of->fd) != 0 && step == FC_OK && failed == FC_OK)
                    step = fc_error_set(FC_EIO, "%s: close failed: %s", of->path, strerror(errno));
                of->fd = -1;
            }
            /* fall through - CLOSE and END are acknowledged with the status so far */
        case MSG_END:
            if (step < 0 && failed == FC_OK) {
                failed = step;
                snprintf(saved, sizeof(saved), "%s", fc_error_last());
            }
            if (failed < 0)
                fc_error_set(failed, "%s", saved);
            FC_TRY_GOTO(fc_send_ack(fd, failed), rc, done);
            step = FC_OK;
            break;
        case MSG_DONE:
            if (failed < 0) {
                rc = fc_error_set(failed, "%s", saved);
            } else if (off != 0) {
                rc = fc_error_set(FC_ERROR, "rank %d: the job failed on another rank", c->rank);
            }
            goto done;
        default:
            rc = fc_error_set(FC_EIO, "rank %d: unknown message %u from rank 0", c->rank, type);
            goto done;
        }
        if (step < 0 && failed == FC_OK) {
            failed = step;
            snprintf(saved, sizeof(saved), "%s", fc_error_last());
        }
    }
done:
    for (size_t i = 0; i < nfiles; i++) {
        if (files[i].fd >= 0)
            close(files[i].fd);
        fc_free(files[i].path);
    }
    fc_free(files);
    fc_free(buf);
    return rc;
}

int fc_comm_rank(const struct fc_comm *c)
{
    return c == NULL ? 0 : c->rank;
}

int fc_comm_size(const struct fc_comm *c)
{
    return c == NULL ? 1 : c->size;
}

int fc_comm_uses_nccl(const struct fc_comm *c)
{
    return c != NULL && c->nccl != NULL;
}

int fc_comm_start_nccl(struct fc_comm *c, int engine)
{
    int ndev = 0;
    /* Every rank takes the same decision from the same command line and build. */
    if (c == NULL || c->size <= 1 || engine == FC_ENGINE_CPU || !fc_comm_nccl_available() ||
        fc_cuda_device_count(&ndev) < 0 || ndev <= 0)
        return FC_OK;
    return fc_comm_nccl_init(c, fc_local_rank(c->rank % ndev) % ndev);
}

int fc_local_rank(int fallback)
{
    const char *s = getenv("LOCAL_RANK");
    char *end = NULL;
    const long v = s != NULL ? strtol(s, &end, 10) : -1;
    return s != NULL && end != s && *end == '\0' && v >= 0 && v < 1024 ? (int)v : fallback;
}
