/*
 * dcp_to_full.c - export any readable checkpoint (typically a DCP directory)
 * to safetensors or torch.save, tensor by tensor, in bounded memory.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_convert.h"
#include "fc_error.h"
#include "fc_hf.h"
#include "fc_io.h"
#include "fc_pickle.h"
#include "fc_safetensors.h"
#include "fc_strmap.h"
#include "fc_torchsave.h"
#include "fc_zip.h"
#include "keys.h"
#include "stream.h"
#include "xform.h"

/* Sequential writer with a running CRC (torch.save records need one). */
struct fc_out {
    int fd;
    const char *path;
    uint64_t pos;
    uint32_t crc;
    fc_progress_fn progress;
    void *progress_ctx;
    uint64_t done, total;
    uint64_t written; /* bytes of the files closed so far */
    int dfd;          /* O_DIRECT twin of fd (fc_dio_open()), or -1: buffered */
    struct fc_dio_writer dio;
};

static int fc_out_put(void *ctx, const void *p, size_t n)
{
    struct fc_out *o = ctx;
    if (fc_cancel_requested())
        return fc_error_set(FC_ERROR, "%s: interrupted", o->path);
    o->crc = fc_crc32(o->crc, p, n);
    if (o->dfd >= 0)
        FC_TRY(fc_dio_put(&o->dio, o->fd, o->dfd, o->path, o->pos, p, n));
    else
        FC_TRY(fc_pwrite_full(o->fd, p, n, o->pos, o->path));
    o->pos += n;
    o->done += n;
    if (o->progress != NULL)
        o->progress(o->progress_ctx, o->done, o->total);
    return FC_OK;
}

static uint64_t fc_spec_nbytes(const struct fc_xspec *s)
{
    return fc_shape_nbytes(s->shape, s->ndim, s->dtype);
}

/* Open o->fd's O_DIRECT twin for the data (fc_io.h), if the mode and filesystem allow. */
static void fc_out_open_direct(struct fc_out *o)
{
    o->dfd = fc_dio_open(o->fd, o->path);
}

static int fc_close_synced(int fd, const char *path)
{
    if (fc_cancel_requested()) { /* a slow fsync is worth a last look at the flag */
        close(fd);
        return fc_error_set(FC_ERROR, "%s: interrupted", path);
    }
    const int r1 = fsync(fd);
    const int e = errno;
    const int r2 = close(fd);
    if (r1 != 0 || r2 != 0)
        return fc_error_set(FC_EIO, "%s: fsync/close failed: %s", path, strerror(r1 ? e : errno));
    return FC_OK;
}

/* End o's data writes (flushing what the direct writer holds) and close its descriptors. */
static int fc_out_close(struct fc_out *o, int synced)
{
    int rc = o->dfd >= 0 ? fc_dio_flush(&o->dio) : FC_OK;
    if (o->dfd >= 0)
        close(o->dfd);
    o->dfd = -1;
    if (rc == FC_OK && synced)
        rc = fc_close_synced(o->fd, o->path);
    else
        close(o->fd);
    o->fd = -1;
    return rc;
}

/* The __metadata__ of every safetensors file we write, as transformers writes it. */
static const char *const fc_st_meta[] = {"format", "pt"};

