/*
 * fc_io.h - file I/O: large sequential preads, exact pwrites, atomic writes.
 *
 * Invariants: a struct fc_file opened here owns its descriptor and a copy of
 * its path, which every error message names.  Reads never go past the size
 * recorded at open time: a read beyond it is FC_ECORRUPT ("truncated"), since
 * the only reason to read there is a length field that lies.  We use pread,
 * not mmap, so that network filesystems and truncated files fail cleanly.
 */
#ifndef FC_IO_H
#define FC_IO_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

struct fc_fd_slot;

struct fc_file {
    int fd; /* files made by hand (temp files, fuzzers); -1 for fc_file_open_read()'s */
    uint64_t size;
    char *path;
    struct fc_fd_slot *slot; /* fc_file_open_read(): its descriptor in the pool, or NULL */
};

#define FC_FILE_INIT                                                                               \
    {                                                                                              \
        -1, 0, NULL, NULL                                                                          \
    }

/*
 * Open for reading; FC_ENOENT, FC_EIO, FC_ENOMEM, or FC_ECORRUPT when path is
 * not a regular file (a directory, FIFO, socket or device): every input file
 * is opened here, so nothing we read can block in open() or read().
 *
 * The descriptors of files opened here are pooled: at most RLIMIT_NOFILE
 * less 64 stay open across all of them (the soft limit first raised to the
 * hard one), and the least recently read idle one is closed to make room, so a 1000-rank checkpoint
 * reads under `ulimit -n 256`.  A closed one is reopened by path on its next
 * read; a file replaced or resized meanwhile is FC_ECORRUPT.  Thread-safe.
 */
int fc_file_open_read(struct fc_file *f, const char *path);
void fc_file_close(struct fc_file *f); /* accepts a never-opened FC_FILE_INIT */

/*
 * fc_file_pread() - read exactly n bytes at off.  FC_ECORRUPT when
 * [off, off+n) is not inside the file ("truncated"), FC_EIO on read errors.
 */
int fc_file_pread(const struct fc_file *f, void *dst, size_t n, uint64_t off);

/*
 * fc_file_read_alloc() - read [off, off+n) into a new buffer (NUL-terminated
 * for convenience; *out owned by the caller, free with fc_free).  Fails with
 * FC_ECORRUPT when n > cap (a declared length larger than we allow).
 */
int fc_file_read_alloc(const struct fc_file *f, uint64_t off, size_t n, size_t cap,
                       unsigned char **out);

/*
 * fc_text_each_line() - the lines of text[0, size) (rules, plans; text[size]
 * must be '\0'): cut each line at the first '#', trim blanks and '\r' at
 * both ends, skip empty lines, and call fn(ctx, line, where) for the rest in
 * order; `line` may be modified by fn, `where` is "NAME:LINE" for messages.
 * A NUL byte inside the text is FC_EINVAL naming its line (it would silently
 * end the text).  Stops at fn's first negative return, which it returns; else
 * FC_OK.  text is modified in place.
 */
typedef int (*fc_line_fn)(void *ctx, char *line, const char *where);
int fc_text_each_line(char *text, size_t size, const char *name, fc_line_fn fn, void *ctx);

/*
 * fc_file_each_line() - fc_text_each_line() on a small text file read whole
 * (FC_ECORRUPT past cap bytes), named by its path.  FC_ENOENT/FC_EIO/FC_ENOMEM
 * as the file calls.
 */
int fc_file_each_line(const char *path, size_t cap, fc_line_fn fn, void *ctx);

/* Hint sequential access for [off, off+n) (posix_fadvise); never fails. */
void fc_file_advise_sequential(const struct fc_file *f, uint64_t off, uint64_t n);

