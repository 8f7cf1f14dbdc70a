/*
 * fc_zip.h - ZIP/ZIP64 reader (stored entries, zero-copy) and the writer of
 * torch.save-layout archives.
 *
 * Reader invariants: sizes and CRCs come from the central directory (torch
 * writes zeros in local headers); each record's data offset is computed from
 * its local header (30 + name_len + extra_len) as torch's getRecordOffset
 * does; every record lies inside the archive window and before the central
 * directory, and no two records overlap.  The reader works on a window
 * [base, base+len) of an open file, so a torch.save blob embedded in a DCP
 * .distcp file is read in place.  Record data is never copied by the reader:
 * callers pread the byte range they need.
 *
 * Writer invariants (input-formats.md A.2, dcp-format.md 3.2): records are
 * stored, each payload starts at a multiple of 64 bytes from the archive
 * start (FB extra-field padding), local headers have flags 0x0808 and zero
 * CRC/sizes followed by a data descriptor after non-empty payloads
 * (zero-length records: flags 0x0800, no descriptor), then the central
 * directory, a ZIP64 end record, its locator and the classic end record.
 * ZIP64 extras and 24-byte descriptors appear when a size or an offset
 * reaches 0xFFFFFFFF.  The layout is a pure function of the record names and
 * sizes, so callers know every offset before any data is written.
 */
#ifndef FC_ZIP_H
#define FC_ZIP_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_io.h"

struct fc_zip_entry {
    const char *name;     /* full name as stored, e.g. "archive/data/0" */
    const char *record;   /* name after the "<prefix>/" part, e.g. "data/0" */
    uint64_t data_offset; /* absolute file offset of the payload */
    uint64_t size;        /* uncompressed == compressed size (stored) */
    uint64_t csize;       /* bytes stored in the archive (== size when method is 0) */
    uint32_t crc32;
    uint16_t method; /* 0 (stored); others only with FC_ZIP_ALLOW_COMPRESSED */
};

struct fc_zip_reader; /* opaque */

/*
 * fc_zip_reader_open() - parse the archive in file f, window [base, base+len).
 *
 * `what` names the archive in messages (a path, or "x.distcp @ offset N").
 * On success *out is a new reader owned by the caller (fc_zip_reader_free);
 * f must outlive it.  Compressed (method != 0) or encrypted entries fail with
 * FC_EFORMAT naming the entry ("compressed entry X; re-save with torch.save").
 * FC_EFORMAT also for: not a ZIP at all, no entries, multi-disk archives, a
 * first entry outside any folder, or an entry outside the first one's folder.
 * FC_ECORRUPT for truncation, bad signatures, out-of-range or overlapping
 * entries, local/central name mismatch, duplicate names, inconsistent end
 * records.  Entries keep central-directory order.
 * Returns FC_OK, FC_EFORMAT, FC_ECORRUPT, FC_EIO, FC_ENOMEM.
 */
int fc_zip_reader_open(struct fc_zip_reader **out, const struct fc_file *f, uint64_t base,
                       uint64_t len, const char *what);

/*
 * fc_zip_reader_open_ex() - the same with flags.  FC_ZIP_ALLOW_COMPRESSED
 * keeps entries of any method (data_offset/csize then describe the
 * compressed bytes) so that a caller can look at the names first, e.g. to
 * recognise a TorchScript archive; fc_zip_read_record() and
 * fc_zip_verify_crc() refuse such entries with the FC_EFORMAT message above.
 */
#define FC_ZIP_ALLOW_COMPRESSED 0x1u
int fc_zip_reader_open_ex(struct fc_zip_reader **out, const struct fc_file *f, uint64_t base,
                          uint64_t len, const char *what, unsigned flags);
void fc_zip_reader_free(struct fc_zip_reader *zr); /* accepts NULL */

size_t fc_zip_count(const struct fc_zip_reader *zr);
const struct fc_zip_entry *fc_zip_entry_at(const struct fc_zip_reader *zr, size_t i);
const char *fc_zip_prefix(const struct fc_zip_reader *zr); /* "archive" */
/* Find by record name (without the prefix); NULL if absent. */
const struct fc_zip_entry *fc_zip_find(const struct fc_zip_reader *zr, const char *record);

