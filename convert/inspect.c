/*
 * inspect.c - open a checkpoint, select keys, checksum tensors.
 */
#include <regex.h>
#include <string.h>

#include <openssl/evp.h>

#include "fc_alloc.h"
#include "fc_convert.h"
#include "fc_error.h"

/* Checksums read at most this many bytes at a time, so memory stays flat. */
#define FC_INSPECT_SLAB ((uint64_t)64 << 20)

int fc_tensor_sha256(const struct fc_source *src, const struct fc_entry *e, char hex_out[65])
{
    const struct fc_tensor_desc *t = &e->t;
    const size_t esz = fc_dtype_size(t->dtype);
    int64_t off[FC_MAX_DIMS] = { 0 }, size[FC_MAX_DIMS];
    int64_t row_elems = 1;
    unsigned char digest[32];
    unsigned char *buf = NULL;
    int rc = FC_OK;
    EVP_MD_CTX *md = EVP_MD_CTX_new();
    if (md == NULL || EVP_DigestInit_ex(md, EVP_sha256(), NULL) != 1) {
        rc = fc_error_set(FC_ENOMEM, "%s: cannot initialise SHA-256", src->path);
        goto done;
    }
    memcpy(size, t->shape, sizeof(size));
    for (int d = 1; d < t->ndim; d++)
        row_elems *= t->shape[d];
    const uint64_t row_bytes = (uint64_t)row_elems * esz;
    const int64_t rows = t->ndim == 0 ? 1 : t->shape[0];
    int64_t step = rows;
    if (t->ndim > 0 && row_bytes > 0 && (uint64_t)rows * row_bytes > FC_INSPECT_SLAB)
        step = (int64_t)(FC_INSPECT_SLAB / row_bytes) > 0 ? (int64_t)(FC_INSPECT_SLAB / row_bytes)
                                                          : 1;
    const uint64_t cap = t->ndim == 0 ? esz : (uint64_t)step * row_bytes;
    if (row_bytes > 0 || t->ndim == 0) {
        buf = fc_malloc((size_t)cap);
        if (buf == NULL) {
            rc = fc_error_set(FC_ENOMEM, "%s: out of memory checksumming '%s'", src->path, e->key);
            goto done;
        }
    }
    for (int64_t r = 0; buf != NULL && r < rows; r += step) {
        const int64_t n = rows - r < step ? rows - r : step;
        if (t->ndim > 0) {
            off[0] = r;
            size[0] = n;
        }
        FC_TRY_GOTO(fc_source_read_box(src, e, off, size, buf), rc, done);
        const size_t nbytes = t->ndim == 0 ? esz : (size_t)((uint64_t)n * row_bytes);
        if (EVP_DigestUpdate(md, buf, nbytes) != 1) {
            rc = fc_error_set(FC_ERROR, "%s: SHA-256 update failed", src->path);
            goto done;
        }
    }
    if (EVP_DigestFinal_ex(md, digest, NULL) != 1) {
        rc = fc_error_set(FC_ERROR, "%s: SHA-256 final failed", src->path);
        goto done;
    }
    for (int i = 0; i < 32; i++) {
        static const char hex[] = "0123456789abcdef";
        hex_out[2 * i] = hex[digest[i] >> 4];
        hex_out[2 * i + 1] = hex[digest[i] & 15];
    }
    hex_out[64] = '\0';
done:
    fc_free(buf);
    EVP_MD_CTX_free(md);
    return rc;
}

void fc_inspect_result_release(struct fc_inspect_result *r)
{
    fc_source_free(r->src);
    fc_free(r->selected);
    fc_free(r->sha256);
    fc_free(r->coverage_report);
    for (size_t i = 0; i < r->nfiles; i++)
        fc_free(r->files[i]);
    fc_free(r->files);
    fc_free(r->file_bytes);
    memset(r, 0, sizeof(*r));
}

int fc_inspect(const struct fc_inspect_opts *opts, struct fc_inspect_result *r)
{
    regex_t re;
    int have_re = 0;
    int rc = FC_OK;
    memset(r, 0, sizeof(*r));
    if (opts->key_regex != NULL) {
        if (regcomp(&re, opts->key_regex, REG_EXTENDED | REG_NOSUB) != 0)
            return fc_error_set(FC_EINVAL, "invalid regular expression for --key: '%s'",
                                opts->key_regex);
        have_re = 1;
    }
    FC_TRY_GOTO(fc_source_open(&r->src, opts->path), rc, done);
    r->format = r->src->format;
    r->selected = fc_calloc(r->src->nentries, sizeof(*r->selected));
    r->sha256 = fc_calloc(r->src->nentries, sizeof(*r->sha256));
    if (r->selected == NULL || r->sha256 == NULL) {
        rc = fc_error_set(FC_ENOMEM, "%s: out of memory", opts->path);
        goto done;
    }
    for (size_t i = 0; i < r->src->nentries; i++) {
        const struct fc_entry *e = &r->src->entries[i];
        if (have_re && regexec(&re, e->key, 0, NULL, 0) != 0)
            continue;
        if (opts->checksum && e->kind == FC_ENTRY_TENSOR)
            FC_TRY_GOTO(fc_tensor_sha256(r->src, e, r->sha256[r->nselected]), rc, done);
        r->selected[r->nselected++] = i;
    }
done:
    if (have_re)
        regfree(&re);
    if (rc < 0)
        fc_inspect_result_release(r);
    return rc;
}
