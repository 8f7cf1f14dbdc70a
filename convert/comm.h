/*
 * comm.h - the control connection of a multi-process job, and the NCCL data
 * path of --engine cuda.
 *
 * CPU jobs have independent workers (share.h): every process plans alone and
 * writes its own share of the rank files; the connection carries only each
 * worker's status to rank 0 (fc_comm_report/gather) and the job's outcome
 * back (fc_comm_done/await), after which rank 0 alone commits.  With NCCL
 * (--engine cuda) rank 0 transforms on its GPU and sends each worker the
 * bytes of its files GPU to GPU, driven by the file protocol below.
 *
 * struct fc_comm is a star: rank 0 holds one connection per worker, a worker
 * one connection to rank 0.  Two ways to get one: fc_comm_fork() forks the
 * workers of `--nproc P` with a socketpair each; fc_comm_env() joins a job
 * started by torchrun/srun-style launchers (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) over TCP.  Messages are framed and checked; a peer that dies or
 * closes its end is an error on the next send or receive, never a hang
 * (SIGPIPE is ignored; every blocking call has the other side's lifetime).
 *
 * The file protocol of the NCCL path (rank 0 -> worker; "ack" = worker ->
 * rank 0 status):
 *   OPEN  file path               worker creates it
 *   WRITE file offset length      pwrite of the bytes that follow over NCCL
 *   CLOSE file             ack    fsync + close, status of every write
 *   END                    ack    the worker holds no open file
 *   DONE  ok|failed               the job's outcome; the worker exits 0 or 1
 * Files are dealt to workers round-robin: file r belongs to rank r % size.
 */
#ifndef FC_COMM_H
#define FC_COMM_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "fc_convert.h"

struct fc_comm {
    int rank;
    int size;
    int *fds;               /* rank 0: fds[peer] for peers 1..size-1; worker: fds[0] */
    pthread_mutex_t *locks; /* rank 0: one per peer, held for a whole file */
    int forked;             /* fc_comm_fork(): rank 0 reaps its children */
    int done_sent;          /* rank 0 told the workers the outcome */
    int *pids;
    void *nccl; /* the NCCL data path when in use (comm_nccl.c), else NULL */
};

/*
 * fc_local_rank() - the GPU of this process: LOCAL_RANK as torchrun sets it
 * (a decimal in 0..1023), else `fallback` (unset, empty, or not such a
 * number).
 */
int fc_local_rank(int fallback);

/* Owner rank of rank-file r. */
static inline int fc_comm_owner(const struct fc_comm *c, int file_rank)
{
    return c == NULL || c->size <= 1 ? 0 : file_rank % c->size;
}

/* ---- rank 0 side ---- */

/* fc_comm_fork/env/serve/done/free/rank are declared in fc_convert.h (cmd/ uses them). */

/* Send OPEN/WRITE/CLOSE for one file of peer; CLOSE waits for the ack. */
int fc_comm_open(struct fc_comm *c, int peer, uint32_t file, const char *path);
int fc_comm_write(struct fc_comm *c, int peer, uint32_t file, uint64_t offset, const void *p,
                  size_t n);
int fc_comm_close(struct fc_comm *c, int peer, uint32_t file);

/* END to every worker and wait for every ack (all files durable). */
int fc_comm_finish(struct fc_comm *c);

/* A worker's status after its share: FC_OK, or rc < 0 with fc_error_last() as the message. */
int fc_comm_report(struct fc_comm *c, int rc);

/* Rank 0: every worker's status (or its death); the first failure, naming its rank. */
int fc_comm_gather(struct fc_comm *c);

/* A worker: wait for the job's outcome (fc_comm_done): FC_OK, FC_ERROR (it failed), FC_EIO (rank 0
 * is gone). */
int fc_comm_await(struct fc_comm *c);

/* Raw bytes over the socket to/from a peer (bootstrap of the NCCL data path). */
int fc_comm_send_raw(struct fc_comm *c, int peer, const void *p, size_t n);
int fc_comm_recv_raw(struct fc_comm *c, int peer, void *p, size_t n);

/*
 * The NCCL data path (comm_nccl.c with NCCL=1, comm_nccl_stub.c otherwise):
 * WRITE payloads go GPU to GPU, control stays on the sockets.
 * fc_comm_nccl_init() is collective: every rank calls it on its device.
 */
int fc_comm_nccl_available(void);
int fc_comm_nccl_init(struct fc_comm *c, int device);
void fc_comm_nccl_free(struct fc_comm *c);
int fc_comm_nccl_send(struct fc_comm *c, int peer, const void *p, size_t n);
int fc_comm_nccl_recv(struct fc_comm *c, size_t n, const void **out);

#endif
