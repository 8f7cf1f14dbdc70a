/*
 * fuzz_zip.c - the ZIP reader on arbitrary bytes, and a round trip through the
 * writer: open -> read every record -> write a new archive with the same
 * records -> open it -> same names, sizes and bytes; writing twice gives
 * identical bytes.  The input goes through an unlinked temporary file since
 * the reader works on a struct fc_file.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_zip.h"

#define FUZZ_MAX_RECORDS 64
#define FUZZ_RECORD_CAP ((size_t)1 << 20)

static char fuzz_path[] = "fuzz-input.zip";

static int fuzz_tmpfd(int *slot)
{
    if (*slot < 0) {
        char tmpl[] = "/tmp/fuzz_zip_XXXXXX";
        *slot = mkstemp(tmpl);
        if (*slot >= 0)
            unlink(tmpl);
    }
    return *slot;
}

static int fuzz_load(int *slot, const void *data, size_t size, struct fc_file *f)
{
    const int fd = fuzz_tmpfd(slot);
    if (fd < 0 || ftruncate(fd, 0) != 0)
        return -1;
    if (size > 0 && fc_pwrite_full(fd, data, size, 0, fuzz_path) != 0)
        return -1;
    f->fd = fd;
    f->size = size;
    f->path = fuzz_path;
    return 0;
}

static void fuzz_round_trip(const struct fc_zip_reader *zr)
{
    static int fd2 = -1;
    struct fc_zipw_record recs[FUZZ_MAX_RECORDS];
    unsigned char *payloads[FUZZ_MAX_RECORDS] = { NULL };
    struct fc_buf a = FC_BUF_INIT((size_t)16 << 20), b = FC_BUF_INIT((size_t)16 << 20);
    const size_t n = fc_zip_count(zr);
    struct fc_zip_reader *zr2 = NULL;
    struct fc_file f2 = FC_FILE_INIT;
    uint64_t total = 0;

    if (n > FUZZ_MAX_RECORDS)
        return;
    memset(recs, 0, sizeof(recs));
    for (size_t i = 0; i < n; i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(zr, i);
        if (fc_zip_read_record(zr, e, FUZZ_RECORD_CAP, &payloads[i]) != FC_OK)
            goto done;
        recs[i].record = e->record;
        recs[i].size = e->size;
        recs[i].data = payloads[i];
    }
    if (fc_zipw_layout(recs, n, fc_zip_prefix(zr), &total) != FC_OK)
        goto done; /* e.g. an empty record name ("archive/") */
    if (fc_zipw_emit(recs, n, fc_zip_prefix(zr), 0, total, &a) != FC_OK ||
        fc_zipw_emit(recs, n, fc_zip_prefix(zr), 0, total, &b) != FC_OK)
        goto done;
    if (a.len != total || a.len != b.len || memcmp(a.data, b.data, a.len) != 0)
        abort(); /* not deterministic */
    if (fuzz_load(&fd2, a.data, a.len, &f2) != 0)
        goto done;
    if (fc_zip_reader_open(&zr2, &f2, 0, f2.size, "rewritten") != FC_OK)
        abort(); /* our own output must read back */
    if (fc_zip_count(zr2) != n)
        abort();
    for (size_t i = 0; i < n; i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(zr2, i);
        unsigned char *p = NULL;
        if (strcmp(e->record, recs[i].record) != 0 || e->size != recs[i].size ||
            e->data_offset != recs[i].data_offset || e->data_offset % 64 != 0 ||
            e->crc32 != recs[i].crc32)
            abort();
        if (fc_zip_read_record(zr2, e, FUZZ_RECORD_CAP, &p) != FC_OK)
            abort();
        if (e->size > 0 && memcmp(p, payloads[i], (size_t)e->size) != 0)
            abort();
        fc_free(p);
        if (fc_zip_verify_crc(zr2, e) != FC_OK)
            abort();
    }
done:
    fc_zip_reader_free(zr2);
    for (size_t i = 0; i < n; i++)
        fc_free(payloads[i]);
    fc_buf_release(&a);
    fc_buf_release(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int fd = -1;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;

    if (fuzz_load(&fd, data, size, &f) != 0)
        return 0;
    if (fc_zip_reader_open(&zr, &f, 0, f.size, "fuzz") == FC_OK) {
        const size_t n = fc_zip_count(zr);
        for (size_t i = 0; i < n; i++) {
            const struct fc_zip_entry *e = fc_zip_entry_at(zr, i);
            if (fc_zip_find(zr, e->record) != e)
                abort();
            if (e->size <= 4096)
                (void)fc_zip_verify_crc(zr, e);
        }
        fuzz_round_trip(zr);
        fc_zip_reader_free(zr);
    }
    /* The same bytes as a window inside a larger region. */
    if (size > 8 && fc_zip_reader_open(&zr, &f, 1, f.size - 1, "fuzz window") == FC_OK)
        fc_zip_reader_free(zr);
    fc_error_clear();
    return 0;
}
