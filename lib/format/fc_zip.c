/*
 * fc_zip.c - ZIP/ZIP64 reader for stored entries and the torch.save-layout
 * writer (input-formats.md A.2, A.10; dcp-format.md 3.2).
 *
 * The reader trusts nothing: every offset and size read from the archive is
 * checked against the window and the central directory before use, the entry
 * count is capped by the central directory size, and payloads (with their
 * local headers) must not overlap.  The writer reproduces the bytes miniz
 * writes for torch (PyTorchStreamWriter): local headers with flags 0x0808 and
 * zero CRC/sizes, "FB" extra padding to 64-byte payload alignment, data
 * descriptors after non-empty payloads, then the central directory, a ZIP64
 * end record, its locator and the classic end record.
 */
#include "fc_zip.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include <libdeflate.h>

#include "fc_alloc.h"
#include "fc_checked.h"
#include "fc_endian.h"
#include "fc_error.h"

#define ZIP_LFH_SIG    0x04034b50u
#define ZIP_CDH_SIG    0x02014b50u
#define ZIP_DD_SIG     0x08074b50u
#define ZIP_EOCD_SIG   0x06054b50u
#define ZIP64_EOCD_SIG 0x06064b50u
#define ZIP64_LOC_SIG  0x07064b50u

#define ZIP_LFH_SIZE    30u
#define ZIP_CDH_SIZE    46u
#define ZIP_EOCD_SIZE   22u
#define ZIP64_EOCD_SIZE 56u
#define ZIP64_LOC_SIZE  20u
#define ZIP_DD32_SIZE   16u
#define ZIP_DD64_SIZE   24u
#define ZIP_MAX_COMMENT 65535u
#define ZIP_U32_MAX     0xFFFFFFFFu
#define ZIP_U16_MAX     0xFFFFu

#define ZIP_FLAG_ENCRYPTED         0x0001u
#define ZIP_FLAG_STRONG_ENCRYPTION 0x0040u
#define ZIP_FLAG_DESCRIPTOR        0x0008u
#define ZIP_FLAG_UTF8              0x0800u

/* Central directories above this are refused (a torch file has ~100 bytes per tensor). */
#define ZIP_CD_CAP ((size_t)1 << 30)
/* Payload alignment torch (miniz with FB padding) uses. */
#define ZIPW_ALIGN 64u

struct zip_span {
    uint64_t start; /* local header offset (window-relative) */
    uint64_t end;   /* end of the payload */
    size_t idx;
};

/*
 * An archive's own structures (end records, central directory, local headers)
 * and the small records torch writes around its data lie within its first
 * and last few KiB.  A DCP item is an archive of its own, and a checkpoint may
 * hold a million of them, so reads there are served from two blocks, each
 * read once: the tail (which the search for the end record reads anyway) and
 * the head.  About twenty syscalls an item become two, or one for an item of
 * at most ZIP_BLOCK bytes.
 */
#define ZIP_BLOCK ((size_t)4096)

struct zip_block {
    unsigned char *data;
    uint64_t off; /* window-relative */
    size_t len;
};

struct fc_zip_reader {
    const struct fc_file *f;
    uint64_t base;
    uint64_t len;
    struct zip_block head, tail;
    char *what;
    char *prefix;
    char *names; /* every entry name, NUL-terminated, back to back */
    struct fc_zip_entry *entries;
    size_t n;
    size_t *by_record; /* entry indices sorted by record name */
    unsigned flags;    /* FC_ZIP_* */
};

uint32_t fc_crc32(uint32_t crc, const void *p, size_t n)
{
    return libdeflate_crc32(crc, p, n);
}

/*
 * CRC-32 combination, as zlib's crc32_combine computes it: appending len_b
 * bytes multiplies A's CRC by x^(8 len_b) modulo the polynomial (GF(2),
 * bit-reflected), and B's CRC adds.  libdeflate, our CRC library, has no
 * combine, and linking zlib for these few lines would add a library to lib/
 * and to the static wheel.  fc_crc32_mulmod: a*b mod P, reflected (bit 31 is x^0).
 */
static uint32_t fc_crc32_mulmod(uint32_t a, uint32_t b)
{
    uint32_t m = (uint32_t)1 << 31, p = 0;
    for (;;) {
        if (a & m) {
            p ^= b;
            if ((a & (m - 1)) == 0)
                break;
        }
        m >>= 1;
        b = b & 1 ? (b >> 1) ^ 0xedb88320u : b >> 1;
    }
    return p;
}

uint32_t fc_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b)
{
    uint32_t xp = (uint32_t)1 << 30;    /* x^1, then x^(2^k) by squaring */
    uint32_t shift = (uint32_t)1 << 31; /* x^0 */
    for (int k = 0; k < 3; k++)         /* x^8: bytes to bits */
        xp = fc_crc32_mulmod(xp, xp);
    for (; len_b != 0; len_b >>= 1) {
        if (len_b & 1)
            shift = fc_crc32_mulmod(xp, shift);
        xp = fc_crc32_mulmod(xp, xp);
    }
    return fc_crc32_mulmod(shift, crc_a) ^ crc_b;
}

void fc_zip_reader_free(struct fc_zip_reader *zr)
{
    if (zr == NULL)
        return;
    fc_free(zr->what);
    fc_free(zr->prefix);
    fc_free(zr->names);
    fc_free(zr->entries);
    fc_free(zr->by_record);
    fc_free(zr->head.data);
    fc_free(zr->tail.data);
    fc_free(zr);
}

/* [off, off+n) of the window from a block already read, or NULL. */
static const unsigned char *zip_cached(const struct fc_zip_reader *zr, uint64_t off, uint64_t n)
{
    const struct zip_block *b[2] = {&zr->head, &zr->tail};
    for (int i = 0; i < 2; i++)
        if (b[i]->data != NULL && off >= b[i]->off && off - b[i]->off <= b[i]->len &&
            n <= b[i]->len - (off - b[i]->off))
            return b[i]->data + (off - b[i]->off);
    return NULL;
}

/* Read [off, off+n) of the window; off and n were checked against the window by the caller. */
static int zip_pread(const struct fc_zip_reader *zr, void *dst, size_t n, uint64_t off)
{
    const unsigned char *c = zip_cached(zr, off, n);
    if (c != NULL) {
        memcpy(dst, c, n);
        return FC_OK;
    }
    return fc_file_pread(zr->f, dst, n, zr->base + off);
}