/* Stream every tensor of specs[first..last) into one safetensors file at path. */
static int fc_write_safetensors(const struct fc_source *src, const struct fc_xform_result *xr,
                                const size_t *idx, size_t n, const char *path, uint64_t budget,
                                struct fc_slabs *slabs, struct fc_out *o)
{
    struct fc_st_tensor *ts = fc_calloc(n + 1, sizeof(*ts));
    struct fc_buf hdr = FC_BUF_INIT((size_t)1 << 30);
    int rc = FC_OK;
    o->fd = -1;
    if (ts == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const struct fc_xspec *s = &xr->specs[idx[i]];
        ts[i].name = s->key;
        ts[i].dtype = s->dtype;
        ts[i].ndim = s->ndim;
        memcpy(ts[i].shape, s->shape, sizeof(ts[i].shape));
        ts[i].nbytes = fc_spec_nbytes(s);
    }
    FC_TRY_GOTO(fc_safetensors_write_header(&hdr, ts, n, fc_st_meta, 1, 8), rc, done);
    FC_TRY_GOTO(fc_file_create(path, &o->fd), rc, done);
    o->path = path;
    o->pos = 0;
    fc_out_open_direct(o);
    FC_TRY_GOTO(fc_pwrite_full(o->fd, hdr.data, hdr.len, 0, path), rc, done);
    o->pos = hdr.len;
    for (size_t i = 0; i < n; i++) {
        const struct fc_xspec *s = &xr->specs[idx[i]];
        const int64_t zero[FC_MAX_DIMS] = {0};
        FC_TRY_GOTO(fc_stream_box(src, s, zero, s->shape, budget, slabs, fc_out_put, o), rc, done);
    }
    rc = fc_out_close(o, 1);
    o->written += o->pos;
done:
    if (o->fd >= 0)
        (void)fc_out_close(o, 0);
    fc_buf_release(&hdr);
    fc_free(ts);
    return rc;
}

/* ---- torch.save: nesting from planner_data paths ---- */

struct fc_node {
    int is_list; /* container kind; leaves have spec >= 0 */
    long spec;   /* leaf: spec index, else -1 */
    char *key;   /* name in the parent dict (NULL in lists) */
    struct fc_node **kids;
    size_t nkids, kids_alloc;
    struct fc_strmap names; /* dicts: kid key -> kid index (keys borrowed from the kids) */
};

static void fc_node_free(struct fc_node *n)
{
    if (n == NULL)
        return;
    for (size_t i = 0; i < n->nkids; i++)
        fc_node_free(n->kids[i]);
    fc_free(n->kids);
    fc_strmap_release(&n->names);
    fc_free(n->key);
    fc_free(n);
}

static struct fc_node *fc_node_new(const char *key, long spec)
{
    struct fc_node *n = fc_calloc(1, sizeof(*n));
    if (n == NULL)
        return NULL;
    n->spec = spec;
    if (key != NULL && (n->key = fc_strdup(key)) == NULL) {
        fc_free(n);
        return NULL;
    }
    return n;
}

static int fc_node_add(struct fc_node *parent, struct fc_node *kid)
{
    if (parent->nkids == parent->kids_alloc) {
        const size_t n = parent->kids_alloc == 0 ? 4 : parent->kids_alloc * 2;
        struct fc_node **k = fc_reallocarray(parent->kids, n, sizeof(*k));
        if (k == NULL) {
            fc_node_free(kid);
            return fc_error_set(FC_ENOMEM, "out of memory");
        }
        parent->kids = k;
        parent->kids_alloc = n;
    }
    if (kid->key != NULL) {
        const int rc = fc_strmap_put(&parent->names, kid->key, parent->nkids, NULL);
        if (rc < 0) {
            fc_node_free(kid);
            return rc;
        }
    }
    parent->kids[parent->nkids++] = kid;
    return FC_OK;
}

static int fc_tree_insert(struct fc_node *root, const struct fc_xspec *s, long spec)
{
    struct fc_node *cur = root;
    for (size_t d = 0; d < s->path_len; d++) {
        const struct fc_path_elem *pe = &s->path[d];
        char tmp[32];
        const char *name = pe->key;
        if (pe->is_index) {
            snprintf(tmp, sizeof(tmp), "%lld", (long long)pe->index);
            name = tmp;
        }
        const int last = d + 1 == s->path_len;
        if (cur->spec >= 0)
            return fc_error_set(FC_EINVAL, "'%s': a value and a container share the name", s->key);
        if (cur->nkids == 0 && cur != root)
            cur->is_list = pe->is_index;
        struct fc_node *next = NULL;
        if (cur->is_list != pe->is_index)
            return fc_error_set(FC_EINVAL, "'%s': a list and a dict share the name", s->key);
        if (cur->is_list) {
            /* DCP flattens lists in order, so indices arrive 0, 1, 2, ... */
            if (pe->index < 0 || pe->index > (int64_t)cur->nkids)
                return fc_error_set(FC_EINVAL, "'%s': list indices are not consecutive", s->key);
            if (pe->index < (int64_t)cur->nkids)
                next = cur->kids[pe->index];
        } else {
            size_t k;
            if (fc_strmap_get(&cur->names, name, &k))
                next = cur->kids[k];
        }
        if (next == NULL) {
            next = fc_node_new(cur->is_list ? NULL : name, last ? spec : -1);
            if (next == NULL)
                return fc_error_set(FC_ENOMEM, "out of memory");
            FC_TRY(fc_node_add(cur, next));
        } else if (last) {
            return fc_error_set(FC_EINVAL, "'%s': duplicated key", s->key);
        }
        cur = next;
    }
    return FC_OK;
}