/* Read a whole (small) record into a new buffer, capped; caller frees. */
int fc_zip_read_record(const struct fc_zip_reader *zr, const struct fc_zip_entry *e, size_t cap,
                       unsigned char **out);

/*
 * fc_zip_verify_crc() - read record e in 1 MiB chunks and compare its CRC-32
 * with the central directory's.  Returns FC_OK, FC_ECORRUPT (mismatch, naming
 * both values), FC_EIO, FC_ENOMEM.  A stored CRC of 0 is not checked: torch
 * writes 0 for every record when CRCs are turned off
 * (torch.serialization.set_crc32_options(False)).  Not done by
 * fc_zip_reader_open; torch.load never checks CRCs.
 */
int fc_zip_verify_crc(const struct fc_zip_reader *zr, const struct fc_zip_entry *e);

/* Streaming CRC-32 (zlib polynomial) via libdeflate. */
uint32_t fc_crc32(uint32_t crc, const void *p, size_t n);

/*
 * fc_crc32_combine() - the CRC-32 of A followed by B from crc_a = CRC-32 of A,
 * crc_b = CRC-32 of B and len_b = B's length: a record read in parts, in any
 * order, is checked without reading it again.
 */
uint32_t fc_crc32_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

/* fc_crc32_file() - CRC-32 of bytes [off, off+n) of f into *out, read in 1 MiB pieces. */
int fc_crc32_file(const struct fc_file *f, uint64_t off, uint64_t n, uint32_t *out);

/*
 * Writer.  Describe the records, compute the layout, then emit the bytes
 * around each payload.  Typical use for one tensor blob: records data.pkl,
 * byteorder, data/0, version; every payload except data/0 is small and given
 * up front; data/0's CRC is supplied after streaming it.
 */
struct fc_zipw_record {
    const char *record;        /* name without prefix */
    uint64_t size;             /* payload size */
    const unsigned char *data; /* payload if known up front, else NULL (streamed) */
    uint32_t crc32;         /* filled by the writer for known payloads; caller sets for streamed */
    uint64_t header_offset; /* computed: local header offset */
    uint64_t data_offset;   /* computed: payload offset (multiple of 64) */
};

/*
 * fc_zipw_layout() - compute header/data offsets for every record and the
 * total archive size.  prefix is the archive folder ("archive").  Fills
 * ->crc32 of records with a known payload (0 for empty records).  The bytes
 * are those torch 2.15 writes for the same records (checked byte for byte,
 * ZIP64 included).  Returns FC_OK or FC_EINVAL (empty or over-long name,
 * size overflow).
 */
int fc_zipw_layout(struct fc_zipw_record *recs, size_t n, const char *prefix, uint64_t *total_out);

/*
 * fc_zipw_layout_aligned() - the same with record i's payload at a multiple
 * of align[i] from the archive start (0: torch's 64; else a power of two >=
 * 64): a longer "FB" pad.  Readers, torch's included, take a payload's offset
 * from its local header, so any pad that fits the header's 16-bit extra length
 * is legal.  FC_EINVAL also for a bad alignment or a pad past that length.
 */
int fc_zipw_layout_aligned(struct fc_zipw_record *recs, size_t n, const char *prefix,
                           const uint32_t *align, uint64_t *total_out);

/*
 * fc_zipw_emit() - append the archive bytes from archive offset `from` up to
 * (not including) `to` to out, for every byte that is not a streamed payload.
 * Calling it for [0, first streamed data_offset) gives the head, and for
 * [streamed data_offset + size, total) the tail (which needs the streamed
 * record's crc32 filled in).  Known payloads are copied from ->data.  recs
 * must have been laid out by fc_zipw_layout() with the same prefix.
 * Returns FC_OK, FC_ENOMEM, or FC_EINVAL when from > to, when to is past the
 * archive end, or when [from, to) covers bytes of a streamed payload.
 */
int fc_zipw_emit(const struct fc_zipw_record *recs, size_t n, const char *prefix, uint64_t from,
                 uint64_t to, struct fc_buf *out);

#endif