/* fc_file_read_alloc() of [off, off+n) of the window, from a block when it holds it. */
static int zip_read_alloc(const struct fc_zip_reader *zr, uint64_t off, size_t n, size_t cap,
                          unsigned char **out)
{
    const unsigned char *c = zip_cached(zr, off, n);
    if (c == NULL || n > cap)
        return fc_file_read_alloc(zr->f, zr->base + off, n, cap, out);
    *out = fc_malloc(n + 1);
    if (*out == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory reading %zu bytes", zr->what, n);
    memcpy(*out, c, n);
    (*out)[n] = '\0';
    return FC_OK;
}

/* Whether [off, off+n) lies inside [0, limit). */
static int zip_range_ok(uint64_t off, uint64_t n, uint64_t limit)
{
    return off <= limit && n <= limit - off;
}

struct zip_eocd {
    uint64_t count;
    uint64_t cd_size;
    uint64_t cd_off;
    uint64_t cd_limit; /* the central directory must end at or before this offset */
};

/* Find the classic end record by scanning back over a comment, then the ZIP64 records. */
/*
 * Find the end-of-central-directory record in the archive's last bytes (kept
 * as zr->tail): *pos_out is its offset in zr->tail.
 */
static int zip_scan_tail(struct fc_zip_reader *zr, size_t *pos_out)
{
    const uint64_t max_tail = ZIP_EOCD_SIZE + ZIP_MAX_COMMENT + ZIP64_LOC_SIZE;
    const size_t full_len = (size_t)(zr->len < max_tail ? zr->len : max_tail);
    /* First the last block (torch's archives have no comment), then all a comment allows. */
    size_t tail_len = full_len < ZIP_BLOCK ? full_len : ZIP_BLOCK;
    unsigned char *tail = NULL;
    unsigned char head[4] = {0};
    int rc = FC_OK;

    if (zr->len < ZIP_EOCD_SIZE) {
        if (zr->len >= 4 && zip_pread(zr, head, 4, 0) == FC_OK && fc_read_le32(head) == ZIP_LFH_SIG)
            return fc_error_set(FC_ECORRUPT, "%s: truncated ZIP archive (%" PRIu64 " bytes)",
                                zr->what, zr->len);
        return fc_error_set(FC_EFORMAT, "%s: not a ZIP archive (%" PRIu64 " bytes)", zr->what,
                            zr->len);
    }
    size_t pos = 0;
    int found = 0;
    for (;;) {
        tail = fc_malloc(tail_len);
        if (tail == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", zr->what);
        rc = zip_pread(zr, tail, tail_len, zr->len - tail_len);
        if (rc < 0) {
            fc_free(tail);
            return rc;
        }
        pos = tail_len - ZIP_EOCD_SIZE;
        for (;;) {
            const size_t comment = tail_len - pos - ZIP_EOCD_SIZE;
            if (comment > ZIP_MAX_COMMENT)
                break;
            if (fc_read_le32(tail + pos) == ZIP_EOCD_SIG &&
                fc_read_le16(tail + pos + 20) == comment) {
                found = 1;
                break;
            }
            if (pos == 0)
                break;
            pos--;
        }
        if (found || tail_len == full_len)
            break;
        fc_free(tail);
        tail = NULL;
        tail_len = full_len;
    }
    /* Kept: the reads below and the central directory mostly fall in it. */
    zr->tail = (struct zip_block){tail, zr->len - tail_len, tail_len};
    if (!found) {
        if (zip_pread(zr, head, 4, 0) == FC_OK && fc_read_le32(head) == ZIP_LFH_SIG)
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: no end-of-central-directory record (truncated ZIP archive?)",
                              zr->what);
        else
            rc = fc_error_set(FC_EFORMAT,
                              "%s: not a ZIP archive (no end-of-central-directory "
                              "record)",
                              zr->what);
        return rc;
    }
    *pos_out = pos;
    return FC_OK;
}

/*
 * The ZIP64 end record that the locator loc (at loc_off, right before the
 * classic end record) points at: it must agree with the classic record's
 * n_total, cd_size32 and cd_off32 where those are not saturated, and replaces
 * them in *out.
 */
static int zip_read_zip64(struct fc_zip_reader *zr, uint64_t loc_off, const unsigned char *loc,
                          uint64_t n_total, uint32_t cd_size32, uint32_t cd_off32,
                          struct zip_eocd *out)
{
    const uint32_t z64_disk = fc_read_le32(loc + 4);
    const uint64_t z64_off = fc_read_le64(loc + 8);
    const uint32_t ndisks = fc_read_le32(loc + 16);
    unsigned char z[ZIP64_EOCD_SIZE];
    if (z64_disk != 0 || ndisks > 1) {
        return fc_error_set(FC_EFORMAT,
                            "%s: offset %" PRIu64 ": multi-disk (spanned) ZIP "
                            "archives are not supported",
                            zr->what, loc_off);
    }
    if (!zip_range_ok(z64_off, ZIP64_EOCD_SIZE, loc_off)) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": ZIP64 locator points at %" PRIu64
                            ", outside the archive",
                            zr->what, loc_off, z64_off);
    }
    FC_TRY(zip_pread(zr, z, ZIP64_EOCD_SIZE, z64_off));
    const uint64_t rec_size = fc_read_le64(z + 4);
    if (fc_read_le32(z) != ZIP64_EOCD_SIG || rec_size < ZIP64_EOCD_SIZE - 12 ||
        rec_size > loc_off - z64_off - 12) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": bad ZIP64 end of central "
                            "directory record",
                            zr->what, z64_off);
    }
    if (fc_read_le32(z + 16) != 0 || fc_read_le32(z + 20) != 0) {
        return fc_error_set(FC_EFORMAT,
                            "%s: offset %" PRIu64 ": multi-disk (spanned) ZIP "
                            "archives are not supported",
                            zr->what, z64_off);
    }
    const uint64_t z_n_disk = fc_read_le64(z + 24), z_n_total = fc_read_le64(z + 32);
    const uint64_t z_cd_size = fc_read_le64(z + 40), z_cd_off = fc_read_le64(z + 48);
    if (z_n_disk != z_n_total || (n_total != ZIP_U16_MAX && n_total != z_n_total) ||
        (cd_size32 != ZIP_U32_MAX && cd_size32 != z_cd_size) ||
        (cd_off32 != ZIP_U32_MAX && cd_off32 != z_cd_off)) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": ZIP64 end record disagrees "
                            "with the classic end record",
                            zr->what, z64_off);
    }
    out->count = z_n_total;
    out->cd_size = z_cd_size;
    out->cd_off = z_cd_off;
    out->cd_limit = z64_off;
    return FC_OK;
}