/* A storage of a tensor found inside a value, copied into the archive as it is. */
struct fc_value_store {
    size_t file;
    uint64_t offset, nbytes;
};

struct fc_ts_export {
    const struct fc_source *src;
    const struct fc_xform_result *xr;
    const long *storage_of; /* spec -> storage number, -1 for values */
    size_t nst;             /* storages of tensor entries; values' storages come after */
    struct fc_value_store *vst;
    size_t nvst, vst_alloc;
    const struct fc_entry *entry; /* the value being written */
};

/* A tensor inside a value: its storage becomes record data/<nst + k>, as torch.save writes it. */
static int fc_pickle_value_tensor(void *ctx, struct fc_buf *b, const struct fc_pv_tensor *t)
{
    struct fc_ts_export *x = ctx;
    struct fc_storage st;
    FC_TRY(fc_source_value_storage(x->src, x->entry, t, &st));
    size_t k = 0;
    while (k < x->nvst && !(x->vst[k].file == st.file && x->vst[k].offset == st.offset))
        k++;
    if (k == x->nvst) {
        if (x->nvst == x->vst_alloc) {
            const size_t n = x->vst_alloc == 0 ? 8 : x->vst_alloc * 2;
            struct fc_value_store *v = fc_reallocarray(x->vst, n, sizeof(*v));
            if (v == NULL)
                return fc_error_set(FC_ENOMEM, "out of memory");
            x->vst = v;
            x->vst_alloc = n;
        }
        x->vst[x->nvst++] = (struct fc_value_store){st.file, st.offset, st.nbytes};
    }
    char key[32];
    snprintf(key, sizeof(key), "%zu", x->nst + k);
    const size_t esz = fc_dtype_size(t->desc.dtype);
    return fc_torchsave_pw_tensor_view(b, &t->desc, esz > 0 ? st.nbytes / esz : 0, t->requires_grad,
                                       key);
}

static int fc_pickle_node(struct fc_buf *b, struct fc_ts_export *x, const struct fc_node *n)
{
    if (n->spec >= 0) {
        const struct fc_xspec *s = &x->xr->specs[n->spec];
        if (s->kind == FC_ENTRY_VALUE && s->value != NULL)
            return fc_pw_value(b, s->value);
        if (s->kind == FC_ENTRY_VALUE) {
            /* Opaque values go in as their symbolic trees: the same globals, calls and
             * state, so torch.load(weights_only=False) builds the same objects. */
            const struct fc_pw_tensor_hook h = {fc_pickle_value_tensor, x};
            x->entry = &s->src->entries[s->entry];
            return fc_pw_value_with(b, x->entry->value, &h);
        }
        char key[32];
        int64_t numel = 0;
        snprintf(key, sizeof(key), "%ld", x->storage_of[n->spec]);
        (void)fc_shape_numel(s->shape, s->ndim, &numel);
        return fc_torchsave_pw_tensor(b, s->dtype, s->shape, s->ndim, (uint64_t)numel, key);
    }
    FC_TRY(n->is_list ? fc_pw_empty_list(b) : fc_pw_empty_dict(b));
    for (size_t i = 0; i < n->nkids; i += 1000) {
        FC_TRY(fc_pw_mark(b));
        for (size_t k = i; k < n->nkids && k < i + 1000; k++) {
            if (!n->is_list)
                FC_TRY(fc_pw_str(b, n->kids[k]->key, strlen(n->kids[k]->key)));
            FC_TRY(fc_pickle_node(b, x, n->kids[k]));
        }
        FC_TRY(n->is_list ? fc_pw_appends(b) : fc_pw_setitems(b));
    }
    return FC_OK;
}

