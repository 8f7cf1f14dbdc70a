/*
 * test_zip.c - unit tests of the ZIP/ZIP64 reader and the torch-layout writer.
 *
 * The arrays below are real torch 2.15 output (torch.save to an io.BytesIO)
 * and two archives from Python's zipfile, produced in the project venv by:
 *
 *   ts_f32      torch.save(torch.tensor([[1., 2., 3.], [4., 5., 6.]]), buf)
 *   ts_empty    torch.save(torch.empty(0, 4), buf)   (zero-length data/0)
 *   py_stored   zipfile ZIP_STORED: m/data.pkl = 80 02 4b 07 2e, m/version
 *   py_deflated zipfile ZIP_DEFLATED: the same pickle ten times, m/version
 */
#include "fc_test.h"

#include <sys/types.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_endian.h"
#include "fc_zip.h"

/* clang-format off */
static const char ts_f32[] =
    "PK\003\004\000\000\010\010\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\000\000\000\020\000\022\000archive/data.pklFB\016\000ZZZZZZZZZZ"
    "ZZZZ\200\002ctorch._utils\012_rebuild_tensor_v2\012q\000((X\007\000\000\000s"
    "torageq\001ctorch\012FloatStorage\012q\002X\001\000\000\0000q\003X\003\000"
    "\000\000cpuq\004K\006tq\005QK\000K\002K\003\206q\006K\003K\001\206q\007\211c"
    "collections\012OrderedDict\012q\010)Rq\011tq\012Rq\013.PK\007\010\307sS'\232"
    "\000\000\000\232\000\000\000PK\003\004\000\000\010\010\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\027\000!\000archive/.fo"
    "rmat_versionFB\035\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ1PK\007\010\267\357\334"
    "\203\001\000\000\000\001\000\000\000PK\003\004\000\000\010\010\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\032\0007\000arc"
    "hive/.storage_alignmentFB3\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZ64PK\007\010\077wq\351\002\000\000\000\002\000\000\000PK\003\004\000"
    "\000\010\010\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\021\000\077\000archive/byteorderFB;\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZlittlePK\007\010\205=\343\031\006\000\000\000"
    "\006\000\000\000PK\003\004\000\000\010\010\000\000\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\016\000>\000archive/data/0FB:\000ZZ"
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ\000\000\200\077\000"
    "\000\000@\000\000@@\000\000\200@\000\000\240@\000\000\300@PK\007\010$\3459"
    "\031\030\000\000\000\030\000\000\000PK\003\004\000\000\010\010\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\017\000+\000arc"
    "hive/versionFB'\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ3\012PK\007\010"
    "\321\236gU\002\000\000\000\002\000\000\000PK\003\004\000\000\010\010\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\036\0002"
    "\000archive/.data/serialization_idFB.\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZZZZZZZ1572819951185464302603622429988949749782PK\007\010\201\221vw(\000"
    "\000\000(\000\000\000PK\001\002\000\000\000\000\010\010\000\000\000\000\000"
    "\000\307sS'\232\000\000\000\232\000\000\000\020\000\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000archive/data.pklPK\001\002\000\000"
    "\000\000\010\010\000\000\000\000\000\000\267\357\334\203\001\000\000\000\001"
    "\000\000\000\027\000\000\000\000\000\000\000\000\000\000\000\000\000\352\000"
    "\000\000archive/.format_versionPK\001\002\000\000\000\000\010\010\000\000"
    "\000\000\000\000\077wq\351\002\000\000\000\002\000\000\000\032\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000Q\001\000\000archive/.storage_alignm"
    "entPK\001\002\000\000\000\000\010\010\000\000\000\000\000\000\205=\343\031"
    "\006\000\000\000\006\000\000\000\021\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\322\001\000\000archive/byteorderPK\001\002\000\000\000\000\010"
    "\010\000\000\000\000\000\000$\3459\031\030\000\000\000\030\000\000\000\016"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000V\002\000\000archive/dat"
    "a/0PK\001\002\000\000\000\000\010\010\000\000\000\000\000\000\321\236gU\002"
    "\000\000\000\002\000\000\000\017\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\350\002\000\000archive/versionPK\001\002\000\000\000\000\010\010"
    "\000\000\000\000\000\000\201\221vw(\000\000\000(\000\000\000\036\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000R\003\000\000archive/.data/serializa"
    "tion_idPK\006\006,\000\000\000\000\000\000\000\036\003-\000\000\000\000\000"
    "\000\000\000\000\007\000\000\000\000\000\000\000\007\000\000\000\000\000\000"
    "\000\317\001\000\000\000\000\000\000\370\003\000\000\000\000\000\000PK\006"
    "\007\000\000\000\000\307\005\000\000\000\000\000\000\001\000\000\000PK\005"
    "\006\000\000\000\000\007\000\007\000\317\001\000\000\370\003\000\000\000\000";
#define TS_F32_LEN 1577

