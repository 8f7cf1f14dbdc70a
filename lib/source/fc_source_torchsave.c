/*
 * fc_source_torchsave.c - the torch.save backend: a .pt/.pth/.bin file (or a
 * directory holding exactly one) as a source, its state dict flattened as DCP
 * flattens it (dcp-format.md 3.6).
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_source_backend.h"
#include "fc_torchsave.h"

#define FC_SOURCE_KEY_CAP   ((size_t)1 << 20)
#define FC_SOURCE_MAX_DEPTH 256

/* ---- flattening (dcp-format.md 3.6) ---- */

struct fc_flatten {
    struct fc_source *src;
    const struct fc_torchsave *ts;
    int values_only; /* tensors are another's entries (torch_checkpointing's metadata) */
    struct fc_path_elem stack[FC_SOURCE_MAX_DEPTH];
    size_t depth;
};

/* A list is descended when it holds a tensor or a container that is itself descended. */
static int fc_list_is_container(const struct fc_pv *v, int depth)
{
    if (depth > FC_SOURCE_MAX_DEPTH)
        return 0;
    for (size_t i = 0; i < v->u.seq.n; i++) {
        const struct fc_pv *x = v->u.seq.items[i];
        if (x->kind == FC_PV_TENSOR || x->kind == FC_PV_DICT)
            return 1;
        if (x->kind == FC_PV_LIST && fc_list_is_container(x, depth + 1))
            return 1;
    }
    return 0;
}

/* str(key) as Python would print it for the key types state dicts use. */
static int fc_key_string(struct fc_buf *b, const struct fc_pv *k)
{
    switch (k->kind) {
    case FC_PV_STR: return fc_buf_append(b, k->u.str.s, k->u.str.len);
    case FC_PV_INT: return fc_buf_printf(b, "%" PRId64, k->u.i);
    case FC_PV_BOOL: return fc_buf_puts(b, k->u.b ? "True" : "False");
    case FC_PV_NONE: return fc_buf_puts(b, "None");
    default: return fc_pv_repr(b, k, 4096);
    }
}

static int fc_flatten_leaf(struct fc_flatten *fl, const struct fc_pv *v)
{
    struct fc_source *src = fl->src;
    if (fl->values_only && v->kind == FC_PV_TENSOR)
        return FC_OK;
    struct fc_buf key = FC_BUF_INIT(FC_SOURCE_KEY_CAP);
    struct fc_entry e;
    int rc = FC_OK;
    memset(&e, 0, sizeof(e));
    for (size_t i = 0; i < fl->depth; i++) {
        if (i > 0)
            FC_TRY_GOTO(fc_buf_putc(&key, '.'), rc, fail);
        if (fl->stack[i].is_index)
            FC_TRY_GOTO(fc_buf_printf(&key, "%" PRId64, fl->stack[i].index), rc, fail);
        else
            FC_TRY_GOTO(fc_buf_puts(&key, fl->stack[i].key), rc, fail);
    }
    FC_TRY_GOTO(fc_buf_putc(&key, '\0'), rc, fail);
    struct fc_path_elem *path = fc_calloc(fl->depth == 0 ? 1 : fl->depth, sizeof(*path));
    if (path == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
        goto fail;
    }
    e.path = path;
    e.path_len = fl->depth;
    for (size_t i = 0; i < fl->depth; i++) {
        path[i] = fl->stack[i];
        if (!path[i].is_index) {
            path[i].key = fc_strdup(fl->stack[i].key);
            if (path[i].key == NULL) {
                e.path_len = i;
                e.key = (const char *)fc_buf_detach(&key, NULL);
                rc = fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
                goto fail_entry;
            }
        }
    }
    e.key = (const char *)fc_buf_detach(&key, NULL);
    if (fc_source_find(src, e.key) >= 0) {
        rc = fc_error_set(FC_ECORRUPT, "%s: duplicated flattened key '%s'", src->path, e.key);
        goto fail_entry;
    }
    if (v->kind == FC_PV_TENSOR) {
        e.kind = FC_ENTRY_TENSOR;
        e.t = v->u.tensor.desc;
        e.storage = fc_torchsave_storage_index(fl->ts, &v->u.tensor);
    } else {
        e.kind = FC_ENTRY_VALUE;
        e.value = v;
    }
    return fc_source_add_entry(src, &e);

fail_entry:
    fc_free((void *)(uintptr_t)e.key);
    for (size_t j = 0; j < e.path_len; j++)
        fc_free((void *)(uintptr_t)e.path[j].key);
    fc_free((void *)(uintptr_t)e.path);
    return rc;
fail:
    fc_buf_release(&key);
    return rc;
}

