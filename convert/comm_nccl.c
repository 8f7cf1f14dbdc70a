/*
 * comm_nccl.c - the NCCL data path of the multi-process transport (built
 * with NCCL=1; comm_nccl_stub.c otherwise).
 *
 * Control messages (OPEN, CLOSE, acks, the job's end) stay on the sockets of
 * comm_sock.c; only WRITE payloads move over NCCL, GPU to GPU: rank 0 stages
 * the slab in device memory and ncclSends it, the owning worker ncclRecvs it
 * into its own GPU and copies it to the host to write.  Bootstrap: rank 0
 * creates the ncclUniqueId and sends it over the sockets; every rank then
 * joins with ncclCommInitRank on its own device.  One communicator per
 * process: rank 0 serialises its sends (NCCL calls on one communicator are
 * not thread-safe), and per-pair FIFO order matches the socket headers.
 */
#include <stdio.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "comm.h"
#include "cuda_check.h"
#include "fc_alloc.h"
#include "fc_error.h"

struct fc_nccl {
    ncclComm_t comm;
    cudaStream_t stream;
    void *dbuf;
    size_t cap;
    void *pinned;
    size_t pinned_cap;
    pthread_mutex_t lock;
};

/* NCCL's counterpart of cuda_check.h's FC_CUDA_TRY: the call, NCCL's reason and its last error. */
#define FC_NCCL_TRY(call)                                                                          \
    do {                                                                                           \
        const ncclResult_t r_ = (call);                                                            \
        if (r_ != ncclSuccess)                                                                     \
            return fc_error_set(FC_ENCCL, "%s: %s (%s)", #call, ncclGetErrorString(r_),            \
                                ncclGetLastError(NULL));                                           \
    } while (0)

int fc_comm_nccl_available(void)
{
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

static int fc_nccl_reserve(struct fc_nccl *nc, size_t n)
{
    if (n <= nc->cap)
        return FC_OK;
    if (nc->dbuf != NULL)
        FC_CUDA_TRY(cudaFree(nc->dbuf));
    nc->dbuf = NULL;
    nc->cap = 0;
    FC_CUDA_TRY(cudaMalloc(&nc->dbuf, n));
    nc->cap = n;
    if (nc->pinned != NULL)
        FC_CUDA_TRY(cudaFreeHost(nc->pinned));
    nc->pinned = NULL;
    nc->pinned_cap = 0;
    FC_CUDA_TRY(cudaMallocHost(&nc->pinned, n));
    nc->pinned_cap = n;
    return FC_OK;
}

int fc_comm_nccl_init(struct fc_comm *c, int device)
{
    ncclUniqueId id;
    struct fc_nccl *nc = fc_calloc(1, sizeof(*nc));
    if (nc == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    pthread_mutex_init(&nc->lock, NULL);
    c->nccl = nc;
    FC_CUDA_TRY(cudaSetDevice(device));
    FC_CUDA_TRY(cudaStreamCreateWithFlags(&nc->stream, cudaStreamNonBlocking));
    if (c->rank == 0) {
        FC_NCCL_TRY(ncclGetUniqueId(&id));
        for (int p = 1; p < c->size; p++)
            FC_TRY(fc_comm_send_raw(c, p, &id, sizeof(id)));
    } else {
        FC_TRY(fc_comm_recv_raw(c, 0, &id, sizeof(id)));
    }
    FC_NCCL_TRY(ncclCommInitRank(&nc->comm, c->size, id, c->rank));
    return FC_OK;
}

void fc_comm_nccl_free(struct fc_comm *c)
{
    struct fc_nccl *nc = c->nccl;
    if (nc == NULL)
        return;
    if (nc->comm != NULL)
        (void)ncclCommDestroy(nc->comm);
    if (nc->dbuf != NULL)
        (void)cudaFree(nc->dbuf);
    if (nc->pinned != NULL)
        (void)cudaFreeHost(nc->pinned);
    if (nc->stream != NULL)
        (void)cudaStreamDestroy(nc->stream);
    pthread_mutex_destroy(&nc->lock);
    fc_free(nc);
    c->nccl = NULL;
}

/* Rank 0: host bytes -> device staging -> ncclSend to peer; complete on return. */
static int fc_nccl_send_locked(struct fc_nccl *nc, int peer, const void *p, size_t n)
{
    FC_TRY(fc_nccl_reserve(nc, n));
    memcpy(nc->pinned, p, n);
    FC_CUDA_TRY(cudaMemcpyAsync(nc->dbuf, nc->pinned, n, cudaMemcpyHostToDevice, nc->stream));
    FC_NCCL_TRY(ncclSend(nc->dbuf, n, ncclUint8, peer, nc->comm, nc->stream));
    FC_CUDA_TRY(cudaStreamSynchronize(nc->stream));
    return FC_OK;
}

int fc_comm_nccl_send(struct fc_comm *c, int peer, const void *p, size_t n)
{
    struct fc_nccl *nc = c->nccl;
    pthread_mutex_lock(&nc->lock);
    const int rc = fc_nccl_send_locked(nc, peer, p, n);
    pthread_mutex_unlock(&nc->lock);
    return rc;
}

/* Worker: ncclRecv from rank 0 into the device, then to host memory *out (valid until the next
 * call). */
int fc_comm_nccl_recv(struct fc_comm *c, size_t n, const void **out)
{
    struct fc_nccl *nc = c->nccl;
    FC_TRY(fc_nccl_reserve(nc, n));
    FC_NCCL_TRY(ncclRecv(nc->dbuf, n, ncclUint8, 0, nc->comm, nc->stream));
    FC_CUDA_TRY(cudaMemcpyAsync(nc->pinned, nc->dbuf, n, cudaMemcpyDeviceToHost, nc->stream));
    FC_CUDA_TRY(cudaStreamSynchronize(nc->stream));
    *out = nc->pinned;
    return FC_OK;
}