static const char ts_empty[] =
    "PK\003\004\000\000\010\010\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\000\000\000\020\000\022\000archive/data.pklFB\016\000ZZZZZZZZZZ"
    "ZZZZ\200\002ctorch._utils\012_rebuild_tensor_v2\012q\000((X\007\000\000\000s"
    "torageq\001ctorch\012FloatStorage\012q\002X\001\000\000\0000q\003X\003\000"
    "\000\000cpuq\004K\000tq\005QK\000K\000K\004\206q\006K\004K\001\206q\007\211c"
    "collections\012OrderedDict\012q\010)Rq\011tq\012Rq\013.PK\007\010\0172\305"
    "\321\232\000\000\000\232\000\000\000PK\003\004\000\000\010\010\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\027\000!\000arc"
    "hive/.format_versionFB\035\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ1PK\007\010\267"
    "\357\334\203\001\000\000\000\001\000\000\000PK\003\004\000\000\010\010\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\032\000"
    "7\000archive/.storage_alignmentFB3\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZZZZZZZZZ64PK\007\010\077wq\351\002\000\000\000\002\000\000\000PK\003"
    "\004\000\000\010\010\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\000\021\000\077\000archive/byteorderFB;\000ZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZlittlePK\007\010\205=\343\031\006\000"
    "\000\000\006\000\000\000PK\003\004\000\000\000\010\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\016\000>\000archive/data/0F"
    "B:\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZPK\003\004"
    "\000\000\010\010\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\017\000\023\000archive/versionFB\017\000ZZZZZZZZZZZZZZZ3\012PK"
    "\007\010\321\236gU\002\000\000\000\002\000\000\000PK\003\004\000\000\010\010"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\000\036"
    "\0002\000archive/.data/serialization_idFB.\000ZZZZZZZZZZZZZZZZZZZZZZZZZZZZZZ"
    "ZZZZZZZZZZZZZZZZ1572819951185464302600104715961030449976PK\007\010\031og\324"
    "(\000\000\000(\000\000\000PK\001\002\000\000\000\000\010\010\000\000\000\000"
    "\000\000\0172\305\321\232\000\000\000\232\000\000\000\020\000\000\000\000"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000archive/data.pklPK\001"
    "\002\000\000\000\000\010\010\000\000\000\000\000\000\267\357\334\203\001\000"
    "\000\000\001\000\000\000\027\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\352\000\000\000archive/.format_versionPK\001\002\000\000\000\000\010"
    "\010\000\000\000\000\000\000\077wq\351\002\000\000\000\002\000\000\000\032"
    "\000\000\000\000\000\000\000\000\000\000\000\000\000Q\001\000\000archive/.st"
    "orage_alignmentPK\001\002\000\000\000\000\010\010\000\000\000\000\000\000"
    "\205=\343\031\006\000\000\000\006\000\000\000\021\000\000\000\000\000\000"
    "\000\000\000\000\000\000\000\322\001\000\000archive/byteorderPK\001\002\000"
    "\000\000\000\000\010\000\000\000\000\000\000\000\000\000\000\000\000\000\000"
    "\000\000\000\000\016\000\000\000\000\000\000\000\000\000\000\000\000\000V"
    "\002\000\000archive/data/0PK\001\002\000\000\000\000\010\010\000\000\000\000"
    "\000\000\321\236gU\002\000\000\000\002\000\000\000\017\000\000\000\000\000"
    "\000\000\000\000\000\000\000\000\300\002\000\000archive/versionPK\001\002"
    "\000\000\000\000\010\010\000\000\000\000\000\000\031og\324(\000\000\000(\000"
    "\000\000\036\000\000\000\000\000\000\000\000\000\000\000\000\000\022\003\000"
    "\000archive/.data/serialization_idPK\006\006,\000\000\000\000\000\000\000"
    "\036\003-\000\000\000\000\000\000\000\000\000\007\000\000\000\000\000\000"
    "\000\007\000\000\000\000\000\000\000\317\001\000\000\000\000\000\000\270\003"
    "\000\000\000\000\000\000PK\006\007\000\000\000\000\207\005\000\000\000\000"
    "\000\000\001\000\000\000PK\005\006\000\000\000\000\007\000\007\000\317\001"
    "\000\000\270\003\000\000\000\000";
#define TS_EMPTY_LEN 1513

static const char py_stored[] =
    "PK\003\004\024\000\000\000\000\000Y\243u]-v\2252\005\000\000\000\005\000\000"
    "\000\012\000\000\000m/data.pkl\200\002K\007.PK\003\004\024\000\000\000\000"
    "\000Y\243u]\321\236gU\002\000\000\000\002\000\000\000\011\000\000\000m/versi"
    "on3\012PK\001\002\024\003\024\000\000\000\000\000Y\243u]-v\2252\005\000\000"
    "\000\005\000\000\000\012\000\000\000\000\000\000\000\000\000\000\000\200\001"
    "\000\000\000\000m/data.pklPK\001\002\024\003\024\000\000\000\000\000Y\243u]"
    "\321\236gU\002\000\000\000\002\000\000\000\011\000\000\000\000\000\000\000"
    "\000\000\000\000\200\001-\000\000\000m/versionPK\005\006\000\000\000\000\002"
    "\000\002\000o\000\000\000V\000\000\000\000\000";
#define PY_STORED_LEN 219

static const char py_deflated[] =
    "PK\003\004\024\000\000\000\010\000Y\243u]\322\333\036p\012\000\000\0002\000"
    "\000\000\012\000\000\000m/data.pklk`\362f\327k \205\000\000PK\003\004\024"
    "\000\000\000\010\000Y\243u]\321\236gU\004\000\000\000\002\000\000\000\011"
    "\000\000\000m/version3\346\002\000PK\001\002\024\003\024\000\000\000\010\000"
    "Y\243u]\322\333\036p\012\000\000\0002\000\000\000\012\000\000\000\000\000"
    "\000\000\000\000\000\000\200\001\000\000\000\000m/data.pklPK\001\002\024\003"
    "\024\000\000\000\010\000Y\243u]\321\236gU\004\000\000\000\002\000\000\000"
    "\011\000\000\000\000\000\000\000\000\000\000\000\200\0012\000\000\000m/versi"
    "onPK\005\006\000\000\000\000\002\000\002\000o\000\000\000]\000\000\000\000"
    "\000";
#define PY_DEFLATED_LEN 226
/* clang-format on */

static char *g_dir;
static unsigned g_seq;

/* Write len bytes to a fresh file in the test directory and open it. */
static void open_bytes(struct fc_file *f, const void *data, size_t len)
{
    char path[256];
    snprintf(path, sizeof(path), "%s/in%u.bin", g_dir, g_seq++);
    assert_fc_ok(fc_write_file_atomic(path, data, len));
    assert_fc_ok(fc_file_open_read(f, path));
}

static unsigned char *dup_bytes(const char *src, size_t len)
{
    unsigned char *p = malloc(len);
    assert_non_null(p);
    memcpy(p, src, len);
    return p;
}

/* Offset of the nth occurrence of needle in buf. */
static size_t find_nth(const unsigned char *buf, size_t len, const void *needle, size_t nlen,
                       int nth)
{
    for (size_t i = 0; i + nlen <= len; i++) {
        if (memcmp(buf + i, needle, nlen) == 0 && nth-- == 0)
            return i;
    }
    fail_msg("pattern not found");
    return 0;
}

