/*
 * fc_dio_internal.h - what fc_io.c's reads share with fc_dio.c (see fc_io.h,
 * "Direct I/O").
 */
#ifndef FC_DIO_INTERNAL_H
#define FC_DIO_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* Bytes per direct request (and per bounce or writer buffer): at most the
 * first, at least the second when fc_dio_fit() shrinks them to a small share. */
#define FC_DIO_CHUNK_MAX ((size_t)8 << 20)
#define FC_DIO_CHUNK_MIN ((size_t)256 << 10)

/* Should a read or write of n bytes go direct in the current mode? */
int fc_dio_wanted(size_t n);

/* Count n bytes moved (direct or buffered, written or read) for fc_io_stats(). */
void fc_dio_count(int direct, int write, uint64_t n);
void fc_dio_count_refused(void);

/*
 * fc_dio_pread() - [off, off+n) of the file open as dfd (O_DIRECT) into dst,
 * through aligned bounce buffers (fc_dio_fit()).  *refused set (and
 * FC_OK returned, nothing read) when the filesystem refuses the first request;
 * FC_EIO, FC_ECORRUPT (the file ends early), FC_ENOMEM.
 */
int fc_dio_pread(int dfd, void *dst, size_t n, uint64_t off, const char *path, int *refused);

#endif