/* The central directory *out describes must fit before its end record and hold its entries. */
static int zip_check_cd(const struct fc_zip_reader *zr, const struct zip_eocd *out)
{
    if (!zip_range_ok(out->cd_off, out->cd_size, out->cd_limit)) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: central directory [%" PRIu64 ", +%" PRIu64 ") does "
                            "not end before its end record at %" PRIu64,
                            zr->what, out->cd_off, out->cd_size, out->cd_limit);
    }
    if (out->count == 0) {
        return fc_error_set(FC_EFORMAT, "%s: empty ZIP archive (no entries)", zr->what);
    }
    if (out->count > out->cd_size / ZIP_CDH_SIZE) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: %" PRIu64 " entries cannot fit in a central "
                            "directory of %" PRIu64 " bytes",
                            zr->what, out->count, out->cd_size);
    }
    if (out->cd_size > ZIP_CD_CAP) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: central directory of %" PRIu64 " bytes exceeds "
                            "the limit of %zu",
                            zr->what, out->cd_size, ZIP_CD_CAP);
    }
    return FC_OK;
}

static int zip_find_eocd(struct fc_zip_reader *zr, struct zip_eocd *out)
{
    size_t pos = 0;
    FC_TRY(zip_scan_tail(zr, &pos));
    const unsigned char *e = zr->tail.data + pos;
    const uint64_t eocd_off = zr->tail.off + pos;
    const uint16_t disk = fc_read_le16(e + 4), cd_disk = fc_read_le16(e + 6);
    const uint16_t n_disk = fc_read_le16(e + 8), n_total = fc_read_le16(e + 10);
    const uint32_t cd_size32 = fc_read_le32(e + 12), cd_off32 = fc_read_le32(e + 16);

    out->count = n_total;
    out->cd_size = cd_size32;
    out->cd_off = cd_off32;
    out->cd_limit = eocd_off;

    /* ZIP64 locator immediately before the classic end record. */
    unsigned char loc[ZIP64_LOC_SIZE];
    int have_loc = 0;
    if (eocd_off >= ZIP64_LOC_SIZE) {
        FC_TRY(zip_pread(zr, loc, ZIP64_LOC_SIZE, eocd_off - ZIP64_LOC_SIZE));
        have_loc = fc_read_le32(loc) == ZIP64_LOC_SIG;
    }
    if (have_loc) {
        FC_TRY(
            zip_read_zip64(zr, eocd_off - ZIP64_LOC_SIZE, loc, n_total, cd_size32, cd_off32, out));
    } else if (disk != 0 || cd_disk != 0 || n_disk != n_total) {
        return fc_error_set(FC_EFORMAT,
                            "%s: offset %" PRIu64 ": multi-disk (spanned) ZIP "
                            "archives are not supported",
                            zr->what, eocd_off);
    }
    return zip_check_cd(zr, out);
}

/* Read the head block (zip_block): what the tail block does not already hold of it. */
static int zip_read_head(struct fc_zip_reader *zr)
{
    const size_t n = (size_t)(zr->tail.off < ZIP_BLOCK ? zr->tail.off : ZIP_BLOCK);
    if (n == 0)
        return FC_OK;
    unsigned char *h = fc_malloc(n);
    if (h == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", zr->what);
    const int rc = fc_file_pread(zr->f, h, n, zr->base);
    if (rc < 0) {
        fc_free(h);
        return rc;
    }
    zr->head = (struct zip_block){h, 0, n};
    return FC_OK;
}

/*
 * Resolve saturated 32-bit fields from the ZIP64 extra (id 1), in the order
 * uncompressed size, compressed size, local header offset.
 */
static int zip_apply_zip64(const struct fc_zip_reader *zr, const char *name,
                           const unsigned char *extra, size_t elen, uint64_t *usize,
                           uint64_t *csize, uint64_t *off, uint64_t cd_pos)
{
    const int need_u = *usize == ZIP_U32_MAX, need_c = *csize == ZIP_U32_MAX;
    const int need_o = *off == ZIP_U32_MAX;
    size_t p = 0;
    if (!need_u && !need_c && !need_o)
        return FC_OK;
    while (p + 4 <= elen) {
        const uint16_t id = fc_read_le16(extra + p), sz = fc_read_le16(extra + p + 2);
        if (sz > elen - p - 4)
            break;
        if (id == 0x0001) {
            const unsigned char *d = extra + p + 4;
            size_t q = 0;
            const size_t want = 8u * (size_t)(need_u + need_c + need_o);
            if (sz < want)
                return fc_error_set(FC_ECORRUPT,
                                    "%s: offset %" PRIu64 ": ZIP64 extra of entry "
                                    "'%s' has %u bytes, needs %zu",
                                    zr->what, cd_pos, name, (unsigned)sz, want);
            if (need_u) {
                *usize = fc_read_le64(d + q);
                q += 8;
            }
            if (need_c) {
                *csize = fc_read_le64(d + q);
                q += 8;
            }
            if (need_o)
                *off = fc_read_le64(d + q);
            return FC_OK;
        }
        p += 4u + sz;
    }
    return fc_error_set(FC_ECORRUPT,
                        "%s: offset %" PRIu64 ": entry '%s' has saturated 32-bit "
                        "fields but no ZIP64 extra field",
                        zr->what, cd_pos, name);
}

static int zip_span_cmp(const void *a, const void *b)
{
    const struct zip_span *x = a, *y = b;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->end < y->end ? -1 : (x->end > y->end);
}

/* Entries sorted by record name; qsort has no context argument, so sort pointers. */
static int zip_entry_ptr_cmp(const void *a, const void *b)
{
    const struct fc_zip_entry *const *x = a, *const *y = b;
    return strcmp((*x)->record, (*y)->record);
}

/* Walk the central directory and every local header. */
/* What one central directory entry says, once checked (zip_read_cd). */
struct zip_cd_rec {
    const char *name;
    size_t nlen, elen, clen;
    uint16_t method;
    uint32_t crc;
    uint64_t csize, usize, hdr; /* hdr: the local header's offset */
};

/*
 * Central directory entry i, at cd + pos (file offset cd_pos), into *r: its
 * name copied to name (NUL-terminated), ZIP64 sizes resolved, and refused when
 * it is spanned, encrypted, compressed (unless allowed) or inconsistent.
 */
static int zip_parse_cdh(struct fc_zip_reader *zr, const unsigned char *cd, size_t cd_size,
                         size_t pos, uint64_t cd_pos, size_t i, char *name, struct zip_cd_rec *r)
{
    const unsigned char *c = cd + pos;
    const uint16_t flags = fc_read_le16(c + 8);
    const uint16_t disk = fc_read_le16(c + 34);
    r->method = fc_read_le16(c + 10);
    r->crc = fc_read_le32(c + 16);
    r->csize = fc_read_le32(c + 20);
    r->usize = fc_read_le32(c + 24);
    r->nlen = fc_read_le16(c + 28);
    r->elen = fc_read_le16(c + 30);
    r->clen = fc_read_le16(c + 32);
    r->hdr = fc_read_le32(c + 42);
    const size_t nlen = r->nlen, elen = r->elen, clen = r->clen;
    if (cd_size - pos - ZIP_CDH_SIZE < nlen + elen + clen) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": central directory entry %zu "
                            "runs past the end of the central directory",
                            zr->what, cd_pos, i);
    }
    memcpy(name, c + ZIP_CDH_SIZE, nlen);
    name[nlen] = '\0';
    r->name = name;
    if (nlen == 0 || memchr(name, '\0', nlen) != NULL) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": central directory entry %zu "
                            "has an empty name or a NUL byte in its name",
                            zr->what, cd_pos, i);
    }
    FC_TRY(zip_apply_zip64(zr, name, c + ZIP_CDH_SIZE + nlen, elen, &r->usize, &r->csize, &r->hdr,
                           cd_pos));
    if (disk != 0 && disk != ZIP_U16_MAX) {
        return fc_error_set(FC_EFORMAT,
                            "%s: entry '%s' starts on disk %u: multi-disk ZIP "
                            "archives are not supported",
                            zr->what, name, (unsigned)disk);
    }
    if (flags & (ZIP_FLAG_ENCRYPTED | ZIP_FLAG_STRONG_ENCRYPTION)) {
        return fc_error_set(FC_EFORMAT,
                            "%s: entry '%s' is encrypted; encrypted ZIP entries "
                            "are not supported",
                            zr->what, name);
    }
    if (r->method != 0 && !(zr->flags & FC_ZIP_ALLOW_COMPRESSED)) {
        return fc_error_set(FC_EFORMAT,
                            "%s: compressed entry '%s' (method %u); re-save it "
                            "with torch.save",
                            zr->what, name, (unsigned)r->method);
    }
    if (r->method == 0 && r->csize != r->usize) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": stored entry '%s' has "
                            "compressed size %" PRIu64 " != uncompressed size %" PRIu64,
                            zr->what, cd_pos, name, r->csize, r->usize);
    }

    return FC_OK;
}