static const unsigned char SIG_LFH[4] = {'P', 'K', 3, 4};
static const unsigned char SIG_CDH[4] = {'P', 'K', 1, 2};
static const unsigned char SIG_Z64[4] = {'P', 'K', 6, 6};
static const unsigned char SIG_LOC[4] = {'P', 'K', 6, 7};
static const unsigned char SIG_EOCD[4] = {'P', 'K', 5, 6};

/* Offset of the central directory header of the entry named name. */
static size_t cd_entry_of(const unsigned char *buf, size_t len, const char *name)
{
    for (int k = 0;; k++) {
        const size_t off = find_nth(buf, len, SIG_CDH, 4, k);
        const size_t nlen = fc_read_le16(buf + off + 28);
        if (nlen == strlen(name) && memcmp(buf + off + 46, name, nlen) == 0)
            return off;
    }
}

static int open_mem(const void *data, size_t len, struct fc_file *f, struct fc_zip_reader **zr)
{
    open_bytes(f, data, len);
    return fc_zip_reader_open(zr, f, 0, f->size, "t.pt");
}

static void expect_open_fails(const unsigned char *data, size_t len, int code, const char *needle)
{
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_fails(open_mem(data, len, &f, &zr), code, needle);
    assert_null(zr);
    fc_file_close(&f);
}

static void test_zip_reads_a_real_torch_archive(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    static const char *const names[] = {
        "data.pkl", ".format_version", ".storage_alignment",    "byteorder",
        "data/0",   "version",         ".data/serialization_id"};
    assert_fc_ok(open_mem(ts_f32, TS_F32_LEN, &f, &zr));
    assert_int_equal(fc_zip_count(zr), 7);
    assert_string_equal(fc_zip_prefix(zr), "archive");
    for (size_t i = 0; i < 7; i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(zr, i);
        assert_string_equal(e->record, names[i]);
        assert_int_equal(e->data_offset % 64, 0);
        assert_ptr_equal(fc_zip_find(zr, names[i]), e);
        assert_fc_ok(fc_zip_verify_crc(zr, e));
    }
    assert_null(fc_zip_entry_at(zr, 7));
    const struct fc_zip_entry *d = fc_zip_find(zr, "data/0");
    assert_string_equal(d->name, "archive/data/0");
    assert_int_equal(d->data_offset, 0x2c0);
    assert_int_equal(d->size, 24);
    assert_int_equal(d->crc32, 0x1939e524u);
    assert_int_equal(d->method, 0);
    assert_null(fc_zip_find(zr, "data/1"));
    assert_null(fc_zip_find(zr, "archive/data/0"));

    unsigned char *v = NULL;
    assert_fc_ok(fc_zip_read_record(zr, fc_zip_find(zr, "version"), 16, &v));
    assert_string_equal((char *)v, "3\n");
    fc_free(v);
    assert_fc_fails(fc_zip_read_record(zr, d, 8, &v), FC_ECORRUPT, "data/0");
    assert_null(v);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
}

static void test_zip_reads_a_zero_length_record(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(open_mem(ts_empty, TS_EMPTY_LEN, &f, &zr));
    const struct fc_zip_entry *d = fc_zip_find(zr, "data/0");
    assert_non_null(d);
    assert_int_equal(d->size, 0);
    assert_int_equal(d->data_offset, 0x2c0);
    /* The next local header starts exactly where the empty payload is. */
    assert_int_equal(fc_zip_find(zr, "version")->data_offset, 0x300);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
}

/* Re-write every record of an archive with the writer and compare bytes. */
static void rewrite_and_compare(const char *orig, size_t len)
{
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    struct fc_zipw_record recs[16];
    unsigned char *payloads[16] = {NULL};
    struct fc_buf out = FC_BUF_INIT(1 << 20);
    uint64_t total = 0;
    assert_fc_ok(open_mem(orig, len, &f, &zr));
    const size_t n = fc_zip_count(zr);
    assert_true(n <= 16);
    memset(recs, 0, sizeof(recs));
    for (size_t i = 0; i < n; i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(zr, i);
        assert_fc_ok(fc_zip_read_record(zr, e, 1 << 20, &payloads[i]));
        recs[i].record = e->record;
        recs[i].size = e->size;
        recs[i].data = payloads[i];
    }
    assert_fc_ok(fc_zipw_layout(recs, n, fc_zip_prefix(zr), &total));
    assert_int_equal(total, len);
    for (size_t i = 0; i < n; i++) {
        const struct fc_zip_entry *e = fc_zip_entry_at(zr, i);
        assert_int_equal(recs[i].data_offset, e->data_offset);
        assert_int_equal(recs[i].crc32, e->crc32);
    }
    assert_fc_ok(fc_zipw_emit(recs, n, fc_zip_prefix(zr), 0, total, &out));
    assert_int_equal(out.len, len);
    assert_memory_equal(out.data, orig, len);

    /* Any split of the range gives the same bytes. */
    for (uint64_t cut = 0; cut <= total; cut += 37) {
        fc_buf_clear(&out);
        assert_fc_ok(fc_zipw_emit(recs, n, fc_zip_prefix(zr), 0, cut, &out));
        assert_fc_ok(fc_zipw_emit(recs, n, fc_zip_prefix(zr), cut, total, &out));
        assert_int_equal(out.len, len);
        assert_memory_equal(out.data, orig, len);
    }
    for (size_t i = 0; i < n; i++)
        fc_free(payloads[i]);
    fc_buf_release(&out);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
}

static void test_zip_writer_reproduces_torch_bytes_exactly(void **state)
{
    (void)state;
    rewrite_and_compare(ts_f32, TS_F32_LEN);
    rewrite_and_compare(ts_empty, TS_EMPTY_LEN);
}