static int fc_flatten_value(struct fc_flatten *fl, const struct fc_pv *v)
{
    if (fl->depth >= FC_SOURCE_MAX_DEPTH)
        return fc_error_set(FC_EFORMAT, "%s: containers nested deeper than %d levels",
                            fl->src->path, FC_SOURCE_MAX_DEPTH);
    if (v->kind == FC_PV_DICT) {
        for (size_t i = 0; i < v->u.dict.n; i++) {
            struct fc_buf k = FC_BUF_INIT(FC_SOURCE_KEY_CAP);
            int rc = fc_key_string(&k, v->u.dict.keys[i]);
            if (rc == FC_OK)
                rc = fc_buf_putc(&k, '\0');
            if (rc < 0) {
                fc_buf_release(&k);
                return rc;
            }
            fl->stack[fl->depth] = (struct fc_path_elem){0, 0, (const char *)k.data};
            fl->depth++;
            rc = fc_flatten_value(fl, v->u.dict.vals[i]);
            fl->depth--;
            fc_buf_release(&k);
            FC_TRY(rc);
        }
        return FC_OK;
    }
    if (v->kind == FC_PV_LIST && fc_list_is_container(v, 0)) {
        for (size_t i = 0; i < v->u.seq.n; i++) {
            fl->stack[fl->depth] = (struct fc_path_elem){1, (int64_t)i, NULL};
            fl->depth++;
            const int rc = fc_flatten_value(fl, v->u.seq.items[i]);
            fl->depth--;
            FC_TRY(rc);
        }
        return FC_OK;
    }
    return fc_flatten_leaf(fl, v);
}

/* ---- the backend ---- */

static int fc_source_open_torchsave(struct fc_source *src, const char *path)
{
    struct fc_torchsave **ts = (struct fc_torchsave **)src->impl;
    size_t file;
    FC_TRY(fc_source_add_file(src, path, &file));
    const struct fc_file *f = &src->files[file];
    FC_TRY(fc_torchsave_open(ts, f, 0, f->size, path));
    const size_t n = fc_torchsave_storage_count(*ts);
    for (size_t i = 0; i < n; i++) {
        const struct fc_ts_storage *s = fc_torchsave_storage_at(*ts, i);
        FC_TRY(fc_source_add_storage(src, s->key, file, s->data_offset, s->nbytes));
    }
    return fc_source_flatten(src, *ts, NULL, 0);
}

int fc_source_flatten(struct fc_source *src, const struct fc_torchsave *ts, const char *prefix,
                      int values_only)
{
    struct fc_flatten *fl = fc_calloc(1, sizeof(*fl));
    if (fl == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    fl->src = src;
    fl->ts = ts;
    fl->values_only = values_only;
    if (prefix != NULL)
        fl->stack[fl->depth++] = (struct fc_path_elem){0, 0, prefix};
    const int rc = fc_flatten_value(fl, fc_torchsave_root(ts));
    fc_free(fl);
    return rc;
}

static int fc_ts_value_storage(const struct fc_source *src, const struct fc_entry *e,
                               const struct fc_pv_tensor *t, struct fc_storage *out)
{
    /* One archive (torch.save): its storage table holds the values' storages too. */
    for (size_t i = 0; i < src->nstorages; i++) {
        if (strcmp(src->storages[i].name, t->storage_key) == 0) {
            *out = src->storages[i];
            return FC_OK;
        }
    }
    return fc_error_set(FC_ECORRUPT, "%s: '%s': no storage '%s' for a tensor inside the value",
                        src->path, e->key, t->storage_key);
}

/* A value's blob is a fresh pickle of it: the file holds no item of its own. */
static int fc_ts_value_blob(const struct fc_source *src, const struct fc_entry *e,
                            struct fc_buf *out)
{
    (void)src;
    return fc_torchsave_value_blob(out, e->value);
}

static void fc_ts_free(void *impl)
{
    struct fc_torchsave **ts = impl;
    if (ts == NULL)
        return;
    fc_torchsave_free(*ts);
    fc_free(ts);
}

/*
 * Any file torch.save's detector recognises (zip, legacy, preview: the parser
 * explains the ones it does not read), or a directory holding exactly one
 * .pt/.pth/.bin file.
 */
static int fc_ts_probe(struct fc_probe *p)
{
    if (!p->is_dir) {
        FC_TRY(fc_probe_head(p));
        return fc_torchsave_detect(p->head, p->nhead, p->size) != FC_TS_UNKNOWN;
    }
    FC_TRY(fc_probe_names(p));
    size_t nts = 0;
    for (size_t i = 0; i < p->nnames; i++) {
        const char *n = p->names[i];
        if (fc_ends_with(n, ".pt") || fc_ends_with(n, ".pth") || fc_ends_with(n, ".bin")) {
            nts++;
            p->pick = n;
        }
    }
    if (nts > 1)
        return fc_error_set(FC_EFORMAT, "%s: directory holds %zu torch.save files; name one",
                            p->path, nts);
    return nts == 1;
}

static int fc_ts_open(struct fc_source **out, struct fc_probe *p, unsigned flags)
{
    (void)flags;
    FC_TRY(fc_source_new(out, p->path, &fc_source_torchsave_backend,
                         fc_calloc(1, sizeof(struct fc_torchsave *))));
    if (!p->is_dir)
        return fc_source_open_torchsave(*out, p->path);
    char *path = fc_path_join(p->path, p->pick);
    if (path == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", p->path);
    const int rc = fc_source_open_torchsave(*out, path);
    fc_free(path);
    return rc;
}

const struct fc_source_backend fc_source_torchsave_backend = {
    .name = "torch.save",
    .caps = FC_SOURCE_VALUES | FC_SOURCE_PICKLED,
    .probe = fc_ts_probe,
    .open = fc_ts_open,
    .value_storage = fc_ts_value_storage,
    .value_blob = fc_ts_value_blob,
    .free = fc_ts_free,
};
