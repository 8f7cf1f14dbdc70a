/*
 * fc_source_box.c - the box reader every backend uses: a box of a tensor that
 * is one strided storage, and a box of a tensor assembled from stored chunks
 * (DCP items, sharded safetensors), with the chunks' CRC-32 checked on their
 * first read.
 */
#include <assert.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_chunks.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_source_backend.h"
#include "fc_zip.h"

/*
 * Gathering a strided box reads the covering span of at most fc_span_cap bytes
 * at a time; a chunk's part that is not one run of the caller's box passes
 * through a buffer of fc_piece_cap.  Each at most the first, at least the
 * second, as fc_source_fit_read_scratch() sizes them.
 */
#define FC_SOURCE_SCRATCH_MAX ((size_t)8 << 20)
#define FC_SOURCE_SCRATCH_MIN ((size_t)64 << 10)
static _Atomic size_t fc_span_cap = FC_SOURCE_SCRATCH_MAX, fc_piece_cap = FC_SOURCE_SCRATCH_MAX;

uint64_t fc_source_fit_read_scratch(uint64_t room)
{
    const uint64_t each = room / 2 > FC_SOURCE_SCRATCH_MAX   ? FC_SOURCE_SCRATCH_MAX
                          : room / 2 < FC_SOURCE_SCRATCH_MIN ? FC_SOURCE_SCRATCH_MIN
                                                             : room / 2;
    atomic_store(&fc_span_cap, (size_t)each);
    atomic_store(&fc_piece_cap, (size_t)each);
    return 2 * each;
}

/*
 * The innermost dims of a box of sizes `size` in t that are contiguous in t's
 * storage form one run of *run elements; returns the number of outer dims
 * left (0: the whole box is one run).
 */
static int fc_box_inner(const struct fc_tensor_desc *t, const int64_t *size, int64_t *run)
{
    int inner = t->ndim;
    int64_t expect = 1;
    *run = 1;
    while (inner > 0) {
        const int d = inner - 1;
        if (size[d] != 1 && t->stride[d] != expect)
            break;
        *run *= size[d];
        inner--;
        if (size[d] != t->shape[d])
            break;
        expect *= t->shape[d];
    }
    return inner;
}