static void test_zip_writer_streams_a_payload_given_its_crc_later(void **state)
{
    (void)state;
    static const unsigned char pkl[] = "pickle bytes";
    static const unsigned char payload[100] = {1, 2, 3};
    struct fc_zipw_record full[3] = {
        {"data.pkl", sizeof(pkl), pkl, 0, 0, 0},
        {"data/0", sizeof(payload), payload, 0, 0, 0},
        {"version", 2, (const unsigned char *)"3\n", 0, 0, 0},
    };
    struct fc_zipw_record streamed[3];
    struct fc_buf a = FC_BUF_INIT(1 << 20), b = FC_BUF_INIT(1 << 20);
    uint64_t total_a = 0, total_b = 0;
    memcpy(streamed, full, sizeof(full));
    streamed[1].data = NULL;
    assert_fc_ok(fc_zipw_layout(full, 3, "archive", &total_a));
    assert_fc_ok(fc_zipw_layout(streamed, 3, "archive", &total_b));
    assert_int_equal(total_a, total_b);
    assert_int_equal(streamed[1].data_offset, full[1].data_offset);
    assert_int_equal(streamed[1].data_offset % 64, 0);
    assert_fc_ok(fc_zipw_emit(full, 3, "archive", 0, total_a, &a));

    const uint64_t d0 = streamed[1].data_offset, d1 = d0 + sizeof(payload);
    assert_fc_fails(fc_zipw_emit(streamed, 3, "archive", 0, d0 + 1, &b), FC_EINVAL, "data/0");
    fc_buf_clear(&b);
    assert_fc_ok(fc_zipw_emit(streamed, 3, "archive", 0, d0, &b));
    assert_int_equal(b.len, d0);
    assert_fc_ok(fc_buf_append(&b, payload, sizeof(payload)));
    streamed[1].crc32 = fc_crc32(fc_crc32(0, payload, 50), payload + 50, 50);
    assert_int_equal(streamed[1].crc32, full[1].crc32);
    assert_fc_ok(fc_zipw_emit(streamed, 3, "archive", d1, total_b, &b));
    assert_int_equal(b.len, a.len);
    assert_memory_equal(a.data, b.data, a.len);
    assert_fc_fails(fc_zipw_emit(streamed, 3, "archive", d1, total_b + 1, &b), FC_EINVAL,
                    "past the archive end");

    /* The result reads back, and is deterministic. */
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(open_mem(a.data, a.len, &f, &zr));
    assert_int_equal(fc_zip_count(zr), 3);
    assert_int_equal(fc_zip_find(zr, "data/0")->data_offset, d0);
    assert_fc_ok(fc_zip_verify_crc(zr, fc_zip_find(zr, "data/0")));
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    fc_buf_release(&a);
    fc_buf_release(&b);
}

/*
 * A record laid out at a larger alignment (DCP's 4 KiB items) gets a longer "FB" pad: its
 * payload lands on the boundary, the others keep torch's 64, and the reader finds every
 * payload from the local headers.  Alignments that are no power of two >= 64, or whose pad
 * cannot fit the 16-bit extra length, are refused.
 */
static void test_zip_writer_pads_a_record_to_its_alignment(void **state)
{
    (void)state;
    static const unsigned char payload[5000] = {7, 8, 9};
    struct fc_zipw_record r[3] = {
        {"data.pkl", 5, (const unsigned char *)"head.", 0, 0, 0},
        {"data/0", sizeof(payload), payload, 0, 0, 0},
        {"version", 2, (const unsigned char *)"3\n", 0, 0, 0},
    };
    uint32_t align[3] = {0, 4096, 0};
    struct fc_buf out = FC_BUF_INIT(1 << 20);
    uint64_t total = 0;
    assert_fc_ok(fc_zipw_layout_aligned(r, 3, "archive", align, &total));
    assert_int_equal(r[0].data_offset, 64);
    assert_int_equal(r[1].data_offset, 4096);
    assert_int_equal(r[2].data_offset % 64, 0);
    assert_fc_ok(fc_zipw_emit(r, 3, "archive", 0, total, &out));
    assert_int_equal(out.len, total);
    /* The local header's extra length covers the pad: 4096 - header - name. */
    const unsigned char *lh = out.data + r[1].header_offset;
    assert_int_equal(fc_read_le16(lh + 28), 4096 - r[1].header_offset - 30 - 14);
    assert_memory_equal(lh + 30 + 14, "FB", 2);
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(open_mem(out.data, out.len, &f, &zr));
    assert_int_equal(fc_zip_find(zr, "data/0")->data_offset, 4096);
    assert_fc_ok(fc_zip_verify_crc(zr, fc_zip_find(zr, "data/0")));
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    fc_buf_release(&out);

    align[1] = 96;
    assert_fc_fails(fc_zipw_layout_aligned(r, 3, "archive", align, &total), FC_EINVAL,
                    "power of two");
    align[1] = 32;
    assert_fc_fails(fc_zipw_layout_aligned(r, 3, "archive", align, &total), FC_EINVAL,
                    "power of two");
    align[1] = 131072;
    assert_fc_fails(fc_zipw_layout_aligned(r, 3, "archive", align, &total), FC_EINVAL,
                    "16-bit extra field");
}

static void test_zip_writer_rejects_bad_record_names(void **state)
{
    (void)state;
    struct fc_zipw_record r = {"", 0, NULL, 0, 0, 0};
    uint64_t total = 1;
    assert_fc_fails(fc_zipw_layout(&r, 1, "archive", &total), FC_EINVAL, "bad record name");
    assert_int_equal(total, 0);
}

static void test_zip_reads_an_archive_inside_a_larger_file(void **state)
{
    (void)state;
    const size_t pre = 1000, post = 77;
    unsigned char *buf = calloc(1, pre + TS_F32_LEN + post);
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_non_null(buf);
    memset(buf, 'P', pre);
    memcpy(buf + pre, ts_f32, TS_F32_LEN);
    open_bytes(&f, buf, pre + TS_F32_LEN + post);
    assert_fc_ok(fc_zip_reader_open(&zr, &f, pre, TS_F32_LEN, "x.distcp @ 1000"));
    const struct fc_zip_entry *d = fc_zip_find(zr, "data/0");
    assert_int_equal(d->data_offset, pre + 0x2c0);
    assert_fc_ok(fc_zip_verify_crc(zr, d));
    fc_zip_reader_free(zr);
    /* Windows that do not end where the archive ends are refused. */
    assert_fc_fails(fc_zip_reader_open(&zr, &f, pre, TS_F32_LEN + 1, "x.distcp @ 1000"),
                    FC_ECORRUPT, "x.distcp @ 1000");
    assert_fc_fails(fc_zip_reader_open(&zr, &f, pre, TS_F32_LEN + post + 1, "w"), FC_ECORRUPT,
                    "outside the file");
    fc_file_close(&f);
    free(buf);
}