/*
 * The local header of entry r (read into lfh) must agree with the central
 * directory: signature, name, no encryption; *data_off gets where its data
 * starts, which must end before the central directory.
 */
static int zip_check_lfh(struct fc_zip_reader *zr, const struct zip_eocd *eo, unsigned char *lfh,
                         const struct zip_cd_rec *r, uint64_t *data_off)
{
    const char *name = r->name;
    const size_t nlen = r->nlen;
    const uint64_t hdr = r->hdr, csize = r->csize;
    /* Local header: signature and name must agree with the central directory. */
    if (!zip_range_ok(hdr, ZIP_LFH_SIZE + nlen, eo->cd_off)) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: entry '%s': local header offset %" PRIu64
                            " is not before the central directory at %" PRIu64,
                            zr->what, name, hdr, eo->cd_off);
    }
    FC_TRY(zip_pread(zr, lfh, ZIP_LFH_SIZE + nlen, hdr));
    if (fc_read_le32(lfh) != ZIP_LFH_SIG) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": entry '%s': bad local "
                            "header signature 0x%08" PRIx32,
                            zr->what, hdr, name, fc_read_le32(lfh));
    }
    const size_t lnlen = fc_read_le16(lfh + 26), lelen = fc_read_le16(lfh + 28);
    if (lnlen != nlen || memcmp(lfh + ZIP_LFH_SIZE, name, nlen) != 0) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: offset %" PRIu64 ": local header name does not "
                            "match central directory name '%s'",
                            zr->what, hdr, name);
    }
    if (fc_read_le16(lfh + 6) & (ZIP_FLAG_ENCRYPTED | ZIP_FLAG_STRONG_ENCRYPTION)) {
        return fc_error_set(FC_EFORMAT,
                            "%s: entry '%s' is encrypted; encrypted ZIP entries "
                            "are not supported",
                            zr->what, name);
    }
    *data_off = hdr + ZIP_LFH_SIZE + nlen + lelen; /* hdr < cd_off: no wrap */
    if (!zip_range_ok(*data_off, csize, eo->cd_off)) {
        return fc_error_set(FC_ECORRUPT,
                            "%s: entry '%s': data at offset %" PRIu64 " (%" PRIu64
                            " bytes) runs into the central directory at %" PRIu64,
                            zr->what, name, *data_off, csize, eo->cd_off);
    }

    return FC_OK;
}

/* No two entries (local header through payload) may overlap. */
static int zip_check_overlap(const struct fc_zip_reader *zr, struct zip_span *spans, size_t count)
{
    qsort(spans, count, sizeof(*spans), zip_span_cmp);
    for (size_t i = 0; i + 1 < count; i++) {
        if (spans[i].end > spans[i + 1].start) {
            return fc_error_set(FC_ECORRUPT, "%s: entries '%s' and '%s' overlap at offset %" PRIu64,
                                zr->what, zr->entries[spans[i].idx].name,
                                zr->entries[spans[i + 1].idx].name, spans[i + 1].start);
        }
    }

    return FC_OK;
}

/*
 * The archive folder (zr->prefix): the text before the first '/' of the first
 * name, which every entry must share; then each entry's record name, and
 * zr->by_record in record name order (sorted: scratch for count pointers).
 */
