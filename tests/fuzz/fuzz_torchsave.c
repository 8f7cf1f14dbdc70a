/*
 * fuzz_torchsave.c - fc_torchsave_open (and fc_torchsave_open_dtensor, the
 * profile of torch_checkpointing's rank files) on arbitrary bytes; on success, the
 * storage table is checked against the tree (every tensor node's storage is
 * found, its view fits), and every tensor is written back as a one-tensor blob
 * (dense, same dtype and shape), which must read back with that dtype and
 * shape.  The input goes through an unlinked temporary file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_torchsave.h"

static char fuzz_path[] = "fuzz-input.pt";

static int fuzz_load(int *slot, const void *data, size_t size, struct fc_file *f)
{
    if (*slot < 0) {
        char tmpl[] = "/tmp/fuzz_torchsave_XXXXXX";
        *slot = mkstemp(tmpl);
        if (*slot < 0)
            return -1;
        unlink(tmpl);
    }
    if (ftruncate(*slot, 0) != 0)
        return -1;
    if (size > 0 && fc_pwrite_full(*slot, data, size, 0, fuzz_path) != 0)
        return -1;
    f->fd = *slot;
    f->size = size;
    f->path = fuzz_path;
    return 0;
}

/* Write t's dtype/shape as a blob of zeros and read it back. */
static void fuzz_blob(const struct fc_pv_tensor *t)
{
    static int fd2 = -1;
    struct fc_tsblob b;
    struct fc_buf out = FC_BUF_INIT((size_t)4 << 20);
    struct fc_file f2 = FC_FILE_INIT;
    struct fc_torchsave *ts2 = NULL;

    if (fc_tsblob_init(&b, t->desc.dtype, t->desc.shape, t->desc.ndim, 0) != FC_OK)
        goto done; /* e.g. a shape too large to describe */
    if (b.data_size > ((size_t)1 << 20))
        goto done;
    if (fc_tsblob_head(&b, &out) != FC_OK || fc_buf_fill(&out, 0, (size_t)b.data_size) != FC_OK)
        goto done;
    {
        unsigned char *zeros = calloc(1, (size_t)b.data_size + 1);
        if (zeros == NULL)
            goto done;
        const uint32_t crc = fc_crc32(0, zeros, (size_t)b.data_size);
        free(zeros);
        if (fc_tsblob_tail(&b, crc, &out) != FC_OK)
            goto done;
    }
    if (out.len != b.total_size || fuzz_load(&fd2, out.data, out.len, &f2) != 0)
        goto done;
    if (fc_torchsave_open(&ts2, &f2, 0, f2.size, "blob") != FC_OK)
        abort(); /* our own blob must read back */
    const struct fc_pv *root = fc_torchsave_root(ts2);
    if (root->kind != FC_PV_TENSOR || root->u.tensor.desc.dtype != t->desc.dtype ||
        root->u.tensor.desc.ndim != t->desc.ndim ||
        memcmp(root->u.tensor.desc.shape, t->desc.shape,
               (size_t)t->desc.ndim * sizeof(t->desc.shape[0])) != 0)
        abort();
    fc_torchsave_free(ts2);
done:
    fc_buf_release(&out);
    fc_tsblob_release(&b);
}

/* Depth-first over the tree (bounded: the pickle nesting limit caps the depth). */
static void fuzz_walk(const struct fc_torchsave *ts, const struct fc_pv *v, unsigned *budget)
{
    if (v == NULL || *budget == 0)
        return;
    (*budget)--;
    switch (v->kind) {
    case FC_PV_TENSOR: {
        const size_t i = fc_torchsave_storage_index(ts, &v->u.tensor);
        if (i >= fc_torchsave_storage_count(ts))
            abort();
        if (fc_torchsave_storage_at(ts, i)->dtype != v->u.tensor.desc.dtype)
            abort();
        fuzz_blob(&v->u.tensor);
        break;
    }
    case FC_PV_LIST:
    case FC_PV_TUPLE:
    case FC_PV_SET:
        for (size_t i = 0; i < v->u.seq.n; i++)
            fuzz_walk(ts, v->u.seq.items[i], budget);
        break;
    case FC_PV_DICT:
        for (size_t i = 0; i < v->u.dict.n; i++)
            fuzz_walk(ts, v->u.dict.vals[i], budget);
        break;
    case FC_PV_CALL:
    case FC_PV_OBJECT:
        fuzz_walk(ts, v->u.call.args, budget);
        break;
    case FC_PV_NONE:
    case FC_PV_BOOL:
    case FC_PV_INT:
    case FC_PV_BIGINT:
    case FC_PV_FLOAT:
    case FC_PV_STR:
    case FC_PV_BYTES:
    case FC_PV_GLOBAL:
    default:
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    struct fc_file f = FC_FILE_INIT;
    struct fc_torchsave *ts = NULL;

    (void)fc_torchsave_detect(data, size, size);
    if (fuzz_load(&fd, data, size, &f) != 0)
        return 0;
    /* weights-only, then the DTensor profile of torch_checkpointing's rank files */
    for (int dtensor = 0; dtensor < 2; dtensor++) {
        const int rc = dtensor ? fc_torchsave_open_dtensor(&ts, &f, 0, f.size, "fuzz")
                               : fc_torchsave_open(&ts, &f, 0, f.size, "fuzz");
        if (rc != FC_OK)
            continue;
        unsigned budget = 64;
        for (size_t i = 0; i < fc_torchsave_storage_count(ts); i++) {
            const struct fc_ts_storage *s = fc_torchsave_storage_at(ts, i);
            if (s->nrefs == 0 || s->data_offset + s->nbytes > f.size)
                abort();
        }
        fuzz_walk(ts, fc_torchsave_root(ts), &budget);
        fc_torchsave_free(ts);
        ts = NULL;
    }
    fc_error_clear();
    return 0;
}