int fc_read_strided_box(const struct fc_file *f, uint64_t base, const struct fc_tensor_desc *t,
                        const int64_t *off, const int64_t *size, void *dst, const char *what)
{
    const size_t esz = fc_dtype_size(t->dtype);
    int64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (off[d] < 0 || size[d] < 0 || off[d] > t->shape[d] || size[d] > t->shape[d] - off[d])
            return fc_error_set(FC_EINVAL,
                                "%s: box dim %d [%" PRId64 ", +%" PRId64 ") outside shape %" PRId64,
                                what, d, off[d], size[d], t->shape[d]);
        numel *= size[d];
    }
    if (numel == 0)
        return FC_OK;
    /* Element range (relative to storage start) spanned by the box. */
    int64_t first = t->storage_offset, last = t->storage_offset;
    for (int d = 0; d < t->ndim; d++) {
        first += off[d] * t->stride[d];
        last += (off[d] + (t->stride[d] >= 0 ? size[d] - 1 : 0)) * t->stride[d];
    }
    int64_t run;
    const int inner = fc_box_inner(t, size, &run);
    if (inner == 0)
        return fc_file_pread(f, dst, (size_t)run * esz, base + (uint64_t)first * esz);
    const uint64_t span = (uint64_t)(last - first + 1) * esz;
    const uint64_t cap = atomic_load(&fc_span_cap);
    if (span > cap && size[0] > 1) {
        /* Row blocks whose spans fit the cap, each gathered as below. */
        const int64_t step = (int64_t)((uint64_t)size[0] * cap / span) > 1
                                 ? (int64_t)((uint64_t)size[0] * cap / span)
                                 : 1;
        const size_t row = (size_t)(numel / size[0]) * esz;
        int64_t poff[FC_MAX_DIMS], psize[FC_MAX_DIMS];
        memcpy(poff, off, sizeof(poff[0]) * (size_t)t->ndim);
        memcpy(psize, size, sizeof(psize[0]) * (size_t)t->ndim);
        for (int64_t r = 0; r < size[0]; r += step) {
            poff[0] = off[0] + r;
            psize[0] = size[0] - r < step ? size[0] - r : step;
            FC_TRY(fc_read_strided_box(f, base, t, poff, psize,
                                       (unsigned char *)dst + (size_t)r * row, what));
        }
        return FC_OK;
    }
    unsigned char *tmp = NULL;
    if (span <= cap) {
        tmp = fc_malloc((size_t)span);
        if (tmp == NULL)
            return fc_error_set(FC_ENOMEM, "%s: out of memory", what);
        const int rc = fc_file_pread(f, tmp, (size_t)span, base + (uint64_t)first * esz);
        if (rc < 0) {
            fc_free(tmp);
            return rc;
        }
    }
    /* Odometer over the outer dims [0, inner); each step copies one run. */
    int64_t idx[FC_MAX_DIMS] = {0};
    unsigned char *out = dst;
    int rc = FC_OK;
    for (;;) {
        int64_t elem = 0;
        for (int d = 0; d < inner; d++)
            elem += (off[d] + idx[d]) * t->stride[d];
        for (int d = inner; d < t->ndim; d++)
            elem += off[d] * t->stride[d];
        elem += t->storage_offset;
        if (tmp != NULL) {
            memcpy(out, tmp + (size_t)(elem - first) * esz, (size_t)run * esz);
        } else {
            rc = fc_file_pread(f, out, (size_t)run * esz, base + (uint64_t)elem * esz);
            if (rc < 0)
                break;
        }
        out += (size_t)run * esz;
        int d = inner - 1;
        while (d >= 0 && ++idx[d] == size[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
    fc_free(tmp);
    return rc;
}

int fc_storage_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                        const int64_t *size, void *dst)
{
    const struct fc_storage *st = &src->storages[e->storage];
    char what[512];
    snprintf(what, sizeof(what), "%s: '%s'", src->path, e->key);
    return fc_read_strided_box(&src->files[st->file], st->offset, &e->t, off, size, dst, what);
}

/* The stored tensor of chunk ref holding box (its layout, or dense in e's dtype). */
void fc_chunk_desc(const struct fc_entry *e, const struct fc_box *box,
                   const struct fc_chunk_ref *ref, struct fc_tensor_desc *d)
{
    if (ref->layout != NULL) {
        *d = ref->layout->desc;
        return;
    }
    memset(d, 0, sizeof(*d));
    d->dtype = e->t.dtype;
    d->ndim = e->t.ndim;
    for (int k = 0; k < d->ndim; k++)
        d->shape[k] = box->sizes[k];
    fc_tensor_set_contiguous(d);
}

/* Compare a chunk's CRC-32 with the stored one; mismatch() words the error. */
static int fc_chunk_check_crc(const struct fc_source *src, const struct fc_entry *e,
                              struct fc_chunk_ref *ref, fc_crc_mismatch_fn mismatch, uint32_t crc)
{
    if (crc != ref->crc)
        return mismatch(src, e, ref, crc);
    __atomic_store_n(&ref->verified, 1, __ATOMIC_RELEASE);
    return FC_OK;
}

/* Bytes [off, off+len) of a chunk's record, whose CRC-32 is crc. */
struct fc_crc_part {
    uint64_t off, len;
    uint32_t crc;
};

/* A chunk read in parts so far: its parts by offset, adjacent ones merged into one. */
struct fc_crc_pending {
    const struct fc_entry *e;
    struct fc_chunk_ref *ref;
    fc_crc_mismatch_fn mismatch;
    uint64_t rec_off, rec_len; /* the record in src->files[ref->file] */
    struct fc_crc_part *parts;
    size_t nparts, alloc;
};

struct fc_crc_fold {
    struct fc_crc_pending *p;
    size_t n, alloc;
};

/* One lock for every source's fold: it is taken once per part of a chunk, not per byte. */
static pthread_mutex_t fc_fold_lock = PTHREAD_MUTEX_INITIALIZER;

struct fc_crc_fold *fc_crc_fold_new(void)
{
    return fc_calloc(1, sizeof(struct fc_crc_fold));
}

void fc_crc_fold_free(struct fc_crc_fold *fold)
{
    if (fold == NULL)
        return;
    for (size_t i = 0; i < fold->n; i++)
        fc_free(fold->p[i].parts);
    fc_free(fold->p);
    fc_free(fold);
}

/* Add part to pd (fold lock held); 1 when the parts now cover the record. */
static int fc_pending_add(struct fc_crc_pending *pd, const struct fc_crc_part *part)
{
    size_t i = 0;
    while (i < pd->nparts && pd->parts[i].off < part->off)
        i++;
    /* Bytes read twice (a --copy, overlapping boxes) count once: an overlapping part is
     * left out, and fc_source_verify_rest() reads what that leaves uncovered. */
    if ((i > 0 && pd->parts[i - 1].off + pd->parts[i - 1].len > part->off) ||
        (i < pd->nparts && part->off + part->len > pd->parts[i].off))
        return 0;
    struct fc_crc_part *prev = i > 0 ? &pd->parts[i - 1] : NULL;
    if (prev != NULL && prev->off + prev->len == part->off) {
        prev->crc = fc_crc32_combine(prev->crc, part->crc, part->len);
        prev->len += part->len;
    } else {
        if (pd->nparts == pd->alloc) {
            const size_t n = pd->alloc == 0 ? 4 : pd->alloc * 2;
            struct fc_crc_part *q = fc_reallocarray(pd->parts, n, sizeof(*q));
            if (q == NULL)
                return -1;
            pd->parts = q;
            pd->alloc = n;
        }
        memmove(&pd->parts[i + 1], &pd->parts[i], (pd->nparts - i) * sizeof(*pd->parts));
        pd->parts[i] = *part;
        pd->nparts++;
        prev = &pd->parts[i++];
    }
    if (i < pd->nparts && prev->off + prev->len == pd->parts[i].off) {
        prev->crc = fc_crc32_combine(prev->crc, pd->parts[i].crc, pd->parts[i].len);
        prev->len += pd->parts[i].len;
        memmove(&pd->parts[i], &pd->parts[i + 1], (pd->nparts - i - 1) * sizeof(*pd->parts));
        pd->nparts--;
    }
    return pd->nparts == 1 && pd->parts[0].off == 0 && pd->parts[0].len == pd->rec_len;
}

/*
 * Record that the bytes [part->off, +len) of ref's record (rec_len bytes at
 * rec_off) were read and hash to part->crc; check the chunk once its parts
 * cover the record.
 */
static int fc_crc_fold_add(const struct fc_source *src, const struct fc_entry *e,
                           struct fc_chunk_ref *ref, fc_crc_mismatch_fn mismatch, uint64_t rec_off,
                           uint64_t rec_len, const struct fc_crc_part *part)
{
    if (part->off == 0 && part->len == rec_len)
        return fc_chunk_check_crc(src, e, ref, mismatch, part->crc);
    struct fc_crc_fold *fold = src->fold;
    int rc = FC_OK;
    uint32_t crc = 0;
    pthread_mutex_lock(&fc_fold_lock);
    size_t k = 0;
    while (k < fold->n && fold->p[k].ref != ref)
        k++;
    if (k == fold->n && fold->n == fold->alloc) {
        const size_t n = fold->alloc == 0 ? 8 : fold->alloc * 2;
        struct fc_crc_pending *q = fc_reallocarray(fold->p, n, sizeof(*q));
        if (q == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        fold->p = q;
        fold->alloc = n;
    }
    if (k == fold->n)
        fold->p[fold->n++] =
            (struct fc_crc_pending){e, ref, mismatch, rec_off, rec_len, NULL, 0, 0};
    const int covered = fc_pending_add(&fold->p[k], part);
    if (covered < 0) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
    } else if (covered) {
        crc = fold->p[k].parts[0].crc;
        fc_free(fold->p[k].parts);
        fold->p[k] = fold->p[--fold->n];
    }
    pthread_mutex_unlock(&fc_fold_lock);
    if (rc == FC_OK && covered)
        rc = fc_chunk_check_crc(src, e, ref, mismatch, crc);
    return rc;
done:
    pthread_mutex_unlock(&fc_fold_lock);
    return rc;
}

/* The CRC-32 of pd's record: its parts folded with what lies between them, read now. */
static int fc_pending_crc(const struct fc_source *src, const struct fc_crc_pending *pd,
                          uint32_t *out)
{
    const struct fc_file *f = &src->files[pd->ref->file];
    uint32_t crc = 0;
    uint64_t pos = 0;
    for (size_t i = 0; i <= pd->nparts; i++) {
        const uint64_t end = i < pd->nparts ? pd->parts[i].off : pd->rec_len;
        if (end > pos) {
            uint32_t gap;
            FC_TRY(fc_crc32_file(f, pd->rec_off + pos, end - pos, &gap));
            crc = fc_crc32_combine(crc, gap, end - pos);
        }
        if (i < pd->nparts) {
            crc = fc_crc32_combine(crc, pd->parts[i].crc, pd->parts[i].len);
            pos = pd->parts[i].off + pd->parts[i].len;
        }
    }
    *out = crc;
    return FC_OK;
}

int fc_source_verify_rest(const struct fc_source *src)
{
    if (src == NULL || src->fold == NULL)
        return FC_OK;
    struct fc_crc_fold *fold = src->fold;
    pthread_mutex_lock(&fc_fold_lock);
    struct fc_crc_pending *p = fold->p;
    const size_t n = fold->n;
    fold->p = NULL;
    fold->n = fold->alloc = 0;
    pthread_mutex_unlock(&fc_fold_lock);
    int rc = FC_OK;
    for (size_t i = 0; i < n; i++) {
        uint32_t crc = 0;
        if (rc == FC_OK)
            rc = fc_pending_crc(src, &p[i], &crc);
        if (rc == FC_OK)
            rc = fc_chunk_check_crc(src, p[i].e, p[i].ref, p[i].mismatch, crc);
        fc_free(p[i].parts);
    }
    fc_free(p);
    return rc;
}

void fc_box_scatter(unsigned char *dst, const int64_t *dshape, const int64_t *doff,
                    const unsigned char *srcbuf, const int64_t *size, int ndim, size_t esz)
{
    if (ndim == 0) {
        memcpy(dst, srcbuf, esz);
        return;
    }
    int64_t idx[FC_MAX_DIMS] = {0};
    const size_t run = (size_t)size[ndim - 1] * esz;
    for (;;) {
        int64_t lin = 0;
        for (int d = 0; d < ndim; d++)
            lin = lin * dshape[d] + doff[d] + (d < ndim - 1 ? idx[d] : 0);
        memcpy(dst + (size_t)lin * esz, srcbuf, run);
        srcbuf += run;
        int d = ndim - 2;
        while (d >= 0 && ++idx[d] == size[d])
            idx[d--] = 0;
        if (d < 0)
            break;
    }
}

int fc_chunks_read_box(const struct fc_source *src, const struct fc_entry *e,
                       struct fc_chunk_ref *refs, const struct fc_box *boxes,
                       const struct fc_chunk_index *index, fc_crc_mismatch_fn mismatch,
                       const int64_t *off, const int64_t *size, void *dst)
{
    const int ndim = e->t.ndim;
    const size_t esz = fc_dtype_size(e->t.dtype);
    int64_t covered = 0, want = 1; /* elements: the box's, and those the chunks wrote */
    for (int d = 0; d < ndim; d++) {
        if (off[d] < 0 || size[d] < 0 || off[d] > e->t.shape[d] || size[d] > e->t.shape[d] - off[d])
            return fc_error_set(FC_EINVAL, "%s: '%s': box outside the tensor", src->path, e->key);
        want *= size[d];
    }
    if (want == 0)
        return FC_OK;
    struct fc_overlap *ov = NULL;
    size_t nov = 0;
    FC_TRY(fc_chunk_intersect(index, off, size, &ov, &nov));
    int rc = FC_OK;
    for (size_t k = 0; rc == FC_OK && k < nov; k++) {
        const size_t c = ov[k].chunk;
        struct fc_chunk_ref *ref = &refs[c];
        const int64_t *coff = boxes[c].offsets;
        int64_t lo[FC_MAX_DIMS], doff[FC_MAX_DIMS];
        const int64_t *len = ov[k].sizes;
        int64_t n = 1;
        for (int d = 0; d < ndim; d++) {
            lo[d] = ov[k].offsets[d] - coff[d];
            doff[d] = ov[k].offsets[d] - off[d];
            n *= len[d];
        }
        char what[512];
        snprintf(what, sizeof(what), "%s: '%s' chunk %zu", src->path, e->key, c);
        /*
         * CRC-32 (until the chunk is checked) over the bytes as they are read: a part
         * that is one run of the record is folded into the chunk's check
         * (fc_crc_fold_add()); any other part has the whole record read once more.
         */
        struct fc_tensor_desc desc;
        fc_chunk_desc(e, &boxes[c], ref, &desc);
        const int check =
            ref->has_crc && !src->no_verify && !__atomic_load_n(&ref->verified, __ATOMIC_ACQUIRE);
        int64_t numel = 0, run = 0;
        (void)fc_shape_numel(desc.shape, desc.ndim, &numel);
        const uint64_t rec_off = ref->layout != NULL ? ref->layout->rec_off : ref->base;
        const uint64_t rec_len = ref->layout != NULL ? ref->layout->rec_len : (uint64_t)numel * esz;
        struct fc_crc_part part = {0, (uint64_t)n * esz, 0};
        int fold = check && fc_box_inner(&desc, len, &run) == 0;
        if (fold) {
            int64_t first = desc.storage_offset;
            for (int d = 0; d < ndim; d++)
                first += lo[d] * desc.stride[d];
            const uint64_t at = ref->base + (uint64_t)first * esz;
            fold = at >= rec_off && at - rec_off <= rec_len && part.len <= rec_len - (at - rec_off);
            part.off = at - rec_off;
        }
        if (check && !fold) {
            uint32_t crc = 0;
            rc = fc_crc32_file(&src->files[ref->file], rec_off, rec_len, &crc);
            if (rc == FC_OK)
                rc = fc_chunk_check_crc(src, e, ref, mismatch, crc);
            if (rc < 0)
                break;
        }
        /* When the overlap spans the box's trailing dims it is one contiguous run of dst
         * (Shard(0) chunks): read straight into place instead of through a scatter. */
        int in_place = 1;
        for (int d = 1; d < ndim; d++)
            in_place &= len[d] == size[d];
        if (in_place) {
            size_t row = esz;
            for (int d = 1; d < ndim; d++)
                row *= (size_t)size[d];
            unsigned char *at = (unsigned char *)dst + (ndim > 0 ? (size_t)doff[0] * row : 0);
            rc = fc_read_strided_box(&src->files[ref->file], ref->base, &desc, lo, len, at, what);
            if (rc == FC_OK && fold) {
                part.crc = fc_crc32(0, at, (size_t)part.len);
                rc = fc_crc_fold_add(src, e, ref, mismatch, rec_off, rec_len, &part);
            }
            covered += n;
            continue;
        }
        /* Else through a scatter buffer, in pieces of whole overlap rows: the caller's
         * slab is the memory budget, so this buffer stays small whatever the chunk. */
        size_t row = esz;
        for (int d = 1; d < ndim; d++)
            row *= (size_t)len[d];
        int64_t step = (int64_t)(atomic_load(&fc_piece_cap) / row);
        step = step < 1 ? 1 : step < len[0] ? step : len[0];
        unsigned char *tmp = fc_malloc((size_t)step * row);
        if (tmp == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory reading '%s'", e->key);
            break;
        }
        for (int64_t r = 0; rc == FC_OK && r < len[0]; r += step) {
            int64_t plo[FC_MAX_DIMS], plen[FC_MAX_DIMS], pdoff[FC_MAX_DIMS];
            memcpy(plo, lo, sizeof(plo));
            memcpy(plen, len, sizeof(plen));
            memcpy(pdoff, doff, sizeof(pdoff));
            plo[0] += r;
            pdoff[0] += r;
            plen[0] = len[0] - r < step ? len[0] - r : step;
            rc =
                fc_read_strided_box(&src->files[ref->file], ref->base, &desc, plo, plen, tmp, what);
            if (rc == FC_OK)
                fc_box_scatter(dst, size, pdoff, tmp, plen, ndim, esz);
            if (rc == FC_OK && fold) /* one run of the record: its pieces follow in order */
                part.crc = fc_crc32(part.crc, tmp, (size_t)plen[0] * row);
        }
        if (rc == FC_OK && fold)
            rc = fc_crc_fold_add(src, e, ref, mismatch, rec_off, rec_len, &part);
        fc_free(tmp);
        covered += n;
    }
    fc_free(ov);
    FC_TRY(rc);
    /* The source proved at open that its chunks tile the tensor (fc_chunks_check_tiling()),
     * so their intersections with the box tile the box: every byte of dst was written once. */
    assert(covered == want);
    (void)covered; /* NDEBUG builds (the wheel's) keep the count without the check */
    return FC_OK;
}

int fc_chunks_index_tiled(const struct fc_source *src, const struct fc_entry *e, int ndim,
                          const struct fc_box *boxes, size_t n, unsigned flags,
                          struct fc_chunk_index **index, int *untiled)
{
    const int rc = fc_chunks_check_tiling(ndim, e->t.shape, boxes, n, src->path, e->key);
    if (rc == FC_ECORRUPT && (flags & FC_SOURCE_UNTILED_OK)) {
        fc_error_clear();
        *untiled = 1;
        return FC_OK;
    }
    FC_TRY(rc);
    return fc_chunk_index_new(index, ndim, boxes, n);
}