/* Copy n bytes at offset of f into the output (a value's tensor storage). */
static int fc_copy_range(const struct fc_file *f, uint64_t offset, uint64_t n, struct fc_out *o)
{
    unsigned char *buf = fc_malloc((size_t)1 << 20);
    int rc = FC_OK;
    if (buf == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (uint64_t pos = 0; rc == FC_OK && pos < n;) {
        const size_t step = n - pos < ((size_t)1 << 20) ? (size_t)(n - pos) : ((size_t)1 << 20);
        rc = fc_file_pread(f, buf, step, offset + pos);
        if (rc == FC_OK)
            rc = fc_out_put(o, buf, step);
        pos += step;
    }
    fc_free(buf);
    return rc;
}

/*
 * Opaque values go into a .pt as their symbolic trees; one whose pickle could not even be
 * read symbolically cannot: refuse, naming them (the first few) and the way out.
 */
static int fc_check_embeddable(const struct fc_xform_result *xr, const char *output)
{
    char keys[512] = "";
    size_t n = 0, used = 0;
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        if (s->kind != FC_ENTRY_VALUE || s->value != NULL)
            continue;
        const struct fc_entry *e = &s->src->entries[s->entry];
        if (e->opaque == NULL || e->value != NULL)
            continue;
        if (n++ < 4 && used < sizeof(keys))
            used += (size_t)snprintf(keys + used, sizeof(keys) - used, "%s'%s'", n > 1 ? ", " : "",
                                     e->key);
    }
    if (n == 0)
        return FC_OK;
    return fc_error_set(FC_EFORMAT,
                        "%s: cannot embed %s%s (%zu value%s whose pickle%s fsdpconv cannot read "
                        "even symbolically); leave %s out with --drop REGEX, or export to "
                        ".safetensors",
                        output, keys, n > 4 ? ", ..." : "", n, n == 1 ? "" : "s", n == 1 ? "" : "s",
                        n == 1 ? "it" : "them");
}

