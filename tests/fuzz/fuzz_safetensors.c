/*
 * fuzz_safetensors.c - fuzz the safetensors header reader and the
 * index.json loader.
 *
 * Each input is written to one scratch file (created once, rewritten for
 * every input) and handed to both parsers: fc_safetensors_open() reads it as
 * a safetensors file, fc_st_index_load() as a model.safetensors.index.json
 * (inputs starting with '{' reach the index loader's JSON checks).  On
 * success, every tensor is checked against the invariants the reader
 * promises: its bytes lie inside the data buffer, and nbytes equals the
 * torch view's numel times the element size.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_dtype.h"
#include "fc_safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char fuzz_path[64];
static int fuzz_fd = -1;

static void fuzz_cleanup(void)
{
    if (fuzz_fd >= 0) {
        close(fuzz_fd);
        unlink(fuzz_path);
    }
}

static int fuzz_write(const uint8_t *data, size_t size)
{
    if (fuzz_fd < 0) {
        snprintf(fuzz_path, sizeof(fuzz_path), "/tmp/fuzz_safetensors_XXXXXX");
        fuzz_fd = mkstemp(fuzz_path);
        if (fuzz_fd < 0)
            return -1;
        atexit(fuzz_cleanup);
    }
    if (ftruncate(fuzz_fd, 0) != 0)
        return -1;
    size_t done = 0;
    while (done < size) {
        const ssize_t w = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
        if (w <= 0)
            return -1;
        done += (size_t)w;
    }
    return 0;
}

static void fuzz_check(const struct fc_safetensors *st, uint64_t file_size)
{
    const uint64_t start = fc_safetensors_data_start(st);
    if (start > file_size)
        abort();
    for (size_t i = 0; i < fc_safetensors_count(st); i++) {
        const struct fc_st_tensor *t = fc_safetensors_at(st, i);
        if (t == NULL || t->name == NULL || t->st_dtype == NULL)
            abort();
        if (t->data_offset < start || t->nbytes > file_size - t->data_offset)
            abort();
        if (t->ndim < 0 || t->ndim > FC_MAX_DIMS)
            abort();
        uint64_t numel = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0)
                abort();
            numel *= (uint64_t)t->shape[d];
        }
        if (numel * fc_dtype_size(t->dtype) != t->nbytes)
            abort();
    }
    for (size_t i = 0; i < fc_safetensors_metadata_count(st); i++) {
        const char *k, *v;
        if (fc_safetensors_metadata_at(st, i, &k, &v) != 0 ||
            fc_safetensors_metadata(st, k) == NULL)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (fuzz_write(data, size) != 0)
        return 0;

    /* The reader only needs an fd and a size: no reopen per input. */
    struct fc_file f = {fuzz_fd, size, fuzz_path, NULL};
    struct fc_safetensors *st = NULL;
    if (fc_safetensors_open(&st, &f) == 0)
        fuzz_check(st, size);
    else if (st != NULL)
        abort();
    fc_safetensors_free(st);

    struct fc_st_index idx;
    if (fc_st_index_load(&idx, fuzz_path) == 0) {
        for (size_t k = 0; k < idx.nkeys; k++)
            if (idx.key_file[k] >= idx.nfiles || idx.keys[k] == NULL)
                abort();
        for (size_t i = 0; i < idx.nfiles; i++)
            if (idx.files[i][0] == '\0' || idx.files[i][0] == '.' ||
                strchr(idx.files[i], '/') != NULL)
                abort();
    }
    fc_st_index_release(&idx);
    return 0;
}