/*
 * Direct I/O (--io) for the bulk data of conversions: O_DIRECT requests of
 * FC_DIO_ALIGN-aligned ranges through aligned buffers, bypassing the page
 * cache whose copies cost more CPU than the rest of a conversion.
 *   FC_IO_BUFFERED  never
 *   FC_IO_DIRECT    every data read (fc_file_pread) and every write through an
 *                   fc_dio_writer
 *   FC_IO_AUTO      the same for requests of at least FC_DIO_AUTO_MIN bytes;
 *                   smaller ones (headers, tiny tensors) stay buffered.  A
 *                   cached input is then read from disk again: at 8 GiB from a
 *                   cold cache, buffered reads cost 1.6 s of system time per
 *                   GB and 1.3x the wall (tests/bench/bench_io.sh)
 * Where the filesystem refuses O_DIRECT (tmpfs, some network filesystems) the
 * same bytes go buffered, silently; fc_io_stats() tells which path ran.
 */
enum fc_io_mode { FC_IO_AUTO, FC_IO_BUFFERED, FC_IO_DIRECT };
#define FC_DIO_ALIGN    ((size_t)4096)
#define FC_DIO_AUTO_MIN ((size_t)256 << 10)
void fc_io_set_mode(enum fc_io_mode mode);
enum fc_io_mode fc_io_get_mode(void);
/* Bytes moved each way so far in this process, files whose filesystem refused O_DIRECT, and
 * whether direct I/O is off for want of room for its buffers (fc_dio_fit()). */
struct fc_io_stats {
    uint64_t direct_read, buffered_read, direct_written, buffered_written;
    uint64_t refused;
    int no_room;
    uint64_t queued_written; /* of direct_written, through io_uring (fc_dio_writer) */
    int uring_refused;       /* a URING=1 build could not set up an io_uring */
};
void fc_io_stats(struct fc_io_stats *out);

/*
 * fc_dio_writer - the writes of one run of consecutive bytes of an output
 * file (an item, a payload): copied into an aligned buffer of cap bytes and
 * written FC_DIO_ALIGN-aligned blocks at a time through an O_DIRECT
 * descriptor of the file; the partial blocks at either end of the run (shared
 * with the bytes around it, which other writers may own) go through the
 * buffered descriptor.  Direct and buffered writes never touch the same page.
 * Built with liburing, where the kernel lets the process set up an io_uring,
 * up to FC_DIO_DEPTH aligned writes stay in flight, each from a buffer of its
 * own (fc_dio_fit() counts them), even across runs and files; else one
 * synchronous pwrite at a time.
 *   fc_dio_open()   an O_DIRECT descriptor of the file open as fd at path
 *                   (same inode), or -1 (mode buffered, or refused: counted)
 *   fc_dio_put()    append n bytes to the run at file offset pos: a new run
 *                   begins when pos or the file differs from the last put's end
 *   fc_dio_flush()  write what the run holds and wait for every write in
 *                   flight; call before fsync and close of any file written
 *   fc_dio_release() frees the buffers (flush first; waits for writes in flight)
 * FC_EIO naming the path and offset (the first failure, returned by every later
 * call too), FC_ENOMEM.
 */
#define FC_DIO_DEPTH 4
struct fc_dio_writer {
    unsigned char *buf;
    size_t cap, len; /* buf holds the file's bytes [base, base + len) */
    uint64_t base;   /* aligned */
    uint64_t start;  /* the run's first byte (>= base while it is in buf) */
    int fd, dfd;     /* the run's file: buffered and O_DIRECT descriptors */
    const char *path;
    struct fc_dio_queue *q; /* its writes in flight (io_uring), or NULL */
};
#define FC_DIO_WRITER_INIT                                                                         \
    {                                                                                              \
        NULL, 0, 0, 0, 0, -1, -1, NULL, NULL                                                       \
    }
int fc_dio_open(int fd, const char *path);
/* The direct-I/O buffers a thread may hold (a writer's, a read's bounce), 0 when buffered:
 * callers take them out of their --max-memory budget. */
uint64_t fc_dio_thread_bytes(void);
/*
 * fc_dio_fit() - size those buffers to fit in room bytes a thread: requests of
 * room/2 bytes, at most 8 MiB; below 256 KiB direct I/O is off (buffered) until
 * fitted again.  Call while no direct I/O is in flight.  Returns
 * fc_dio_thread_bytes().
 */
uint64_t fc_dio_fit(uint64_t room);
int fc_dio_put(struct fc_dio_writer *w, int fd, int dfd, const char *path, uint64_t pos,
               const void *p, size_t n);