static int fc_write_torchsave(const struct fc_source *src, const struct fc_xform_result *xr,
                              const char *path, const char *final_name, uint64_t budget,
                              struct fc_slabs *slabs, struct fc_out *o, size_t *ntensors_out)
{
    struct fc_node *root = fc_node_new(NULL, -1);
    long *storage_of = fc_calloc(xr->n + 1, sizeof(*storage_of));
    size_t *storage_spec = fc_calloc(xr->n + 1, sizeof(*storage_spec));
    struct fc_zipw_record *recs = NULL;
    char(*names)[32] = NULL;
    struct fc_ts_export x = {src, xr, storage_of, 0, NULL, 0, 0, NULL};
    struct fc_buf pkl = FC_BUF_INIT((size_t)1 << 31), tail = FC_BUF_INIT((size_t)1 << 31);
    static const unsigned char little[] = "little", version[] = "3\n";
    char prefix[256];
    size_t nst = 0, nrec = 0;
    uint64_t total = 0;
    int rc = FC_OK;
    o->fd = -1;
    if (root == NULL || storage_of == NULL || storage_spec == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_check_embeddable(xr, final_name), rc, done);
    /* Archive folder: the target's basename without its extension, as torch.save names it. */
    {
        const char *base = strrchr(final_name, '/');
        base = base != NULL ? base + 1 : final_name;
        snprintf(prefix, sizeof(prefix), "%s", base);
        char *dot = strrchr(prefix, '.');
        if (dot != NULL && dot != prefix)
            *dot = '\0';
        if (prefix[0] == '\0')
            snprintf(prefix, sizeof(prefix), "archive");
    }
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        storage_of[i] = -1;
        if (s->kind == FC_ENTRY_TENSOR) {
            /* Tied tensors share one storage, as torch.save writes them. */
            if (s->alias_of >= 0) {
                storage_of[i] = storage_of[s->alias_of];
            } else {
                storage_of[i] = (long)nst;
                storage_spec[nst++] = i;
            }
        }
        FC_TRY_GOTO(fc_tree_insert(root, s, (long)i), rc, done);
    }
    FC_TRY_GOTO(fc_pw_proto(&pkl), rc, done);
    x.nst = nst;
    FC_TRY_GOTO(fc_pickle_node(&pkl, &x, root), rc, done);
    FC_TRY_GOTO(fc_pw_stop(&pkl), rc, done);
    recs = fc_calloc(nst + x.nvst + 4, sizeof(*recs));
    names = fc_calloc(nst + x.nvst + 1, sizeof(*names));
    if (recs == NULL || names == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    recs[nrec++] = (struct fc_zipw_record){"data.pkl", pkl.len, pkl.data, 0, 0, 0};
    recs[nrec++] = (struct fc_zipw_record){"byteorder", 6, little, 0, 0, 0};
    for (size_t k = 0; k < nst + x.nvst; k++) {
        snprintf(names[k], sizeof(names[k]), "data/%zu", k);
        const uint64_t size =
            k < nst ? fc_spec_nbytes(&xr->specs[storage_spec[k]]) : x.vst[k - nst].nbytes;
        recs[nrec++] = (struct fc_zipw_record){names[k], size, NULL, 0, 0, 0};
    }
    recs[nrec++] = (struct fc_zipw_record){"version", 2, version, 0, 0, 0};
    FC_TRY_GOTO(fc_zipw_layout(recs, nrec, prefix, &total), rc, done);
    FC_TRY_GOTO(fc_file_create(path, &o->fd), rc, done);
    o->path = path;
    fc_out_open_direct(o);
    /* Payloads first (CRCs computed as they stream), then everything around them. */
    for (size_t k = 0; k < nst; k++) {
        const struct fc_xspec *s = &xr->specs[storage_spec[k]];
        const int64_t zero[FC_MAX_DIMS] = {0};
        o->pos = recs[2 + k].data_offset;
        o->crc = 0;
        FC_TRY_GOTO(fc_stream_box(src, s, zero, s->shape, budget, slabs, fc_out_put, o), rc, done);
        recs[2 + k].crc32 = o->crc;
    }
    for (size_t k = 0; k < x.nvst; k++) {
        o->pos = recs[2 + nst + k].data_offset;
        o->crc = 0;
        FC_TRY_GOTO(fc_copy_range(&src->files[x.vst[k].file], x.vst[k].offset, x.vst[k].nbytes, o),
                    rc, done);
        recs[2 + nst + k].crc32 = o->crc;
    }
    uint64_t from = 0;
    for (size_t r = 0; r <= nrec; r++) {
        const int streamed = r < nrec && recs[r].data == NULL && recs[r].size > 0;
        if (r < nrec && !streamed)
            continue;
        const uint64_t to = r < nrec ? recs[r].data_offset : total;
        fc_buf_clear(&tail);
        FC_TRY_GOTO(fc_zipw_emit(recs, nrec, prefix, from, to, &tail), rc, done);
        FC_TRY_GOTO(fc_pwrite_full(o->fd, tail.data, tail.len, from, path), rc, done);
        if (r < nrec)
            from = recs[r].data_offset + recs[r].size;
    }
    rc = fc_out_close(o, 1);
    o->written += total;
    *ntensors_out = nst;
done:
    if (o->fd >= 0)
        (void)fc_out_close(o, 0);
    fc_node_free(root);
    fc_free(storage_of);
    fc_free(storage_spec);
    fc_free(recs);
    fc_free(names);
    fc_free(x.vst);
    fc_buf_release(&pkl);
    fc_buf_release(&tail);
    return rc;
}

/* Decimal digits of v. */
static uint64_t fc_digits(uint64_t v)
{
    uint64_t n = 1;
    while (v >= 10) {
        v /= 10;
        n++;
    }
    return n;
}

/*
 * At most the bytes that tensor s adds to a safetensors header when its data
 * starts at `off`: ,"NAME":{"dtype":"DT","shape":[..],"data_offsets":[off,end]}.
 * Exact but for the name: JSON_ENSURE_ASCII writes a byte as 1, 2 (\" \\) or
 * 6 (\u00XX) characters, and a UTF-8 sequence of k bytes as 6 or 12 <= 6k.
 */
