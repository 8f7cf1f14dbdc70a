/*
 * fc_source_core.c - the source object that every backend fills and the front
 * hands out: creation, files, storages, entries, the key index, freeing; and
 * the probe state that backends claim paths with (fc_source_backend.h).
 */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fc_alloc.h"
#include "fc_buf.h"
#include "fc_error.h"
#include "fc_source.h"
#include "fc_source_backend.h"

void fc_source_free(struct fc_source *src)
{
    if (src == NULL)
        return;
    for (size_t i = 0; i < src->nentries; i++) {
        fc_free((void *)(uintptr_t)src->entries[i].key);
        for (size_t j = 0; j < src->entries[i].path_len; j++)
            fc_free((void *)(uintptr_t)src->entries[i].path[j].key);
        fc_free((void *)(uintptr_t)src->entries[i].path);
    }
    fc_free(src->entries);
    for (size_t i = 0; i < src->nstorages; i++)
        fc_free((void *)(uintptr_t)src->storages[i].name);
    fc_free(src->storages);
    for (size_t i = 0; i < src->nfiles; i++)
        fc_file_close(&src->files[i]);
    fc_free(src->files);
    fc_strmap_release(&src->key_index);
    fc_crc_fold_free(src->fold);
    if (src->backend != NULL)
        src->backend->free(src->impl);
    fc_free((void *)(uintptr_t)src->path);
    fc_free(src);
}

int fc_source_new(struct fc_source **out, const char *path, const struct fc_source_backend *b,
                  void *impl)
{
    struct fc_source *src = fc_calloc(1, sizeof(*src));
    char *p = fc_strdup(path);
    struct fc_crc_fold *fold = fc_crc_fold_new();
    if (src == NULL || impl == NULL || p == NULL || fold == NULL) {
        fc_free(src);
        fc_crc_fold_free(fold);
        b->free(impl);
        fc_free(p);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    }
    src->path = p;
    src->fold = fold;
    src->format = b->name;
    src->backend = b;
    src->impl = impl;
    *out = src;
    return FC_OK;
}

int fc_source_add_file(struct fc_source *src, const char *path, size_t *index_out)
{
    struct fc_file *files = fc_reallocarray(src->files, src->nfiles + 1, sizeof(*files));
    if (files == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", path);
    src->files = files;
    struct fc_file *f = &src->files[src->nfiles];
    *f = (struct fc_file)FC_FILE_INIT;
    FC_TRY(fc_file_open_read(f, path));
    /* Conversions read each input front to back: ask for aggressive readahead. */
    fc_file_advise_sequential(f, 0, f->size);
    *index_out = src->nfiles++;
    return FC_OK;
}

int fc_source_add_storage(struct fc_source *src, const char *name, size_t file, uint64_t offset,
                          uint64_t nbytes)
{
    struct fc_storage *s = fc_reallocarray(src->storages, src->nstorages + 1, sizeof(*s));
    if (s == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    src->storages = s;
    char *n = fc_strdup(name);
    if (n == NULL)
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    src->storages[src->nstorages++] = (struct fc_storage){n, file, offset, nbytes, 0};
    return FC_OK;
}

int fc_source_add_entry(struct fc_source *src, struct fc_entry *e)
{
    struct fc_entry *es = fc_reallocarray(src->entries, src->nentries + 1, sizeof(*es));
    if (es == NULL) {
        fc_free((void *)(uintptr_t)e->key);
        for (size_t j = 0; j < e->path_len; j++)
            fc_free((void *)(uintptr_t)e->path[j].key);
        fc_free((void *)(uintptr_t)e->path);
        return fc_error_set(FC_ENOMEM, "%s: out of memory", src->path);
    }
    src->entries = es;
    src->entries[src->nentries++] = *e;
    if (e->kind == FC_ENTRY_TENSOR && e->storage != SIZE_MAX)
        src->storages[e->storage].nrefs++;
    /* Keys must stay findable while the source grows (duplicate checks). */
    const int put = fc_strmap_put(&src->key_index, e->key, src->nentries - 1, NULL);
    return put < 0 ? put : FC_OK;
}

int fc_source_index_keys(struct fc_source *src)
{
    fc_strmap_release(&src->key_index);
    for (size_t i = 0; i < src->nentries; i++) {
        const int put = fc_strmap_put(&src->key_index, src->entries[i].key, i, NULL);
        FC_TRY(put);
        if (put == 1)
            return fc_error_set(FC_ECORRUPT, "%s: duplicated key '%s'", src->path,
                                src->entries[i].key);
    }
    return FC_OK;
}

long fc_source_find(const struct fc_source *src, const char *key)
{
    size_t i;
    return fc_strmap_get(&src->key_index, key, &i) ? (long)i : -1;
}

static int fc_cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The names of the probed directory but dot files, sorted; listed on first use. */
int fc_probe_names(struct fc_probe *p)
{
    if (p->listed)
        return FC_OK;
    DIR *d = opendir(p->path);
    if (d == NULL)
        return fc_error_set(FC_EIO, "%s: cannot open directory: %s", p->path, strerror(errno));
    int rc = FC_OK;
    const struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        char **nn = fc_reallocarray(p->names, p->nnames + 1, sizeof(*nn));
        if (nn == NULL || (nn[p->nnames] = fc_strdup(de->d_name)) == NULL) {
            p->names = nn != NULL ? nn : p->names;
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory", p->path);
            break;
        }
        p->names = nn;
        p->nnames++;
    }
    closedir(d);
    FC_TRY(rc);
    if (p->nnames > 1) /* names is NULL for an empty directory, which qsort does not accept */
        qsort(p->names, p->nnames, sizeof(*p->names), fc_cmp_str);
    p->listed = 1;
    return FC_OK;
}

/* The first bytes of the probed file and its size; read on first use. */
int fc_probe_head(struct fc_probe *p)
{
    if (p->head_read)
        return FC_OK;
    struct fc_file f = FC_FILE_INIT;
    FC_TRY(fc_file_open_read(&f, p->path));
    const size_t n = f.size < sizeof(p->head) ? (size_t)f.size : sizeof(p->head);
    const int rc = fc_file_pread(&f, p->head, n, 0);
    p->size = f.size;
    fc_file_close(&f);
    FC_TRY(rc);
    p->nhead = n;
    p->head_read = 1;
    return FC_OK;
}

void fc_probe_release(struct fc_probe *p)
{
    for (size_t i = 0; i < p->nnames; i++)
        fc_free(p->names[i]);
    fc_free(p->names);
}

int fc_opaque_describe(struct fc_buf *b, const struct fc_opaque *op)
{
    if (op->unreadable != NULL)
        FC_TRY(fc_buf_printf(b, "opaque (pickle not readable: %s)", op->unreadable));
    else
        FC_TRY(
            fc_buf_printf(b, "opaque %s (torch.load needs weights_only=False; globals", op->type));
    for (size_t i = 0; op->unreadable == NULL && i < op->nglobals; i++)
        FC_TRY(fc_buf_printf(b, "%s %s.%s", i > 0 ? "," : "", op->globals[i]->u.global.module,
                             op->globals[i]->u.global.name));
    if (op->unreadable == NULL)
        FC_TRY(fc_buf_putc(b, ')'));
    return fc_buf_putc(b, '\0');
}
