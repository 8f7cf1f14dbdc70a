/*
 * fc_torchsave.h - torch.save zip archives: reading any file torch 1.6 ... 2.x
 * wrote, and writing the one-tensor / one-value blobs that DCP items are.
 *
 * Reader invariants: the archive is opened with fc_zip, data.pkl is run
 * through the weights-only pickle profile, and every tensor node is checked
 * against its storage record (record size == storage numel * element size;
 * the view's extent offset + sum((size-1)*stride) + 1 <= storage numel, or 0
 * elements).  One storage key is one dtype.  Pre-1.6 formats (legacy pickle
 * stream, tar, PYTORCH1 preview) and TorchScript archives are recognised and
 * refused with a message saying what to do.
 */
#ifndef FC_TORCHSAVE_H
#define FC_TORCHSAVE_H

#include <stddef.h>
#include <stdint.h>

#include "fc_buf.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_zip.h"

struct fc_torchsave; /* opaque */

/* Storage table entry: one data/<key> record. */
struct fc_ts_storage {
    const char *key;      /* "0" */
    fc_dtype dtype;       /* element type (for UntypedStorage: from _rebuild_tensor_v3) */
    uint64_t data_offset; /* absolute file offset */
    uint64_t nbytes;
    unsigned nrefs; /* number of tensor nodes referring to it */
};

/*
 * fc_torchsave_open() - open the torch.save archive at [base, base+len) of f.
 * `what` names it in messages.  f must outlive the result.
 *
 * Checks, in order: the first bytes (fc_torchsave_detect; anything but ZIP is
 * FC_EFORMAT saying what the file is and what to do), the ZIP container
 * (fc_zip_reader_open), no constants.pkl record (TorchScript), a data.pkl
 * record, `version` or `.data/version` an integer in [1, 10], `byteorder`
 * absent or "little" ("big" is FC_EFORMAT), data.pkl (at most 1 GiB) through
 * the weights-only pickle profile, then every distinct tensor node: its
 * storage key names one dtype and one size (else FC_ECORRUPT), record
 * data/<key> exists with exactly numel * elem_size bytes (numel bytes for an
 * UntypedStorage), and the view lies inside the storage.  A tensor node
 * reached twice through the pickle memo counts as one reference; two nodes
 * naming one key count as two (fc_ts_storage.nrefs).
 *
 * Returns FC_OK, FC_EFORMAT (legacy format, TorchScript, forbidden global,
 * unconvertible tensor type, big-endian), FC_ECORRUPT, FC_EIO, FC_ENOMEM.
 */
int fc_torchsave_open(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                      uint64_t len, const char *what);
void fc_torchsave_free(struct fc_torchsave *ts); /* accepts NULL */

/*
 * fc_torchsave_open_dtensor() - fc_torchsave_open() through
 * FC_PICKLE_WEIGHTS_DTENSOR: the DTensors of a torch_checkpointing rank file
 * are their local shards (fc_pickle.h).
 */
int fc_torchsave_open_dtensor(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                              uint64_t len, const char *what);

/*
 * fc_torchsave_open_symbolic() - the same checks, but data.pkl goes through
 * the symbolic profile (fc_pickle.h): any global is a symbol, REDUCE/NEWOBJ/
 * BUILD are CALL/OBJECT nodes, nothing is imported or run.  For values that
 * torch.load reads only with weights_only=False (a DCP bytes item holding an
 * io.BytesIO, a numpy array, an argparse.Namespace); tensors inside them
 * (persistent ids) are FC_EFORMAT.  The archive has no storage table.
 */
int fc_torchsave_open_symbolic(struct fc_torchsave **out, const struct fc_file *f, uint64_t base,
                               uint64_t len, const char *what);

/* The distinct globals data.pkl names, first use first (fc_pickle_globals()); borrowed. */
size_t fc_torchsave_globals(const struct fc_torchsave *ts, const struct fc_pv *const **out);

/* The unpickled object; tensors are FC_PV_TENSOR nodes. */
const struct fc_pv *fc_torchsave_root(const struct fc_torchsave *ts);

/* Storages in first-reference order. */
size_t fc_torchsave_storage_count(const struct fc_torchsave *ts);
const struct fc_ts_storage *fc_torchsave_storage_at(const struct fc_torchsave *ts, size_t i);
/*
 * Index of the storage a tensor node uses: always valid for a tensor node of
 * this archive's tree; SIZE_MAX for a storage key the archive does not have.
 */
size_t fc_torchsave_storage_index(const struct fc_torchsave *ts, const struct fc_pv_tensor *t);