static uint64_t fc_st_entry_bound(const struct fc_xspec *s, uint64_t off)
{
    const struct fc_dtype_info *info = fc_dtype_info(s->dtype);
    uint64_t n = strlen(",\"\":{\"dtype\":\"\",\"shape\":[],\"data_offsets\":[,]}");
    for (const unsigned char *c = (const unsigned char *)s->key; *c != '\0'; c++)
        n += *c == '"' || *c == '\\' ? 2 : *c < 0x20 || *c >= 0x7f ? 6 : 1;
    n += info != NULL && info->safetensors_name != NULL ? strlen(info->safetensors_name) : 0;
    for (int d = 0; d < s->ndim; d++)
        n += fc_digits((uint64_t)s->shape[d]) + (d > 0);
    return n + fc_digits(off) + fc_digits(off + fc_spec_nbytes(s));
}

/*
 * Greedy shards in key order, like transformers' save_pretrained, but with
 * the limit on whole files: the 8-byte length, the header (bounded above by
 * base plus each entry's fc_st_entry_bound, plus up to 7 bytes of padding) and
 * the data.  A tensor that does not fit even alone gets a file of its own.
 * shard_of[i] gets the shard of idx[i]; returns the number of shards.
 */
static size_t fc_plan_shards(const struct fc_xform_result *xr, const size_t *idx, size_t n,
                             uint64_t limit, uint64_t base, size_t *shard_of)
{
    size_t nshards = 0;
    uint64_t data = 0, head = 0;
    for (size_t i = 0; i < n; i++) {
        const struct fc_xspec *s = &xr->specs[idx[i]];
        const uint64_t b = fc_spec_nbytes(s);
        if (i == 0 ||
            (data > 0 && 8 + base + 7 + head + fc_st_entry_bound(s, data) + data + b > limit)) {
            nshards++;
            data = 0;
            head = 0;
        }
        shard_of[i] = nshards - 1;
        head += fc_st_entry_bound(s, data);
        data += b;
    }
    return nshards;
}

/* Optimizer state as get_state_dict or torchtitan name it: [app.]optim.state.* or optimizer.state.*
 */
static int fc_is_optim_key(const char *key)
{
    static const char *const marks[] = {"optim.state.", "optimizer.state."};
    for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
        const char *at = strstr(key, marks[m]);
        if (at != NULL && (at == key || at[-1] == '.'))
            return 1;
    }
    return 0;
}

/*
 * A directory output is a model for from_pretrained: optimizer tensors there
 * are refused with --config-from, and counted (for a note) otherwise.
 */
static int fc_check_optim(const struct fc_dcp_to_full_opts *opts, const struct fc_xform_result *xr,
                          struct fc_dcp_to_full_result *res)
{
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        if (s->kind != FC_ENTRY_TENSOR || !fc_is_optim_key(s->key))
            continue;
        if (opts->config_from != NULL)
            return fc_error_set(FC_EINVAL,
                                "%s: '%s' is optimizer state, which a Hugging Face model "
                                "directory does not hold; export the model alone with --select "
                                "model (or the key that holds it)",
                                opts->input, s->key);
        if (res->noptim++ == 0)
            snprintf(res->optim_key, sizeof(res->optim_key), "%s", s->key);
    }
    return FC_OK;
}