static void test_zip_rejects_every_truncation(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    open_bytes(&f, ts_f32, TS_F32_LEN);
    for (uint64_t len = 0; len < TS_F32_LEN; len++) {
        const int rc = fc_zip_reader_open(&zr, &f, 0, len, "t.pt");
        assert_null(zr);
        assert_int_equal(rc, len < 4 ? FC_EFORMAT : FC_ECORRUPT);
        assert_non_null(strstr(fc_error_last(), "t.pt"));
    }
    /* Cut from the front (a bad window start). */
    for (uint64_t cut = 1; cut < TS_F32_LEN; cut += 3) {
        const int rc = fc_zip_reader_open(&zr, &f, cut, TS_F32_LEN - cut, "t.pt");
        assert_null(zr);
        assert_true(rc == FC_ECORRUPT || rc == FC_EFORMAT);
    }
    fc_file_close(&f);
}

static void test_zip_rejects_bad_signatures(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    size_t off;

    off = find_nth(b, TS_F32_LEN, SIG_LFH, 4, 4);
    b[off + 3] = 9;
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "bad local header signature");
    b[off + 3] = 4;

    off = find_nth(b, TS_F32_LEN, SIG_CDH, 4, 2);
    b[off + 3] = 9;
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "bad central directory entry 2");
    b[off + 3] = 2;

    off = find_nth(b, TS_F32_LEN, SIG_Z64, 4, 0);
    b[off + 3] = 9;
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "bad ZIP64 end of central directory");
    b[off + 3] = 6;

    off = find_nth(b, TS_F32_LEN, SIG_EOCD, 4, 0);
    b[off + 3] = 9;
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "no end-of-central-directory record");
    b[off + 3] = 6;

    /* Without a locator the classic end record alone describes this small archive. */
    off = find_nth(b, TS_F32_LEN, SIG_LOC, 4, 0);
    b[off + 3] = 9;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(open_mem(b, TS_F32_LEN, &f, &zr));
    assert_int_equal(fc_zip_count(zr), 7);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    free(b);
}

static void test_zip_rejects_a_payload_running_into_the_central_directory(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    const size_t cd = cd_entry_of(b, TS_F32_LEN, "archive/.data/serialization_id");
    fc_write_le32(b + cd + 20, 60);
    fc_write_le32(b + cd + 24, 60);
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "runs into the central directory");
    free(b);
}

static void test_zip_rejects_overlapping_entries(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    const size_t cd = cd_entry_of(b, TS_F32_LEN, "archive/data.pkl");
    fc_write_le32(b + cd + 20, 200);
    fc_write_le32(b + cd + 24, 200);
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "overlap");
    /* Two central directory entries pointing at one local header. */
    memcpy(b, ts_f32, TS_F32_LEN);
    const size_t cd0 = cd_entry_of(b, TS_F32_LEN, "archive/data.pkl");
    const size_t cd1 = cd_entry_of(b, TS_F32_LEN, "archive/.format_version");
    fc_write_le32(b + cd1 + 42, fc_read_le32(b + cd0 + 42));
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "does not match central directory name");
    free(b);
}

static void test_zip_rejects_compressed_entries(void **state)
{
    (void)state;
    expect_open_fails((const unsigned char *)py_deflated, PY_DEFLATED_LEN, FC_EFORMAT,
                      "compressed entry 'm/data.pkl' (method 8); re-save it with torch.save");
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    fc_write_le16(b + cd_entry_of(b, TS_F32_LEN, "archive/version") + 10, 12);
    expect_open_fails(b, TS_F32_LEN, FC_EFORMAT, "compressed entry 'archive/version' (method 12)");
    free(b);
}

static void test_zip_can_list_compressed_entries_without_reading_them(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    unsigned char *p = NULL;
    open_bytes(&f, py_deflated, PY_DEFLATED_LEN);
    assert_fc_ok(fc_zip_reader_open_ex(&zr, &f, 0, f.size, "t.zip", FC_ZIP_ALLOW_COMPRESSED));
    const struct fc_zip_entry *e = fc_zip_find(zr, "data.pkl");
    assert_int_equal(e->method, 8);
    assert_int_equal(e->size, 50);
    assert_true(e->csize < e->size);
    assert_fc_fails(fc_zip_read_record(zr, e, 1024, &p), FC_EFORMAT,
                    "compressed entry 'm/data.pkl' (method 8)");
    assert_null(p);
    assert_fc_fails(fc_zip_verify_crc(zr, e), FC_EFORMAT, "compressed entry");
    assert_int_equal(fc_zip_count(zr), 2);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
}

static void test_zip_rejects_encrypted_entries(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    const size_t cd = cd_entry_of(b, TS_F32_LEN, "archive/byteorder");
    b[cd + 8] |= 1;
    expect_open_fails(b, TS_F32_LEN, FC_EFORMAT, "'archive/byteorder' is encrypted");
    b[cd + 8] &= (unsigned char)~1u;
    b[find_nth(b, TS_F32_LEN, SIG_LFH, 4, 3) + 6] |= 1;
    expect_open_fails(b, TS_F32_LEN, FC_EFORMAT, "'archive/byteorder' is encrypted");
    free(b);
}

static void test_zip_rejects_entries_outside_the_archive_folder(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    static const char name[] = "archive/version";
    b[find_nth(b, TS_F32_LEN, name, sizeof(name) - 1, 0) + 6] = 'x';
    b[find_nth(b, TS_F32_LEN, name, sizeof(name) - 1, 0) + 6] = 'x';
    expect_open_fails(b, TS_F32_LEN, FC_EFORMAT,
                      "entry 'archivx/version' is not inside the archive folder 'archive/'");
    free(b);

    /* A first entry outside any folder. */
    struct fc_zipw_record r = {"x", 1, (const unsigned char *)"1", 0, 0, 0};
    struct fc_buf out = FC_BUF_INIT(1 << 16);
    uint64_t total = 0;
    assert_fc_ok(fc_zipw_layout(&r, 1, "a", &total));
    assert_fc_ok(fc_zipw_emit(&r, 1, "a", 0, total, &out));
    out.data[find_nth(out.data, out.len, "a/x", 3, 0) + 1] = '_';
    out.data[find_nth(out.data, out.len, "a/x", 3, 0) + 1] = '_';
    expect_open_fails(out.data, out.len, FC_EFORMAT, "first entry 'a_x' is not inside a folder");
    fc_buf_release(&out);
}

