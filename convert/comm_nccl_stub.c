/*
 * comm_nccl_stub.c - builds without NCCL: the socket transport carries
 * everything (curl's stub pattern, so comm_sock.c has no #ifdefs).
 */
#include "comm.h"
#include "fc_error.h"

int fc_comm_nccl_available(void)
{
    return 0;
}

int fc_comm_nccl_init(struct fc_comm *c, int device)
{
    (void)c;
    (void)device;
    return fc_error_set(FC_ENOTSUP, "this fsdpconv was built without NCCL (make CUDA=1 NCCL=1)");
}

void fc_comm_nccl_free(struct fc_comm *c)
{
    (void)c;
}

int fc_comm_nccl_send(struct fc_comm *c, int peer, const void *p, size_t n)
{
    (void)c;
    (void)peer;
    (void)p;
    (void)n;
    return fc_error_set(FC_ENOTSUP, "NCCL transport not built in");
}

int fc_comm_nccl_recv(struct fc_comm *c, size_t n, const void **out)
{
    (void)c;
    (void)n;
    *out = NULL;
    return fc_error_set(FC_ENOTSUP, "NCCL transport not built in");
}