static int zip_index_records(struct fc_zip_reader *zr, const struct fc_zip_entry **sorted,
                             size_t count)
{
    const char *first = zr->entries[0].name;
    const char *slash = strchr(first, '/');
    if (slash == NULL) {
        return fc_error_set(FC_EFORMAT,
                            "%s: first entry '%s' is not inside a folder (not a "
                            "torch.save archive)",
                            zr->what, first);
    }
    const size_t plen = (size_t)(slash - first);
    zr->prefix = fc_strndup(first, plen);
    if (zr->prefix == NULL) {
        return fc_error_set(FC_ENOMEM, "%s: out of memory", zr->what);
    }
    for (size_t i = 0; i < count; i++) {
        struct fc_zip_entry *ent = &zr->entries[i];
        if (strncmp(ent->name, zr->prefix, plen) != 0 || ent->name[plen] != '/') {
            return fc_error_set(FC_EFORMAT,
                                "%s: entry '%s' is not inside the archive folder "
                                "'%s/'",
                                zr->what, ent->name, zr->prefix);
        }
        ent->record = ent->name + plen + 1;
        sorted[i] = ent;
    }
    qsort(sorted, count, sizeof(*sorted), zip_entry_ptr_cmp);
    for (size_t i = 0; i < count; i++) {
        zr->by_record[i] = (size_t)(sorted[i] - zr->entries);
        if (i > 0 && strcmp(sorted[i - 1]->record, sorted[i]->record) == 0) {
            return fc_error_set(FC_ECORRUPT, "%s: duplicate entry '%s'", zr->what, sorted[i]->name);
        }
    }
    return FC_OK;
}

static int zip_read_cd(struct fc_zip_reader *zr, const struct zip_eocd *eo)
{
    unsigned char *cd = NULL, *lfh = NULL;
    struct zip_span *spans = NULL;
    const struct fc_zip_entry **sorted = NULL;
    const size_t count = (size_t)eo->count, cd_size = (size_t)eo->cd_size;
    size_t pos = 0, names_len = 0;
    int rc = FC_OK;

    FC_TRY_GOTO(zip_read_alloc(zr, eo->cd_off, cd_size, ZIP_CD_CAP, &cd), rc, done);
    zr->entries = fc_calloc(count, sizeof(*zr->entries));
    spans = fc_calloc(count, sizeof(*spans));
    /* Names take at most cd_size bytes plus one NUL each (count <= cd_size / 46). */
    zr->names = fc_malloc(cd_size + count);
    lfh = fc_malloc(ZIP_LFH_SIZE + ZIP_U16_MAX);
    zr->by_record = fc_calloc(count, sizeof(*zr->by_record));
    sorted = fc_calloc(count, sizeof(*sorted));
    if (zr->entries == NULL || spans == NULL || zr->names == NULL || lfh == NULL ||
        zr->by_record == NULL || sorted == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory reading %zu ZIP entries", zr->what, count);
        goto done;
    }

    for (size_t i = 0; i < count; i++) {
        const uint64_t cd_pos = eo->cd_off + pos;
        if (cd_size - pos < ZIP_CDH_SIZE || fc_read_le32(cd + pos) != ZIP_CDH_SIG) {
            rc = fc_error_set(FC_ECORRUPT,
                              "%s: offset %" PRIu64 ": bad central directory "
                              "entry %zu of %zu",
                              zr->what, cd_pos, i, count);
            goto done;
        }
        struct zip_cd_rec r = {0};
        uint64_t data_off = 0;
        FC_TRY_GOTO(zip_parse_cdh(zr, cd, cd_size, pos, cd_pos, i, zr->names + names_len, &r), rc,
                    done);
        names_len += r.nlen + 1;
        FC_TRY_GOTO(zip_check_lfh(zr, eo, lfh, &r, &data_off), rc, done);
        struct fc_zip_entry *ent = &zr->entries[i];
        ent->name = r.name;
        ent->record = r.name;
        ent->data_offset = zr->base + data_off;
        ent->size = r.usize;
        ent->csize = r.csize;
        ent->crc32 = r.crc;
        ent->method = r.method;
        spans[i].start = r.hdr;
        spans[i].end = data_off + r.csize;
        spans[i].idx = i;
        pos += ZIP_CDH_SIZE + r.nlen + r.elen + r.clen;
    }
    if (pos != cd_size) {
        rc = fc_error_set(FC_ECORRUPT,
                          "%s: central directory holds %zu entries in %zu bytes "
                          "but declares %zu bytes",
                          zr->what, count, pos, cd_size);
        goto done;
    }

    FC_TRY_GOTO(zip_check_overlap(zr, spans, count), rc, done);
    FC_TRY_GOTO(zip_index_records(zr, sorted, count), rc, done);
    zr->n = count;
done:
    fc_free(cd);
    fc_free(lfh);
    fc_free(spans);
    fc_free(sorted);
    return rc;
}

int fc_zip_reader_open(struct fc_zip_reader **out, const struct fc_file *f, uint64_t base,
                       uint64_t len, const char *what)
{
    return fc_zip_reader_open_ex(out, f, base, len, what, 0);
}