static void test_zip_rejects_duplicate_entries(void **state)
{
    (void)state;
    struct fc_zipw_record r[2] = {{"v", 1, (const unsigned char *)"1", 0, 0, 0},
                                  {"v", 1, (const unsigned char *)"2", 0, 0, 0}};
    struct fc_buf out = FC_BUF_INIT(1 << 16);
    uint64_t total = 0;
    assert_fc_ok(fc_zipw_layout(r, 2, "a", &total));
    assert_fc_ok(fc_zipw_emit(r, 2, "a", 0, total, &out));
    expect_open_fails(out.data, out.len, FC_ECORRUPT, "duplicate entry 'a/v'");
    fc_buf_release(&out);
}

static void test_zip_rejects_saturated_fields_without_zip64_extra(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    const size_t cd = cd_entry_of(b, TS_F32_LEN, "archive/data/0");
    fc_write_le32(b + cd + 24, 0xFFFFFFFFu);
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "no ZIP64 extra field");
    free(b);
}

static void test_zip_rejects_inconsistent_end_records(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    size_t off = find_nth(b, TS_F32_LEN, SIG_Z64, 4, 0);
    b[off + 32] = 6; /* total entries */
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "disagrees with the classic end record");
    memcpy(b, ts_f32, TS_F32_LEN);
    off = find_nth(b, TS_F32_LEN, SIG_EOCD, 4, 0);
    b[off + 10] = 8;
    b[off + 8] = 8;
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "disagrees with the classic end record");
    /* Central directory size that does not match its entries. */
    memcpy(b, ts_f32, TS_F32_LEN);
    const size_t cd = cd_entry_of(b, TS_F32_LEN, "archive/data.pkl");
    off = find_nth(b, TS_F32_LEN, SIG_Z64, 4, 0);
    fc_write_le64(b + off + 48, cd + 1);
    fc_write_le64(b + off + 40, fc_read_le64(b + off + 40) - 1);
    off = find_nth(b, TS_F32_LEN, SIG_EOCD, 4, 0);
    fc_write_le32(b + off + 16, (uint32_t)cd + 1);
    fc_write_le32(b + off + 12, fc_read_le32(b + off + 12) - 1);
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "bad central directory entry 0");
    /* More entries than the central directory can hold. */
    memcpy(b, ts_f32, TS_F32_LEN);
    off = find_nth(b, TS_F32_LEN, SIG_Z64, 4, 0);
    fc_write_le64(b + off + 24, 1000);
    fc_write_le64(b + off + 32, 1000);
    off = find_nth(b, TS_F32_LEN, SIG_EOCD, 4, 0);
    fc_write_le16(b + off + 8, 1000);
    fc_write_le16(b + off + 10, 1000);
    expect_open_fails(b, TS_F32_LEN, FC_ECORRUPT, "cannot fit in a central directory");
    free(b);
}

static void test_zip_accepts_other_producers_and_comments(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(open_mem(py_stored, PY_STORED_LEN, &f, &zr));
    assert_string_equal(fc_zip_prefix(zr), "m");
    assert_int_equal(fc_zip_find(zr, "data.pkl")->size, 5);
    assert_fc_ok(fc_zip_verify_crc(zr, fc_zip_find(zr, "version")));
    fc_zip_reader_free(zr);
    fc_file_close(&f);

    /* An end-record comment is skipped. */
    static const char comment[] = "made by hand, with PK\005\006 inside";
    const size_t clen = sizeof(comment) - 1;
    unsigned char *b = calloc(1, TS_F32_LEN + clen);
    assert_non_null(b);
    memcpy(b, ts_f32, TS_F32_LEN);
    memcpy(b + TS_F32_LEN, comment, clen);
    fc_write_le16(b + TS_F32_LEN - 2, (uint16_t)clen);
    assert_fc_ok(open_mem(b, TS_F32_LEN + clen, &f, &zr));
    assert_int_equal(fc_zip_count(zr), 7);
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    free(b);
}

/*
 * Reads near the ends of an archive come from the two blocks the reader keeps
 * (its first and last 4 KiB); the rest from the file.  Records on either side
 * of a large one, and across a block's edge, read and verify alike, a changed
 * byte is found wherever it is, and an end-record comment longer than the
 * tail block sends the search to the whole comment range.
 */