int fc_dio_flush(struct fc_dio_writer *w);
void fc_dio_release(struct fc_dio_writer *w);
/* The most writes one writer had in flight at once in this process (tests). */
int fc_dio_inflight_peak(void);

/* Write exactly n bytes at off; FC_EIO naming path (ENOSPC, EFBIG, ...). */
int fc_pwrite_full(int fd, const void *p, size_t n, uint64_t off, const char *path);

/*
 * fc_file_create() - create a new output file for writing (mode 0644 less the
 * umask) and set *fd_out.  Every output file is created here: O_EXCL and
 * O_NOFOLLOW, so a name that exists (a symlink planted there included) is
 * FC_EIO naming path, never opened or written through.
 */
int fc_file_create(const char *path, int *fd_out);

/*
 * fc_write_file_atomic() - write data to "<path>.tmp" (created with
 * fc_file_create()), fsync, rename to path.  On failure the temporary is
 * removed and path is untouched.
 */
int fc_write_file_atomic(const char *path, const void *data, size_t n);

/*
 * Staged output: every command writes its output under a partial name beside
 * the target, then commits it (one rename) or aborts (removes it).  Staging
 * names end in 64 random bits ("<target>.partial-<pid>-<16 hex digits>"), so
 * nobody can plant a symlink where we will write: the directory of an output
 * may be shared (/tmp), and a planted name is refused rather than followed.
 *
 *   fc_stage_begin()  refuses a target that exists (unless force) or is a
 *                     dangling symlink; removes the partials that killed runs
 *                     left beside it ("<target>.partial-<pid>-*" whose pid is
 *                     gone); makes ->path (a new directory when is_dir, else a
 *                     name for the caller to create with fc_file_create()).
 *   fc_stage_commit() the caller has written and fsynced everything under
 *                     ->path; fsyncs ->path itself (directories), then, with
 *                     SIGINT/SIGTERM held back, asks cancelled() one last time
 *                     and renames ->path into place: never over a target that
 *                     appeared meanwhile (FC_EINVAL) and, with force, never
 *                     losing both checkpoints: the old one is swapped out
 *                     atomically (RENAME_EXCHANGE) or, where the filesystem
 *                     cannot, first renamed to "<target>.old-<pid>-<random>", which
 *                     no cleaner removes; it is deleted once the new target and
 *                     its directory entry are durable.  A signal that arrives
 *                     after the rename no longer stops the command.  Once the
 *                     rename is done the new output stays and the old one is
 *                     removed even if syncing the directory fails (FC_EIO,
 *                     whose message says so).
 *   fc_stage_release() removes ->path when it was not committed; frees.
 *
 * cancelled (may be NULL) returns nonzero when the user asked to stop.
 */
struct fc_stage {
    char *target;
    char *path;   /* write here */
    char *parent; /* directory of target and path */
    int is_dir;
    int force;
    int committed;
    int (*cancelled)(void);
};

int fc_stage_begin(struct fc_stage *st, const char *target, int is_dir, int force,
                   int (*cancelled)(void));
int fc_stage_commit(struct fc_stage *st);

/*
 * fc_hold_interrupts() - block SIGINT and SIGTERM in this thread, the old mask
 * into *saved; fc_release_interrupts() restores it, delivering a signal that
 * came meanwhile.  Around a moment that must not be cut in two (the commit's
 * rename, a staging dir made and registered for the signal handler).
 */
void fc_hold_interrupts(sigset_t *saved);
void fc_release_interrupts(const sigset_t *saved);
void fc_stage_release(struct fc_stage *st);

/* fsync a directory so that renames inside it are durable. */
int fc_fsync_dir(const char *dir);

/* Remove a file or directory tree (no symlink following).  ENOENT is OK. */
int fc_remove_tree(const char *path);

/* 1 if path is a directory, 0 if it is something else, FC_ENOENT if absent. */
int fc_path_is_dir(const char *path);

/* Join dir and name with '/' into a new string (owned by caller). */
char *fc_path_join(const char *dir, const char *name);

/* 1 if s (a path, a file name) ends with suffix, else 0. */
int fc_ends_with(const char *s, const char *suffix);

#endif
