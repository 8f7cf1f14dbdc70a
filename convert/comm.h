/*
 * comm.h - the multi-process transport: rank 0 reads, transforms and sends
 * each worker the bytes of the files it owns; workers only write.
 *
 * struct fc_comm is a star: rank 0 holds one connection per worker, a worker
 * one connection to rank 0.  Two ways to get one: fc_comm_fork() forks the
 * workers of `--nproc P` with a socketpair each; fc_comm_env() joins a job
 * started by torchrun/srun-style launchers (RANK, WORLD_SIZE, MASTER_ADDR,
 * MASTER_PORT) over TCP.  Messages are framed and checked; a peer that dies or
 * closes its end is an error on the next send or receive, never a hang
 * (SIGPIPE is ignored; every blocking call has the other side's lifetime).
 *
 * The file protocol (rank 0 -> worker; "ack" = worker -> rank 0 status):
 *   OPEN  file path               worker creates/truncates it
 *   WRITE file offset bytes       pwrite
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
