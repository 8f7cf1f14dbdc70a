/*
 * fuzz_tcp_meta.c - torch_checkpointing metadata.pkl reader and shard geometry.
 *
 * Parse the input; on success compute every rank's box of every tensor group
 * and check it lies inside the global shape (a box outside it would make a
 * reader copy out of bounds).  Any violation aborts (a finding).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "fc_tcp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_group(const struct fc_tcp_group *g)
{
    for (size_t k = 0; k < g->nranks; k++) {
        int64_t off[FC_MAX_DIMS], sz[FC_MAX_DIMS];
        if (fc_tcp_local_box(g, g->ranks[k], off, sz, "fuzz", "t") < 0)
            continue;
        for (int d = 0; d < g->ndim; d++)
            if (off[d] < 0 || sz[d] < 0 || off[d] > g->shape[d] - sz[d])
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fc_tcp_meta *m = NULL;
    if (fc_tcp_meta_parse(&m, data, size, "fuzz/metadata.pkl") < 0)
        return 0;
    for (size_t i = 0; i < m->nitems; i++)
        for (size_t p = 0; p < m->items[i].npaths; p++)
            for (size_t g = 0; g < m->items[i].paths[p].ngroups; g++)
                check_group(&m->items[i].paths[p].groups[g]);
    fc_tcp_meta_free(m);
    return 0;
}