static int fc_write_index(const char *path, const struct fc_xform_result *xr, const size_t *idx,
                          const size_t *shard_of, size_t n, size_t nshards, uint64_t total)
{
    const char **keys = fc_calloc(n + 1, sizeof(*keys));
    const char **files = fc_calloc(n + 1, sizeof(*files));
    char(*names)[64] = fc_calloc(nshards + 1, sizeof(*names));
    struct fc_buf b = FC_BUF_INIT((size_t)1 << 30);
    int rc = FC_OK;
    if (keys == NULL || files == NULL || names == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t s = 0; s < nshards; s++)
        snprintf(names[s], sizeof(names[s]), "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
    for (size_t i = 0; i < n; i++) {
        keys[i] = xr->specs[idx[i]].key;
        files[i] = names[shard_of[i]];
    }
    FC_TRY_GOTO(fc_st_index_write(&b, total, keys, files, n), rc, done);
    rc = fc_write_file_atomic(path, b.data, b.len);
done:
    fc_free(keys);
    fc_free(files);
    fc_free(names);
    fc_buf_release(&b);
    return rc;
}

/* The output's kind (--format, else from its name) and whether it is a directory. */
static int fc_export_kind(const struct fc_dcp_to_full_opts *opts, enum fc_export_format *fmt,
                          int *is_dir)
{
    *fmt = opts->format;
    if (*fmt == FC_EXPORT_AUTO) {
        if (fc_ends_with(opts->output, ".pt") || fc_ends_with(opts->output, ".pth") ||
            fc_ends_with(opts->output, ".bin"))
            *fmt = FC_EXPORT_TORCH;
        else
            *fmt = FC_EXPORT_SAFETENSORS;
    }
    *is_dir =
        *fmt == FC_EXPORT_SAFETENSORS && (opts->max_shard_size > 0 || opts->config_from != NULL);
    if (*fmt == FC_EXPORT_TORCH && opts->max_shard_size > 0)
        return fc_error_set(FC_EINVAL, "--max-shard-size applies to safetensors output only");
    if (*fmt == FC_EXPORT_TORCH && opts->config_from != NULL)
        return fc_error_set(FC_EINVAL, "--config-from writes a Hugging Face directory of "
                                       "safetensors; drop --format torch and the .pt/.bin name");
    return FC_OK;
}

/*
 * --max-shard-size: the tensors idx[0..n) in shards of at most that many file bytes
 * (fc_plan_shards(); shard_of is scratch for n), then model.safetensors.index.json, in dir.
 */
static int fc_write_shards(const struct fc_source *src, const struct fc_xform_result *xr,
                           const size_t *idx, size_t n, size_t *shard_of, const char *dir,
                           const struct fc_dcp_to_full_opts *opts, struct fc_slabs *slabs,
                           struct fc_out *o, struct fc_dcp_to_full_result *res)
{
    struct fc_buf empty = FC_BUF_INIT(4096);
    int rc = fc_safetensors_write_header(&empty, NULL, 0, fc_st_meta, 1, 1);
    const uint64_t base = empty.len - 8;
    fc_buf_release(&empty);
    FC_TRY(rc);
    const size_t nshards = fc_plan_shards(xr, idx, n, opts->max_shard_size, base, shard_of);
    for (size_t s = 0, first = 0; s < nshards; s++) {
        size_t last = first;
        while (last < n && shard_of[last] == s)
            last++;
        char name[64];
        snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", s + 1, nshards);
        char *p = fc_path_join(dir, name);
        if (p == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        rc = fc_write_safetensors(src, xr, idx + first, last - first, p,
                                  fc_slab_budget(opts->max_memory), slabs, o);
        fc_free(p);
        FC_TRY(rc);
        first = last;
    }
    char *ip = fc_path_join(dir, "model.safetensors.index.json");
    if (ip == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    rc = fc_write_index(ip, xr, idx, shard_of, n, nshards, o->total);
    fc_free(ip);
    FC_TRY(rc);
    res->ntensors = n;
    res->nfiles = nshards;
    return FC_OK;
}

int fc_dcp_to_full(const struct fc_dcp_to_full_opts *opts, struct fc_dcp_to_full_result *res)
{
    struct fc_source *src = NULL;
    struct fc_xform_rules rules;
    struct fc_xform_result xr;
    struct fc_slabs slabs;
    struct fc_out o = {-1, NULL, 0, 0,  opts->progress,    opts->progress_ctx,
                       0,  0,    0, -1, FC_DIO_WRITER_INIT};
    size_t *idx = NULL, *shard_of = NULL;
    struct fc_stage out;
    const char *tmp;
    int rc = FC_OK, is_dir_out = 0;
    memset(&rules, 0, sizeof(rules));
    memset(&xr, 0, sizeof(xr));
    memset(&slabs, 0, sizeof(slabs));
    memset(res, 0, sizeof(*res));
    enum fc_export_format fmt;
    FC_TRY(fc_export_kind(opts, &fmt, &is_dir_out));
    fc_cancel_hold();
    rc = fc_stage_begin(&out, opts->output, is_dir_out, opts->force, fc_cancel_requested);
    fc_cancel_staged(rc == FC_OK && is_dir_out ? out.path : NULL);
    fc_cancel_release();
    FC_TRY(rc);
    tmp = out.path;
    FC_TRY_GOTO(fc_source_open(&src, opts->input, opts->source_flags), rc, done);
    for (size_t i = 0; i < opts->nrules; i++) {
        char where[64];
        snprintf(where, sizeof(where), "--%s", opts->rules[i].op);
        FC_TRY_GOTO(fc_xform_rules_add(&rules, opts->rules[i].op, opts->rules[i].arg, where), rc,
                    done);
    }
    FC_TRY_GOTO(fc_xform_apply(src, &rules, &xr), rc, done);
    const struct fc_xform_input in = {src, NULL};
    FC_TRY_GOTO(fc_keys_check(&xr, &in, 1, &rules), rc, done);
    if (is_dir_out)
        FC_TRY_GOTO(fc_check_optim(opts, &xr, res), rc, done);
    FC_TRY_GOTO(fc_stream_fill_means(&xr, opts->max_memory, &slabs), rc, done);
    idx = fc_calloc(xr.n + 1, sizeof(*idx));
    shard_of = fc_calloc(xr.n + 1, sizeof(*shard_of));
    if (idx == NULL || shard_of == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    size_t n = 0;
    for (size_t i = 0; i < xr.n; i++) {
        if (xr.specs[i].kind == FC_ENTRY_TENSOR) {
            idx[n++] = i;
            o.total += fc_spec_nbytes(&xr.specs[i]);
        } else if (fmt == FC_EXPORT_SAFETENSORS) {
            res->nvalues_dropped++;
        }
    }
    fc_cancel_polled(); /* the output file (or shard files) appear from here on */
    /* The small files first: a bad --config-from fails before any tensor is written. */
    if (opts->config_from != NULL)
        FC_TRY_GOTO(fc_hf_copy_files(opts->config_from, tmp), rc, done);
    if (fmt == FC_EXPORT_TORCH) {
        FC_TRY_GOTO(fc_write_torchsave(src, &xr, tmp, opts->output,
                                       fc_slab_budget(opts->max_memory), &slabs, &o,
                                       &res->ntensors),
                    rc, done);
        res->nfiles = 1;
    } else if (opts->max_shard_size == 0) {
        /* One file: the output itself, or model.safetensors in the --config-from directory. */
        char *p = is_dir_out ? fc_path_join(tmp, "model.safetensors") : NULL;
        if (is_dir_out && p == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
        rc = fc_write_safetensors(src, &xr, idx, n, is_dir_out ? p : tmp,
                                  fc_slab_budget(opts->max_memory), &slabs, &o);
        fc_free(p);
        if (rc < 0)
            goto done;
        res->ntensors = n;
        res->nfiles = 1;
    } else {
        FC_TRY_GOTO(fc_write_shards(src, &xr, idx, n, shard_of, tmp, opts, &slabs, &o, res), rc,
                    done);
    }
    /* Chunks the slabs read only in part (a --resize-rows that drops rows) are checked whole. */
    FC_TRY_GOTO(fc_source_verify_rest(src), rc, done);
    FC_TRY_GOTO(fc_stage_commit(&out), rc, done);
    res->format = fmt == FC_EXPORT_TORCH ? "torch.save" : "safetensors";
    res->bytes_written = o.written;
done:
    fc_cancel_staged(NULL);
    fc_stage_release(&out);
    fc_free(idx);
    fc_free(shard_of);
    fc_slabs_release(&slabs);
    fc_dio_release(&o.dio);
    fc_xform_result_release(&xr);
    fc_xform_rules_release(&rules);
    fc_source_free(src);
    return rc;
}