int fc_zip_reader_open_ex(struct fc_zip_reader **out, const struct fc_file *f, uint64_t base,
                          uint64_t len, const char *what, unsigned flags)
{
    struct fc_zip_reader *zr = NULL;
    struct zip_eocd eo = {0, 0, 0, 0};
    int rc = FC_OK;

    *out = NULL;
    if (what == NULL)
        what = f->path != NULL ? f->path : "archive";
    if (!zip_range_ok(base, len, f->size))
        return fc_error_set(FC_ECORRUPT,
                            "%s: archive window [%" PRIu64 ", +%" PRIu64
                            ") is outside the file (%" PRIu64 " bytes)",
                            what, base, len, f->size);
    zr = fc_calloc(1, sizeof(*zr));
    if (zr == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
    zr->f = f;
    zr->base = base;
    zr->len = len;
    zr->flags = flags;
    zr->what = fc_strdup(what);
    if (zr->what == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        goto done;
    }
    FC_TRY_GOTO(zip_find_eocd(zr, &eo), rc, done);
    FC_TRY_GOTO(zip_read_head(zr), rc, done);
    FC_TRY_GOTO(zip_read_cd(zr, &eo), rc, done);
    *out = zr;
    zr = NULL;
done:
    fc_zip_reader_free(zr);
    return rc;
}

size_t fc_zip_count(const struct fc_zip_reader *zr)
{
    return zr->n;
}

const struct fc_zip_entry *fc_zip_entry_at(const struct fc_zip_reader *zr, size_t i)
{
    return i < zr->n ? &zr->entries[i] : NULL;
}

const char *fc_zip_prefix(const struct fc_zip_reader *zr)
{
    return zr->prefix;
}

const struct fc_zip_entry *fc_zip_find(const struct fc_zip_reader *zr, const char *record)
{
    size_t lo = 0, hi = zr->n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const struct fc_zip_entry *e = &zr->entries[zr->by_record[mid]];
        const int c = strcmp(record, e->record);
        if (c == 0)
            return e;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

int fc_zip_read_record(const struct fc_zip_reader *zr, const struct fc_zip_entry *e, size_t cap,
                       unsigned char **out)
{
    *out = NULL;
    if (e->method != 0)
        return fc_error_set(FC_EFORMAT,
                            "%s: compressed entry '%s' (method %u); re-save it with torch.save",
                            zr->what, e->name, (unsigned)e->method);
    if (e->size > cap)
        return fc_error_set(FC_ECORRUPT,
                            "%s: record '%s' is %" PRIu64 " bytes, more than the "
                            "%zu allowed",
                            zr->what, e->record, e->size, cap);
    return zip_read_alloc(zr, e->data_offset - zr->base, (size_t)e->size, cap, out);
}

int fc_crc32_file(const struct fc_file *f, uint64_t off, uint64_t n, uint32_t *out)
{
    const size_t chunk = (size_t)1 << 20;
    unsigned char *buf = fc_malloc(chunk);
    uint64_t done_bytes = 0;
    uint32_t crc = 0;
    if (buf == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", f->path);
    while (done_bytes < n) {
        const uint64_t left = n - done_bytes;
        const size_t step = left < chunk ? (size_t)left : chunk;
        const int rc = fc_file_pread(f, buf, step, off + done_bytes);
        if (rc < 0) {
            fc_free(buf);
            return rc;
        }
        crc = fc_crc32(crc, buf, step);
        done_bytes += step;
    }
    fc_free(buf);
    *out = crc;
    return FC_OK;
}

int fc_zip_verify_crc(const struct fc_zip_reader *zr, const struct fc_zip_entry *e)
{
    uint32_t crc;
    if (e->method != 0)
        return fc_error_set(FC_EFORMAT,
                            "%s: compressed entry '%s' (method %u); re-save it with torch.save",
                            zr->what, e->name, (unsigned)e->method);
    if (e->crc32 == 0)
        return FC_OK; /* saved without CRCs (torch.serialization.set_crc32_options(False)) */
    const unsigned char *c = zip_cached(zr, e->data_offset - zr->base, e->size);
    if (c != NULL)
        crc = fc_crc32(0, c, (size_t)e->size);
    else
        FC_TRY(fc_crc32_file(zr->f, e->data_offset, e->size, &crc));
    if (crc != e->crc32)
        return fc_error_set(FC_ECORRUPT,
                            "%s: record '%s': CRC-32 is 0x%08" PRIx32 ", the "
                            "central directory says 0x%08" PRIx32,
                            zr->what, e->record, crc, e->crc32);
    return FC_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Writer                                                                                   */

/* Layout facts of one record that fc_zipw_emit re-derives from header/data offsets. */
struct zipw_rec_info {
    size_t name_len;
    int big_size;    /* size >= 0xFFFFFFFF */
    int big_off;     /* local header offset >= 0xFFFFFFFF */
    size_t z64_len;  /* ZIP64 extra (header + fields) in the local header and CD, or 0 */
    uint64_t dd_len; /* data descriptor bytes after the payload */
    uint64_t end;    /* offset just past the descriptor */
    size_t cd_len;   /* central directory entry bytes */
};

static int zipw_info(const struct fc_zipw_record *r, const char *prefix, uint64_t hdr,
                     struct zipw_rec_info *out)
{
    const size_t plen = strlen(prefix), rlen = strlen(r->record);
    if (rlen == 0 || plen + 1 + rlen > ZIP_U16_MAX)
        return fc_error_set(FC_EINVAL,
                            "zip writer: bad record name '%s/%s' (empty, or longer "
                            "than 65535 bytes)",
                            prefix, r->record);
    out->name_len = plen + 1 + rlen;
    out->big_size = r->size >= ZIP_U32_MAX;
    out->big_off = hdr >= ZIP_U32_MAX;
    out->z64_len = 0;
    if (out->big_size || out->big_off)
        out->z64_len = 4u + (out->big_size ? 16u : 0u) + (out->big_off ? 8u : 0u);
    out->dd_len = r->size == 0 ? 0 : (out->z64_len != 0 ? ZIP_DD64_SIZE : ZIP_DD32_SIZE);
    out->cd_len = ZIP_CDH_SIZE + out->name_len + out->z64_len;
    return FC_OK;
}

int fc_zipw_layout(struct fc_zipw_record *recs, size_t n, const char *prefix, uint64_t *total_out)
{
    return fc_zipw_layout_aligned(recs, n, prefix, NULL, total_out);
}

int fc_zipw_layout_aligned(struct fc_zipw_record *recs, size_t n, const char *prefix,
                           const uint32_t *align_of, uint64_t *total_out)
{
    uint64_t cur = 0, cd_size = 0;
    *total_out = 0;
    for (size_t i = 0; i < n; i++) {
        struct fc_zipw_record *r = &recs[i];
        struct zipw_rec_info info;
        uint64_t start, data, end;
        FC_TRY(zipw_info(r, prefix, cur, &info));
        const uint64_t align = align_of != NULL && align_of[i] != 0 ? align_of[i] : ZIPW_ALIGN;
        if (align < ZIPW_ALIGN || (align & (align - 1)) != 0)
            return fc_error_set(FC_EINVAL,
                                "zip writer: record '%s': alignment %" PRIu64
                                " is not a power of two >= 64",
                                r->record, align);
        /* torch's getPadding: header, name, ZIP64 extra, then "FB" + u16 before the pad. */
        start = cur + ZIP_LFH_SIZE + info.name_len + info.z64_len + 4;
        data = start + (align - start % align) % align;
        if (data < cur || fc_add_u64(data, r->size, &end) != 0 ||
            fc_add_u64(end, info.dd_len, &end) != 0)
            return fc_error_set(FC_EINVAL, "zip writer: archive size overflows at record '%s'",
                                r->record);
        if (data - (cur + ZIP_LFH_SIZE + info.name_len) > ZIP_U16_MAX)
            return fc_error_set(FC_EINVAL,
                                "zip writer: record '%s': padding to %" PRIu64
                                " bytes overflows the 16-bit extra field",
                                r->record, align);
        r->header_offset = cur;
        r->data_offset = data;
        if (r->size == 0)
            r->crc32 = 0;
        else if (r->data != NULL) {
            if (r->size > SIZE_MAX)
                return fc_error_set(FC_EINVAL, "zip writer: record '%s' too large for memory",
                                    r->record);
            r->crc32 = fc_crc32(0, r->data, (size_t)r->size);
        }
        cd_size += info.cd_len;
        cur = end;
    }
    if (fc_add_u64(cur, cd_size, &cur) != 0 ||
        fc_add_u64(cur, ZIP64_EOCD_SIZE + ZIP64_LOC_SIZE + ZIP_EOCD_SIZE, &cur) != 0)
        return fc_error_set(FC_EINVAL, "zip writer: archive size overflows");
    *total_out = cur;
    return FC_OK;
}

static int zipw_put_name(struct fc_buf *b, const char *prefix, const char *record)
{
    FC_TRY(fc_buf_puts(b, prefix));
    FC_TRY(fc_buf_putc(b, '/'));
    return fc_buf_puts(b, record);
}

/* ZIP64 extra: uncompressed and compressed size (if big), then the header offset (if big). */
static int zipw_put_z64(struct fc_buf *b, const struct zipw_rec_info *info, uint64_t usize,
                        uint64_t csize, uint64_t hdr)
{
    if (info->z64_len == 0)
        return FC_OK;
    FC_TRY(fc_buf_put_le16(b, 0x0001));
    FC_TRY(fc_buf_put_le16(b, (uint16_t)(info->z64_len - 4)));
    if (info->big_size) {
        FC_TRY(fc_buf_put_le64(b, usize));
        FC_TRY(fc_buf_put_le64(b, csize));
    }
    if (info->big_off)
        FC_TRY(fc_buf_put_le64(b, hdr));
    return FC_OK;
}

static int zipw_local_header(struct fc_buf *b, const struct fc_zipw_record *r,
                             const struct zipw_rec_info *info, const char *prefix)
{
    const uint64_t fixed = r->header_offset + ZIP_LFH_SIZE + info->name_len;
    const uint64_t extra = r->data_offset - fixed;
    const size_t pad = (size_t)(extra - info->z64_len - 4);
    FC_TRY(fc_buf_put_le32(b, ZIP_LFH_SIG));
    FC_TRY(fc_buf_put_le16(b, 0)); /* version needed: miniz writes 0 for stored */
    FC_TRY(fc_buf_put_le16(b, (uint16_t)(ZIP_FLAG_UTF8 | (r->size ? ZIP_FLAG_DESCRIPTOR : 0))));
    FC_TRY(fc_buf_put_le16(b, 0)); /* method: stored */
    FC_TRY(fc_buf_put_le32(b, 0)); /* time, date */
    FC_TRY(fc_buf_fill(b, 0, 12)); /* crc, sizes: in the descriptor and central directory */
    FC_TRY(fc_buf_put_le16(b, (uint16_t)info->name_len));
    FC_TRY(fc_buf_put_le16(b, (uint16_t)extra));
    FC_TRY(zipw_put_name(b, prefix, r->record));
    /* miniz writes the local ZIP64 extra before compressing: compressed size 0. */
    FC_TRY(zipw_put_z64(b, info, r->size, 0, r->header_offset));
    FC_TRY(fc_buf_putc(b, 'F'));
    FC_TRY(fc_buf_putc(b, 'B'));
    FC_TRY(fc_buf_put_le16(b, (uint16_t)pad));
    return fc_buf_fill(b, 'Z', pad);
}

static int zipw_descriptor(struct fc_buf *b, const struct fc_zipw_record *r,
                           const struct zipw_rec_info *info)
{
    if (info->dd_len == 0)
        return FC_OK;
    FC_TRY(fc_buf_put_le32(b, ZIP_DD_SIG));
    FC_TRY(fc_buf_put_le32(b, r->crc32));
    if (info->dd_len == ZIP_DD64_SIZE) {
        FC_TRY(fc_buf_put_le64(b, r->size));
        return fc_buf_put_le64(b, r->size);
    }
    FC_TRY(fc_buf_put_le32(b, (uint32_t)r->size));
    return fc_buf_put_le32(b, (uint32_t)r->size);
}

static uint32_t zipw_sat32(uint64_t v)
{
    return v >= ZIP_U32_MAX ? ZIP_U32_MAX : (uint32_t)v;
}

static int zipw_cd_entry(struct fc_buf *b, const struct fc_zipw_record *r,
                         const struct zipw_rec_info *info, const char *prefix)
{
    FC_TRY(fc_buf_put_le32(b, ZIP_CDH_SIG));
    FC_TRY(fc_buf_put_le16(b, 0)); /* version made by */
    FC_TRY(fc_buf_put_le16(b, 0)); /* version needed */
    FC_TRY(fc_buf_put_le16(b, (uint16_t)(ZIP_FLAG_UTF8 | (r->size ? ZIP_FLAG_DESCRIPTOR : 0))));
    FC_TRY(fc_buf_put_le16(b, 0)); /* method */
    FC_TRY(fc_buf_put_le32(b, 0)); /* time, date */
    FC_TRY(fc_buf_put_le32(b, r->crc32));
    FC_TRY(fc_buf_put_le32(b, zipw_sat32(r->size)));
    FC_TRY(fc_buf_put_le32(b, zipw_sat32(r->size)));
    FC_TRY(fc_buf_put_le16(b, (uint16_t)info->name_len));
    FC_TRY(fc_buf_put_le16(b, (uint16_t)info->z64_len));
    FC_TRY(fc_buf_fill(b, 0, 6));  /* comment length, disk, internal attributes */
    FC_TRY(fc_buf_put_le32(b, 0)); /* external attributes */
    FC_TRY(fc_buf_put_le32(b, zipw_sat32(r->header_offset)));
    FC_TRY(zipw_put_name(b, prefix, r->record));
    return zipw_put_z64(b, info, r->size, r->size, r->header_offset);
}

static int zipw_end_records(struct fc_buf *b, uint64_t count, uint64_t cd_off, uint64_t cd_size)
{
    const uint64_t z64_off = cd_off + cd_size;
    const uint16_t count16 = count >= ZIP_U16_MAX ? ZIP_U16_MAX : (uint16_t)count;
    FC_TRY(fc_buf_put_le32(b, ZIP64_EOCD_SIG));
    FC_TRY(fc_buf_put_le64(b, ZIP64_EOCD_SIZE - 12));
    FC_TRY(fc_buf_put_le16(b, 0x031e)); /* made by: miniz writes Unix, 3.0 */
    FC_TRY(fc_buf_put_le16(b, 0x002d)); /* needed: 4.5 */
    FC_TRY(fc_buf_put_le32(b, 0));
    FC_TRY(fc_buf_put_le32(b, 0));
    FC_TRY(fc_buf_put_le64(b, count));
    FC_TRY(fc_buf_put_le64(b, count));
    FC_TRY(fc_buf_put_le64(b, cd_size));
    FC_TRY(fc_buf_put_le64(b, cd_off));
    FC_TRY(fc_buf_put_le32(b, ZIP64_LOC_SIG));
    FC_TRY(fc_buf_put_le32(b, 0));
    FC_TRY(fc_buf_put_le64(b, z64_off));
    FC_TRY(fc_buf_put_le32(b, 1));
    FC_TRY(fc_buf_put_le32(b, ZIP_EOCD_SIG));
    FC_TRY(fc_buf_put_le32(b, 0)); /* disk numbers */
    FC_TRY(fc_buf_put_le16(b, count16));
    FC_TRY(fc_buf_put_le16(b, count16));
    FC_TRY(fc_buf_put_le32(b, zipw_sat32(cd_size)));
    FC_TRY(fc_buf_put_le32(b, zipw_sat32(cd_off)));
    return fc_buf_put_le16(b, 0);
}

/* Append the part of piece [start, start+piece->len) that falls inside [from, to). */
static int zipw_clip(struct fc_buf *out, const unsigned char *piece, uint64_t start, uint64_t len,
                     uint64_t from, uint64_t to)
{
    const uint64_t end = start + len;
    if (end <= from || start >= to || len == 0)
        return FC_OK;
    const uint64_t lo = start > from ? start : from, hi = end < to ? end : to;
    return fc_buf_append(out, piece + (lo - start), (size_t)(hi - lo));
}

int fc_zipw_emit(const struct fc_zipw_record *recs, size_t n, const char *prefix, uint64_t from,
                 uint64_t to, struct fc_buf *out)
{
    struct fc_buf tmp = FC_BUF_INIT((size_t)1 << 20);
    uint64_t cd_off = 0, cd_size = 0;
    int rc = FC_OK;

    if (from > to)
        return fc_error_set(FC_EINVAL, "zip writer: bad range [%" PRIu64 ", %" PRIu64 ")", from,
                            to);
    /* Records lie back to back in order: the central directory starts where the last one ends. */
    if (n > 0) {
        struct zipw_rec_info last;
        FC_TRY(zipw_info(&recs[n - 1], prefix, recs[n - 1].header_offset, &last));
        cd_off = recs[n - 1].data_offset + recs[n - 1].size + last.dd_len;
    }
    /* First record ending after `from` (binary search), so that emitting an archive around
     * many streamed records is linear overall, not quadratic. */
    size_t lo = 0, hi = n;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        const uint64_t end = mid + 1 < n ? recs[mid + 1].header_offset : cd_off;
        if (end > from)
            hi = mid;
        else
            lo = mid + 1;
    }
    for (size_t i = lo; i < n && recs[i].header_offset < to; i++) {
        const struct fc_zipw_record *r = &recs[i];
        struct zipw_rec_info info;
        FC_TRY_GOTO(zipw_info(r, prefix, r->header_offset, &info), rc, done);
        const uint64_t data_end = r->data_offset + r->size;
        if (data_end + info.dd_len > from && r->header_offset < to) {
            fc_buf_clear(&tmp);
            FC_TRY_GOTO(zipw_local_header(&tmp, r, &info, prefix), rc, done);
            FC_TRY_GOTO(zipw_clip(out, tmp.data, r->header_offset, tmp.len, from, to), rc, done);
            if (r->size > 0 && r->data_offset < to && data_end > from) {
                if (r->data == NULL) {
                    rc = fc_error_set(FC_EINVAL,
                                      "zip writer: range [%" PRIu64 ", %" PRIu64
                                      ") covers streamed record '%s' at %" PRIu64,
                                      from, to, r->record, r->data_offset);
                    goto done;
                }
                FC_TRY_GOTO(zipw_clip(out, r->data, r->data_offset, r->size, from, to), rc, done);
            }
            fc_buf_clear(&tmp);
            FC_TRY_GOTO(zipw_descriptor(&tmp, r, &info), rc, done);
            FC_TRY_GOTO(zipw_clip(out, tmp.data, data_end, tmp.len, from, to), rc, done);
        }
    }
    if (cd_off >= to)
        goto done;
    for (size_t i = 0; i < n; i++) {
        struct zipw_rec_info info;
        FC_TRY_GOTO(zipw_info(&recs[i], prefix, recs[i].header_offset, &info), rc, done);
        cd_size += info.cd_len;
    }
    uint64_t pos = cd_off;
    for (size_t i = 0; i < n && pos < to; i++) {
        const struct fc_zipw_record *r = &recs[i];
        struct zipw_rec_info info;
        FC_TRY_GOTO(zipw_info(r, prefix, r->header_offset, &info), rc, done);
        if (pos + info.cd_len > from) {
            fc_buf_clear(&tmp);
            FC_TRY_GOTO(zipw_cd_entry(&tmp, r, &info, prefix), rc, done);
            FC_TRY_GOTO(zipw_clip(out, tmp.data, pos, tmp.len, from, to), rc, done);
        }
        pos += info.cd_len;
    }
    pos = cd_off + cd_size;
    if (pos < to) {
        fc_buf_clear(&tmp);
        FC_TRY_GOTO(zipw_end_records(&tmp, n, cd_off, cd_size), rc, done);
        if (to > pos + tmp.len) {
            rc = fc_error_set(FC_EINVAL,
                              "zip writer: range end %" PRIu64 " is past the archive "
                              "end %" PRIu64,
                              to, pos + (uint64_t)tmp.len);
            goto done;
        }
        FC_TRY_GOTO(zipw_clip(out, tmp.data, pos, tmp.len, from, to), rc, done);
    }
done:
    fc_buf_release(&tmp);
    return rc;
}
