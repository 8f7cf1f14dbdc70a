/*
 * fc_source.c - the front of lib/source/: the table of backends, the one
 * probe loop that picks the backend of a path, and the dispatch of box reads
 * and value access to a source's backend (fc_source_backend.h).
 */
#include "fc_source.h"

#include <stddef.h>

#include "fc_error.h"
#include "fc_io.h"
#include "fc_source_backend.h"

/*
 * Probed in this order; the first that claims a path opens it.  A DCP
 * directory is claimed before the safetensors and torch.save files it may
 * also hold, an index before the shards it names.
 */
static const struct fc_source_backend *const fc_source_backends[] = {
    &fc_source_dcp_backend,      &fc_source_tcp_backend, /* before safetensors: its safetensors
                                                            layout is per-rank files */
    &fc_source_st_index_backend, &fc_source_st_backend,  &fc_source_torchsave_backend,
};

/* No backend claimed p: say what was looked for. */
static int fc_source_unknown(const struct fc_probe *p)
{
    if (p->is_dir)
        return fc_error_set(FC_EFORMAT,
                            "%s: no checkpoint found (no *.safetensors.index.json, *.safetensors, "
                            "*.pt, *.pth or *.bin)",
                            p->path);
    if (p->nhead == 0)
        return fc_error_set(FC_ECORRUPT, "%s: empty file", p->path);
    return fc_error_set(FC_EFORMAT,
                        "%s: not a checkpoint fsdpconv knows (torch.save zip, "
                        "safetensors, index.json)",
                        p->path);
}

int fc_source_open(struct fc_source **out, const char *path, unsigned flags)
{
    *out = NULL;
    int rc = fc_path_is_dir(path);
    if (rc == FC_ENOENT)
        return fc_error_set(FC_ENOENT, "%s: no such file or directory", path);
    if (rc < 0)
        return rc;
    struct fc_probe p = {.path = path, .is_dir = rc == 1};
    const struct fc_source_backend *b = NULL;
    rc = 0;
    for (size_t i = 0; rc == 0 && i < sizeof(fc_source_backends) / sizeof(*fc_source_backends);
         i++) {
        b = fc_source_backends[i];
        rc = b->probe(&p);
    }
    struct fc_source *src = NULL;
    if (rc == 0)
        rc = fc_source_unknown(&p);
    else if (rc == 1)
        rc = b->open(&src, &p, flags);
    fc_probe_release(&p);
    if (rc < 0) {
        fc_source_free(src);
        return rc;
    }
    *out = src;
    return FC_OK;
}

unsigned fc_source_caps(const struct fc_source *src)
{
    return src->backend->caps;
}

int fc_source_read_box(const struct fc_source *src, const struct fc_entry *e, const int64_t *off,
                       const int64_t *size, void *dst)
{
    if (src->backend->read_box != NULL)
        return src->backend->read_box(src, e, off, size, dst);
    return fc_storage_read_box(src, e, off, size, dst);
}

int fc_source_value_storage(const struct fc_source *src, const struct fc_entry *e,
                            const struct fc_pv_tensor *t, struct fc_storage *out)
{
    if (src->backend->value_storage == NULL)
        return fc_error_set(FC_EINVAL, "%s: '%s': a %s input holds no values", src->path, e->key,
                            src->format);
    return src->backend->value_storage(src, e, t, out);
}

int fc_source_value_blob(const struct fc_source *src, const struct fc_entry *e, struct fc_buf *out)
{
    if (src->backend->value_blob == NULL)
        return fc_error_set(FC_EINVAL, "%s: '%s': a %s input holds no values", src->path, e->key,
                            src->format);
    return src->backend->value_blob(src, e, out);
}

int fc_source_sharded_meta(const struct fc_source *src, struct fc_dcp_meta **out)
{
    *out = NULL;
    if (src->backend->sharded_meta == NULL)
        return fc_error_set(FC_EINVAL, "%s: not a per-rank sharded checkpoint", src->path);
    return src->backend->sharded_meta(src, out);
}