static void test_zip_reads_around_its_head_and_tail_blocks(void **state)
{
    (void)state;
    enum { BIG = 20000, EDGE = 4000 };
    unsigned char *big = malloc(BIG), *edge = malloc(EDGE);
    assert_non_null(big);
    assert_non_null(edge);
    for (size_t i = 0; i < BIG; i++)
        big[i] = (unsigned char)(i * 7 + 1);
    for (size_t i = 0; i < EDGE; i++)
        edge[i] = (unsigned char)(i * 13 + 5);
    struct fc_zipw_record recs[4] = {
        {"data.pkl", 5, (const unsigned char *)"head.", 0, 0, 0},
        {"data/0", BIG, big, 0, 0, 0},
        {"data/1", EDGE, edge, 0, 0, 0}, /* starts before the tail block, ends in it */
        {"version", 2, (const unsigned char *)"3\n", 0, 0, 0},
    };
    struct fc_buf a = FC_BUF_INIT(1 << 20);
    uint64_t total = 0;
    assert_fc_ok(fc_zipw_layout(recs, 4, "archive", &total));
    assert_fc_ok(fc_zipw_emit(recs, 4, "archive", 0, total, &a));
    assert_true(total > 3 * 4096);
    assert_true(total - recs[2].data_offset > 4096); /* data/1 straddles the tail block's start */

    for (int variant = 0; variant < 2; variant++) {
        struct fc_buf b = FC_BUF_INIT(1 << 20);
        assert_fc_ok(fc_buf_append(&b, a.data, a.len));
        if (variant == 1) { /* a 6,000-byte comment: the end record is not in the last 4 KiB */
            unsigned char pad[6000];
            memset(pad, 'c', sizeof(pad));
            assert_fc_ok(fc_buf_append(&b, pad, sizeof(pad)));
            fc_write_le16(b.data + a.len - 2, (uint16_t)sizeof(pad));
        }
        struct fc_file f = FC_FILE_INIT;
        struct fc_zip_reader *zr = NULL;
        unsigned char *got = NULL;
        assert_fc_ok(open_mem(b.data, b.len, &f, &zr));
        assert_int_equal(fc_zip_count(zr), 4);
        for (size_t r = 0; r < 4; r++) {
            const struct fc_zip_entry *e = fc_zip_find(zr, recs[r].record);
            assert_non_null(e);
            assert_fc_ok(fc_zip_read_record(zr, e, BIG, &got));
            assert_memory_equal(got, recs[r].data, recs[r].size);
            free(got);
            assert_fc_ok(fc_zip_verify_crc(zr, e));
        }
        fc_zip_reader_free(zr);
        fc_file_close(&f);

        /* One changed byte in each payload: the head block, the file, the tail block. */
        const size_t at[3] = {(size_t)recs[0].data_offset + 2, (size_t)recs[1].data_offset + BIG / 2,
                              (size_t)recs[2].data_offset + EDGE - 10};
        const char *name[3] = {"data.pkl", "data/0", "data/1"};
        for (int k = 0; k < 3; k++) {
            b.data[at[k]] ^= 0x20;
            assert_fc_ok(open_mem(b.data, b.len, &f, &zr));
            assert_fc_fails(fc_zip_verify_crc(zr, fc_zip_find(zr, name[k])), FC_ECORRUPT, "CRC-32");
            fc_zip_reader_free(zr);
            fc_file_close(&f);
            b.data[at[k]] ^= 0x20;
        }
        fc_buf_release(&b);
    }
    fc_buf_release(&a);
    free(big);
    free(edge);
}

static void test_zip_rejects_files_that_are_not_zip(void **state)
{
    (void)state;
    static const char text[] = "hello, this is not a zip archive at all, just some text";
    expect_open_fails((const unsigned char *)text, sizeof(text), FC_EFORMAT, "not a ZIP archive");
    expect_open_fails((const unsigned char *)text, 3, FC_EFORMAT, "not a ZIP archive");
}

/* The combined CRC of two parts is the CRC of their concatenation, for every split. */
static void test_crc32_combine_matches_the_whole(void **state)
{
    (void)state;
    unsigned char buf[3000];
    uint32_t x = 12345;
    for (size_t i = 0; i < sizeof(buf); i++) {
        x = x * 1103515245u + 12345u;
        buf[i] = (unsigned char)(x >> 16);
    }
    const uint32_t whole = fc_crc32(0, buf, sizeof(buf));
    for (size_t cut = 0; cut <= sizeof(buf); cut += cut < 70 ? 1 : 97) {
        const uint32_t a = fc_crc32(0, buf, cut), b = fc_crc32(0, buf + cut, sizeof(buf) - cut);
        assert_int_equal(fc_crc32_combine(a, b, sizeof(buf) - cut), whole);
    }
    /* Three parts, folded either way round (lengths past 4 GiB exercise every bit). */
    const uint32_t a = 0xdeadbeefu, b = 0x01234567u, c = 0x89abcdefu;
    const uint64_t lb = ((uint64_t)5 << 32) + 7, lc = ((uint64_t)3 << 33) + 11;
    assert_int_equal(fc_crc32_combine(fc_crc32_combine(a, b, lb), c, lc),
                     fc_crc32_combine(a, fc_crc32_combine(b, c, lc), lb + lc));
    assert_int_equal(fc_crc32_combine(a, 0, 0), a);
}

static void test_zip_verify_crc_detects_a_changed_payload(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    b[0x2c0 + 5] ^= 0x40;
    assert_fc_ok(open_mem(b, TS_F32_LEN, &f, &zr));
    assert_fc_fails(fc_zip_verify_crc(zr, fc_zip_find(zr, "data/0")), FC_ECORRUPT,
                    "record 'data/0': CRC-32");
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    free(b);
}

/* torch.serialization.set_crc32_options(False) stores 0 for every CRC-32: nothing to compare. */
static void test_zip_verify_crc_skips_records_saved_without_one(void **state)
{
    (void)state;
    unsigned char *b = dup_bytes(ts_f32, TS_F32_LEN);
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    int zeroed = 0;
    b[0x2c0 + 5] ^= 0x40;
    for (size_t i = 0; i + 46 <= TS_F32_LEN; i++) {
        const size_t nlen = (size_t)b[i + 28] | (size_t)b[i + 29] << 8;
        if (memcmp(b + i, "PK\x01\x02", 4) == 0 && nlen >= 6 && i + 46 + nlen <= TS_F32_LEN &&
            memcmp(b + i + 46 + nlen - 6, "data/0", 6) == 0) {
            memset(b + i + 16, 0, 4);
            zeroed++;
        }
    }
    assert_int_equal(zeroed, 1);
    assert_fc_ok(open_mem(b, TS_F32_LEN, &f, &zr));
    assert_fc_ok(fc_zip_verify_crc(zr, fc_zip_find(zr, "data/0")));
    fc_zip_reader_free(zr);
    fc_file_close(&f);
    free(b);
}

/*
 * ZIP64: a record of 4 GiB + 100 bytes followed by one whose local header is
 * past 4 GiB, written sparsely (the big payload is never written).  The layout
 * is the one torch 2.15 wrote for {"a": uint8[2**32 + 100], "b": f32[2]}.
 */
