/*
 * test_exec.c - the executor pays for an item's CRC-32 only when the output
 * stores it (issue 25): a DCP's zip entries need it, per-rank safetensors
 * files do not.  Linked with -Wl,--wrap=fc_crc32 (Makefile), so every CRC the
 * executor computes passes through the counter below.
 */
#include "fc_test.h"

#include <sys/wait.h>
#include <unistd.h>

#include "fc_convert.h"
#include "fc_source.h"
#include "fc_tensor.h"
#include "fc_zip.h"

uint32_t __real_fc_crc32(uint32_t crc, const void *p, size_t n);
uint32_t __wrap_fc_crc32(uint32_t crc, const void *p, size_t n);

static uint64_t crc_bytes; /* bytes hashed through fc_crc32 from outside fc_zip.c */

uint32_t __wrap_fc_crc32(uint32_t crc, const void *p, size_t n)
{
    crc_bytes += n;
    return __real_fc_crc32(crc, p, n);
}

/*
 * Bytes hashed by full-to-dcp of the fixture onto 2 ranks as `format`, run in
 * a child process: a conversion is what one fsdpconv process does, and the
 * child's counter is the conversion's alone.
 */
static uint64_t crc_bytes_of_full_to_dcp(enum fc_out_format format)
{
    char *dir = fc_test_tmpdir();
    assert_non_null(dir);
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    const pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        char out[4096];
        snprintf(out, sizeof(out), "%s/out", dir);
        struct fc_full_to_dcp_opts o = FC_FULL_TO_DCP_OPTS_INIT;
        /* the input's own CRCs are not the executor's: leave them unchecked */
        o.source_flags = FC_SOURCE_NO_VERIFY;
        o.input = fc_test_fixture("full/tiny_vitlm.pt");
        o.output = out;
        o.format = format;
        o.replicate = 1;
        o.shard = 2;
        o.threads = 1;
        struct fc_full_to_dcp_result res;
        crc_bytes = 0;
        const int rc = fc_full_to_dcp(&o, &res);
        if (rc != FC_OK)
            fprintf(stderr, "fc_full_to_dcp: %s\n", fc_error_last());
        const int ok = rc == FC_OK && res.ntensors == 51;
        if (rc == FC_OK)
            fc_full_to_dcp_result_release(&res);
        _exit(ok && write(pfd[1], &crc_bytes, sizeof(crc_bytes)) == sizeof(crc_bytes) ? 0 : 1);
    }
    close(pfd[1]);
    uint64_t n = UINT64_MAX;
    const ssize_t got = read(pfd[0], &n, sizeof(n));
    close(pfd[0]);
    int status = -1;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_int_equal(got, sizeof(n));
    fc_test_rmdir(dir);
    return n;
}

/* Do entries a and b view the same bytes (a tied weight: one storage, same view)? */
static int same_view(const struct fc_entry *a, const struct fc_entry *b)
{
    return a->storage == b->storage && a->t.dtype == b->t.dtype && a->t.ndim == b->t.ndim &&
           a->t.storage_offset == b->t.storage_offset &&
           memcmp(a->t.shape, b->t.shape, sizeof(a->t.shape[0]) * (size_t)a->t.ndim) == 0 &&
           memcmp(a->t.stride, b->t.stride, sizeof(a->t.stride[0]) * (size_t)a->t.ndim) == 0;
}

/*
 * Bytes of the fixture's tensors that the DCP sink hashes: on FSDP2 ranks
 * every element is stored once, and the items of a tied weight (lm_head and
 * embed_tokens) hold the same bytes, hashed once for both.
 */
static uint64_t fixture_hashed_bytes(void)
{
    struct fc_source *src = NULL;
    assert_fc_ok(fc_source_open(&src, fc_test_fixture("full/tiny_vitlm.pt"), 0));
    uint64_t n = 0;
    for (size_t i = 0; i < src->nentries; i++) {
        const struct fc_entry *e = &src->entries[i];
        int tied = 0;
        for (size_t j = 0; j < i && !tied; j++)
            tied = src->entries[j].kind == FC_ENTRY_TENSOR && same_view(e, &src->entries[j]);
        if (e->kind == FC_ENTRY_TENSOR && !tied)
            n += fc_shape_nbytes(e->t.shape, e->t.ndim, e->t.dtype);
    }
    fc_source_free(src);
    return n;
}

static void test_exec_crc_only_for_outputs_that_store_it(void **state)
{
    (void)state;
    const uint64_t dcp = crc_bytes_of_full_to_dcp(FC_OUT_DCP);
    assert_int_equal(crc_bytes_of_full_to_dcp(FC_OUT_SAFETENSORS), 0);
    /* the counter sees the DCP sink's CRCs */
    assert_int_equal(dcp, fixture_hashed_bytes());
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_exec_crc_only_for_outputs_that_store_it),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