/* The underlying ZIP reader (records beyond data.pkl and data/, e.g. for inspect); borrowed. */
const struct fc_zip_reader *fc_torchsave_zip(const struct fc_torchsave *ts);

/*
 * fc_torchsave_detect() - classify the first bytes of a file (at least 512
 * bytes or the whole file): returns one of the values below.  The legacy
 * pickle is recognised by torch's magic number as protocol 2-5 write it (LONG1
 * after PROTO, and after FRAME for 4-5) and as protocols 0-1 write it (text
 * LONG); safetensors needs 8 + header length <= file_size.
 */
enum fc_ts_kind {
    FC_TS_UNKNOWN,
    FC_TS_ZIP,           /* PK\3\4 */
    FC_TS_LEGACY_PICKLE, /* pre-1.6 pickle stream with the LONG1 magic */
    FC_TS_LEGACY_TAR,    /* ustar at 257 */
    FC_TS_PREVIEW,       /* PYTORCH1 */
    FC_TS_SAFETENSORS    /* u64 header length then '{' */
};
enum fc_ts_kind fc_torchsave_detect(const unsigned char *head, size_t n, uint64_t file_size);

/*
 * Writer of one dense, C-contiguous tensor as a torch.save archive (prefix
 * "archive", records data.pkl, byteorder, data/0, version, in the layout of
 * fc_zipw_*).  The tensor bytes are streamed by the caller at
 * [data_offset, data_offset + data_size) of the blob.
 */
struct fc_tsblob {
    struct fc_buf pkl; /* data.pkl bytes */
    struct fc_zipw_record recs[4];
    uint64_t total_size;  /* bytes of the whole blob */
    uint64_t data_offset; /* where the tensor bytes start, blob-relative */
    uint64_t data_size;
};

/*
 * Lay out a blob for dtype/shape (ndim 0 is a scalar; dims may be 0), its
 * tensor bytes at a multiple of data_align from the blob start (0: torch's
 * 64; see fc_zipw_layout_aligned()).  The
 * pickle is torch's own (dcp-format.md 3.2) less its BINPUT opcodes:
 * _rebuild_tensor_v2 and the legacy storage class, or _rebuild_tensor_v3 with
 * torch.storage.UntypedStorage (numel in bytes) and the dtype global for
 * dtypes without a storage class (fc_dtype_info()->storage_class NULL).
 * Returns FC_OK, FC_EINVAL (bad dtype, ndim, shape or data_align), FC_ENOMEM.  Release
 * with fc_tsblob_release() (also after a failure).
 */
int fc_tsblob_init(struct fc_tsblob *b, fc_dtype dt, const int64_t *shape, int ndim,
                   uint32_t data_align);
void fc_tsblob_release(struct fc_tsblob *b);
/* Bytes [0, data_offset) of the blob. */
int fc_tsblob_head(const struct fc_tsblob *b, struct fc_buf *out);
/* Bytes [data_offset + data_size, total_size), given the data's CRC-32 (fc_crc32). */
int fc_tsblob_tail(struct fc_tsblob *b, uint32_t data_crc, struct fc_buf *out);

/*
 * fc_torchsave_pw_tensor_view() - the same for any view d (dtype, shape,
 * stride, storage_offset in elements) of a storage of storage_numel elements
 * of d->dtype, with its requires_grad flag (a tensor inside a non-tensor value).
 */
int fc_torchsave_pw_tensor_view(struct fc_buf *b, const struct fc_tensor_desc *d,
                                uint64_t storage_numel, int requires_grad, const char *storage_key);

/*
 * fc_torchsave_pw_tensor() - append the pickle of one dense C-contiguous
 * tensor (the _rebuild_tensor_v2/_v3 call with its storage persistent id
 * naming record data/<storage_key>, numel elements) to b, without PROTO/STOP,
 * so callers can place it inside a bigger structure (a full state dict).
 * Returns FC_OK, FC_EINVAL, FC_ENOMEM.
 */
int fc_torchsave_pw_tensor(struct fc_buf *b, fc_dtype dt, const int64_t *shape, int ndim,
                           uint64_t numel, const char *storage_key);

/*
 * fc_torchsave_value_blob() - a complete torch.save archive of a non-tensor
 * value (a DCP bytes item): data.pkl = fc_pw_value(v), byteorder, version,
 * appended to out.  Returns FC_OK, FC_EINVAL (v holds a tensor or something
 * fc_pw_value refuses), FC_ENOMEM.
 */
int fc_torchsave_value_blob(struct fc_buf *out, const struct fc_pv *v);

#endif