static void test_zip_reads_zip64_sizes_and_offsets(void **state)
{
    (void)state;
    static const unsigned char small[8] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0x40};
    struct fc_zipw_record r[4] = {
        {"data.pkl", 5, (const unsigned char *)"\x80\x02K\x07.", 0, 0, 0},
        {"data/0", ((uint64_t)1 << 32) + 100, NULL, 0x12345678u, 0, 0},
        {"data/1", sizeof(small), small, 0, 0, 0},
        {"version", 2, (const unsigned char *)"3\n", 0, 0, 0},
    };
    struct fc_buf head = FC_BUF_INIT(1 << 16), tail = FC_BUF_INIT(1 << 16);
    uint64_t total = 0;
    char path[256];
    assert_fc_ok(fc_zipw_layout(r, 4, "big", &total));
    assert_int_equal(r[1].data_offset % 64, 0);
    assert_true(r[2].header_offset > 0xFFFFFFFFu);
    assert_int_equal(r[2].data_offset % 64, 0);
    const uint64_t d1 = r[1].data_offset + r[1].size;
    assert_fc_ok(fc_zipw_emit(r, 4, "big", 0, r[1].data_offset, &head));
    assert_fc_ok(fc_zipw_emit(r, 4, "big", d1, total, &tail));
    /* 24-byte descriptors after both records carrying a ZIP64 extra. */
    assert_int_equal(r[2].header_offset, d1 + 24);
    assert_int_equal(r[3].header_offset, r[2].data_offset + sizeof(small) + 24);

    snprintf(path, sizeof(path), "%s/zip64.pt", g_dir);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(head.data, 1, head.len, fp), head.len);
    assert_int_equal(fseeko(fp, (off_t)d1, SEEK_SET), 0);
    assert_int_equal(fwrite(tail.data, 1, tail.len, fp), tail.len);
    assert_int_equal(fclose(fp), 0);

    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    assert_fc_ok(fc_file_open_read(&f, path));
    assert_int_equal(f.size, total);
    assert_fc_ok(fc_zip_reader_open(&zr, &f, 0, f.size, path));
    assert_int_equal(fc_zip_count(zr), 4);
    const struct fc_zip_entry *e0 = fc_zip_find(zr, "data/0");
    const struct fc_zip_entry *e1 = fc_zip_find(zr, "data/1");
    assert_int_equal(e0->size, ((uint64_t)1 << 32) + 100);
    assert_int_equal(e0->data_offset, r[1].data_offset);
    assert_int_equal(e0->crc32, 0x12345678u);
    assert_int_equal(e1->data_offset, r[2].data_offset);
    assert_fc_ok(fc_zip_verify_crc(zr, e1));
    unsigned char *v = NULL;
    assert_fc_ok(fc_zip_read_record(zr, fc_zip_find(zr, "version"), 16, &v));
    assert_string_equal((char *)v, "3\n");
    fc_free(v);
    fc_zip_reader_free(zr);

    /* The classic end record saturates the central directory offset. */
    const unsigned char *eocd = tail.data + tail.len - 22;
    assert_int_equal(fc_read_le32(eocd), 0x06054b50u);
    assert_int_equal(fc_read_le32(eocd + 16), 0xFFFFFFFFu);

    /* Dropping the ZIP64 records leaves a saturated offset nobody can resolve. */
    fc_file_close(&f);
    fc_buf_release(&head);
    fc_buf_release(&tail);
    assert_int_equal(remove(path), 0);
}

/* Every allocation failure while opening is reported as FC_ENOMEM and leaks nothing. */
static void test_zip_open_survives_allocation_failures(void **state)
{
    (void)state;
    struct fc_file f = FC_FILE_INIT;
    struct fc_zip_reader *zr = NULL;
    open_bytes(&f, ts_f32, TS_F32_LEN);
    for (unsigned long n = 1;; n++) {
        fc_alloc_fail_at(n);
        const int rc = fc_zip_reader_open(&zr, &f, 0, f.size, "t.pt");
        const int fired = fc_alloc_failed();
        fc_alloc_fail_at(0);
        if (!fired) {
            assert_fc_ok(rc);
            break;
        }
        assert_int_equal(rc, FC_ENOMEM);
        assert_null(zr);
    }
    fc_zip_reader_free(zr);
    fc_file_close(&f);
}

static int setup(void **state)
{
    (void)state;
    g_dir = fc_test_tmpdir();
    return g_dir == NULL ? -1 : 0;
}

static int teardown(void **state)
{
    (void)state;
    fc_test_rmdir(g_dir);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32_combine_matches_the_whole),
        cmocka_unit_test(test_zip_reads_a_real_torch_archive),
        cmocka_unit_test(test_zip_reads_a_zero_length_record),
        cmocka_unit_test(test_zip_writer_reproduces_torch_bytes_exactly),
        cmocka_unit_test(test_zip_writer_streams_a_payload_given_its_crc_later),
        cmocka_unit_test(test_zip_writer_pads_a_record_to_its_alignment),
        cmocka_unit_test(test_zip_writer_rejects_bad_record_names),
        cmocka_unit_test(test_zip_reads_an_archive_inside_a_larger_file),
        cmocka_unit_test(test_zip_rejects_every_truncation),
        cmocka_unit_test(test_zip_rejects_bad_signatures),
        cmocka_unit_test(test_zip_rejects_a_payload_running_into_the_central_directory),
        cmocka_unit_test(test_zip_rejects_overlapping_entries),
        cmocka_unit_test(test_zip_rejects_compressed_entries),
        cmocka_unit_test(test_zip_can_list_compressed_entries_without_reading_them),
        cmocka_unit_test(test_zip_rejects_encrypted_entries),
        cmocka_unit_test(test_zip_rejects_entries_outside_the_archive_folder),
        cmocka_unit_test(test_zip_rejects_duplicate_entries),
        cmocka_unit_test(test_zip_rejects_saturated_fields_without_zip64_extra),
        cmocka_unit_test(test_zip_rejects_inconsistent_end_records),
        cmocka_unit_test(test_zip_accepts_other_producers_and_comments),
        cmocka_unit_test(test_zip_reads_around_its_head_and_tail_blocks),
        cmocka_unit_test(test_zip_rejects_files_that_are_not_zip),
        cmocka_unit_test(test_zip_verify_crc_detects_a_changed_payload),
        cmocka_unit_test(test_zip_verify_crc_skips_records_saved_without_one),
        cmocka_unit_test(test_zip_reads_zip64_sizes_and_offsets),
        cmocka_unit_test(test_zip_open_survives_allocation_failures),
    };
    return cmocka_run_group_tests_name("zip", tests, setup, teardown);
}
