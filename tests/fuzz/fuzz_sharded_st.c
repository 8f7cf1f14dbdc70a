/*
 * fuzz_sharded_st.c - fuzz the per-rank (sharded) safetensors directory
 * reader: each file's header and its __metadata__ DCP_SHARDING_INFO JSON
 * (saved_offsets), and what the directory's files make together (the global
 * shape inferred from the furthest chunk ends, its overflow checks, the
 * chunk index, last-file-wins duplicates).
 *
 * An input is up to FUZZ_MAX_FILES files separated by FUZZ_SEP, written as
 * shard-0000N-model-00001-of-00001.safetensors into a scratch directory
 * (made once, emptied for every input) and opened with fc_source_open().  On
 * success, for a sharded source: every tensor's element count and byte size
 * (zero dims as 1) fit int64; fc_source_sharded_meta() lists chunks inside
 * the shape; and when fc_dcp_check() finds the chunks tile a tensor of at
 * most 1 MiB, reading it whole succeeds.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_dcp.h"
#include "fc_dtype.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_source.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FUZZ_SEP       "\n--fsdpconv-next-rank--\n"
#define FUZZ_MAX_FILES 8
#define FUZZ_READ_CAP  ((uint64_t)1 << 20)

static char fuzz_dir[64];

static void fuzz_cleanup(void)
{
    if (fuzz_dir[0] != '\0')
        (void)fc_remove_tree(fuzz_dir);
}

static int fuzz_write_file(int i, const uint8_t *data, size_t size)
{
    char path[160];
    snprintf(path, sizeof(path), "%s/shard-%05d-model-00001-of-00001.safetensors", fuzz_dir, i + 1);
    FILE *f = fopen(path, "wb");
    if (f == NULL)
        return -1;
    const int ok = fwrite(data, 1, size, f) == size;
    return fclose(f) == 0 && ok ? 0 : -1;
}

/* Offset of the first FUZZ_SEP in data[0..size), or size. */
static size_t fuzz_find_sep(const uint8_t *data, size_t size)
{
    const size_t seplen = sizeof(FUZZ_SEP) - 1;
    for (size_t i = 0; i + seplen <= size; i++)
        if (data[i] == FUZZ_SEP[0] && memcmp(data + i, FUZZ_SEP, seplen) == 0)
            return i;
    return size;
}

/* The input's files, replacing the previous input's. */
static int fuzz_write_dir(const uint8_t *data, size_t size)
{
    if (fuzz_dir[0] == '\0') {
        snprintf(fuzz_dir, sizeof(fuzz_dir), "/tmp/fuzz_sharded_st_XXXXXX");
        if (mkdtemp(fuzz_dir) == NULL)
            return -1;
        atexit(fuzz_cleanup);
    }
    for (int i = 0; i < FUZZ_MAX_FILES; i++) {
        char path[160];
        snprintf(path, sizeof(path), "%s/shard-%05d-model-00001-of-00001.safetensors", fuzz_dir,
                 i + 1);
        (void)unlink(path);
    }
    const size_t seplen = sizeof(FUZZ_SEP) - 1;
    int n = 0;
    while (n < FUZZ_MAX_FILES) {
        const size_t len = n + 1 < FUZZ_MAX_FILES ? fuzz_find_sep(data, size) : size;
        if (fuzz_write_file(n++, data, len) != 0)
            return -1;
        if (len == size)
            break;
        data += len + seplen;
        size -= len + seplen;
    }
    return 0;
}

static void fuzz_check_sharded(const struct fc_source *src)
{
    struct fc_dcp_meta *m = NULL;
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        int64_t n = (int64_t)fc_dtype_size(e->t.dtype);
        for (int d = 0; d < e->t.ndim; d++)
            if (__builtin_mul_overflow(n, e->t.shape[d] > 0 ? e->t.shape[d] : 1, &n))
                abort();
    }
    if (fc_source_sharded_meta(src, &m) != FC_OK) {
        if (m != NULL)
            abort();
        return;
    }
    if (m->nentries != src->nentries)
        abort();
    for (size_t i = 0; i < m->nentries; i++) {
        const struct fc_dcp_entry *e = &m->entries[i];
        for (size_t c = 0; c < e->nchunks; c++)
            for (int d = 0; d < e->ndim; d++)
                if (e->chunks[c].offsets[d] < 0 ||
                    e->chunks[c].sizes[d] > e->size[d] - e->chunks[c].offsets[d])
                    abort();
    }
    /* Where the chunks tile every tensor, every small tensor reads whole. */
    if (fc_dcp_check(m, NULL, NULL) == FC_OK) {
        for (size_t i = 0; i < src->nentries; i++) {
            const struct fc_entry *e = &src->entries[i];
            const uint64_t nb = fc_shape_nbytes(e->t.shape, e->t.ndim, e->t.dtype);
            if (nb > FUZZ_READ_CAP)
                continue;
            int64_t off[FC_MAX_DIMS] = {0};
            void *buf = fc_malloc((size_t)nb + 1);
            if (buf == NULL)
                abort();
            if (fc_source_read_box(src, e, off, e->t.shape, buf) != FC_OK)
                abort();
            fc_free(buf);
        }
    }
    fc_dcp_meta_free(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct fc_source *src = NULL;
    if (fuzz_write_dir(data, size) != 0)
        return 0;
    if (fc_source_open(&src, fuzz_dir, 0) != FC_OK) {
        if (src != NULL)
            abort();
        return 0;
    }
    if (strcmp(src->format, "safetensors-sharded") == 0)
        fuzz_check_sharded(src);
    fc_source_free(src);
    return 0;
}
