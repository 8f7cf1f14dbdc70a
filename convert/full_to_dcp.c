/*
 * full_to_dcp.c - the write job that full-to-dcp and reshard share (see
 * write_job.h): open the inputs, run the rules, plan every item, hand the
 * plan to the executor with the output format's sink (dcp_sink.c or
 * st_sink.c), then commit the staged directory atomically.  reshard.c holds
 * only what sets reshard apart.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "comm.h"
#include "exec.h"
#include "fc_kernels.h"
#include "fc_alloc.h"
#include "fc_convert.h"
#include "fc_dcp.h"
#include "fc_error.h"
#include "fc_io.h"
#include "fc_strmap.h"
#include "fc_torchsave.h"
#include "hf.h"
#include "keys.h"
#include "dcp_sink.h"
#include "plan.h"
#include "share.h"
#include "st_sink.h"
#include "tcp_sink.h"
#include "stream.h"
#include "tp.h"
#include "write_job.h"
#include "xform.h"

#define FC_PLAN_TEXT_CAP ((size_t)1 << 30)

void fc_full_to_dcp_result_release(struct fc_full_to_dcp_result *res)
{
    fc_free(res->plan_text);
    for (size_t i = 0; i < res->nnotes; i++)
        fc_free(res->notes[i]);
    fc_free(res->notes);
    memset(res, 0, sizeof(*res));
}

/* Everything owned by one conversion, released in one place. */
struct fc_job {
    struct fc_source **srcs; /* the inputs, in command-line order */
    size_t nsrcs;
    struct fc_source *src;       /* the first input (its format decides compression) */
    struct fc_source *optim_src; /* --optim FILE, when it is not the input itself */
    struct fc_xform_rules rules;
    struct fc_xform_result xr;
    int *tp_dims;  /* per spec: the dim its tp plan rule shards, -1 replicated (NULL: no tp) */
    int *tp_ruled; /* per spec: a tp rule matched it (NULL: no tp) */
    struct fc_plan *plan; /* its tensors' tags: their index in xr.specs */
    struct fc_extent *extents;
    struct fc_dcp_sink dcp; /* --format dcp: value blobs, compression */
    struct fc_st_sink st;   /* --format safetensors: per-file headers */
    struct fc_tcp_sink tcp; /* --format torch-checkpointing: per-file headers, metadata.pkl */
    struct fc_stage out;
    int reported; /* a worker's failure went to rank 0, which reports the job */
};

static void fc_job_release(struct fc_job *j)
{
    for (size_t i = 0; i < j->nsrcs; i++)
        fc_source_free(j->srcs[i]);
    fc_free(j->srcs);
    fc_source_free(j->optim_src);
    fc_xform_rules_release(&j->rules);
    fc_xform_result_release(&j->xr);
    fc_free(j->tp_dims);
    fc_free(j->tp_ruled);
    fc_plan_free(j->plan);
    fc_free(j->extents);
    fc_dcp_sink_release(&j->dcp);
    fc_st_sink_release(&j->st);
    fc_tcp_sink_release(&j->tcp);
    fc_stage_release(&j->out);
}

/* The CRC-32 checks that the reads left partial (chunks read in parts: fc_source_verify_rest()). */
static int fc_verify_inputs(const struct fc_job *j)
{
    for (size_t i = 0; i < j->nsrcs; i++)
        FC_TRY(fc_source_verify_rest(j->srcs[i]));
    return fc_source_verify_rest(j->optim_src);
}

/* Open every input and run the rules over all of them. */
static int fc_open_inputs(const struct fc_full_to_dcp_opts *o, const struct fc_job_kind *kind,
                          struct fc_job *j)
{
    const struct fc_input_arg one = {NULL, o->input};
    const struct fc_input_arg *args = o->ninputs > 0 ? o->inputs : &one;
    const size_t n = o->ninputs > 0 ? o->ninputs : 1;
    struct fc_xform_input *in = fc_calloc(n, sizeof(*in));
    j->srcs = fc_calloc(n, sizeof(*j->srcs));
    int rc = FC_OK;
    if (in == NULL || j->srcs == NULL) {
        fc_free(in);
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    for (size_t i = 0; i < n && rc == FC_OK; i++) {
        rc = fc_source_open(&j->srcs[i], args[i].path, o->source_flags);
        if (rc < 0)
            break;
        j->nsrcs++;
        in[i] = (struct fc_xform_input){j->srcs[i], args[i].prefix};
        if (kind->check_input != NULL)
            rc = kind->check_input(args[i].path, j->srcs[i]);
    }
    j->src = j->srcs[0];
    if (rc == FC_OK)
        rc = fc_xform_apply_inputs(in, n, &j->rules, &j->xr);
    if (rc == FC_OK)
        rc = fc_keys_check(&j->xr, in, n, &j->rules);
    fc_free(in);
    return rc;
}

/*
 * The key of the parameter an optimizer state key belongs to, in the layouts
 * get_state_dict gives (checkpoints read back by reshard):
 * "[P.]optim.state.<fqn>.<name>" or "[P.]optimizer.state.<fqn>.<name>".  Its
 * parameter is "[P.]model.<fqn>" where the checkpoint has that key (torch's
 * {"model", "optim"} dict, torchtitan, the tutorial's AppState), so tp rules
 * see the same key for a parameter and its state; else the bare <fqn>.  A new
 * string in *out; NULL when `key` is no optimizer state key.
 */
static int fc_tp_state_param(const char *key, const struct fc_strmap *keys, char **out)
{
    static const char *const marks[] = {"optim.state.", "optimizer.state."};
    *out = NULL;
    for (size_t m = 0; m < sizeof(marks) / sizeof(marks[0]); m++) {
        const char *at = strstr(key, marks[m]);
        if (at == NULL || (at != key && at[-1] != '.'))
            continue;
        const char *fqn = at + strlen(marks[m]);
        const char *dot = strrchr(fqn, '.');
        if (dot == NULL || dot == fqn)
            return FC_OK;
        const size_t np = (size_t)(at - key), nf = (size_t)(dot - fqn);
        char *param = fc_malloc(np + 6 + nf + 1);
        if (param == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        memcpy(param, key, np);
        memcpy(param + np, "model.", 6);
        memcpy(param + np + 6, fqn, nf);
        param[np + 6 + nf] = '\0';
        size_t unused;
        if (!fc_strmap_get(keys, param, &unused))
            memmove(param, param + np + 6, nf + 1);
        *out = param;
        return FC_OK;
    }
    return FC_OK;
}

/*
 * The tp dim of every spec from --tp / --tp-plan (optimizer state follows its
 * parameter's key: the spec it was built from, or the FQN in its DCP key),
 * into a new array *out, and into *ruled whether a rule matched it (its module
 * is tensor-parallel); both NULL when the mesh has no tp dim.
 */
static int fc_tp_dims(const struct fc_full_to_dcp_opts *o, const struct fc_xform_result *xr,
                      int **out, int **ruled)
{
    struct fc_tp_plan tp = FC_TP_PLAN_INIT;
    struct fc_strmap keys = FC_STRMAP_INIT;
    int rc = FC_OK;
    *out = NULL;
    *ruled = NULL;
    if (o->tp <= 1) {
        if (o->ntp_rules > 0 || o->tp_plan != NULL)
            return fc_error_set(FC_EINVAL, "--tp and --tp-plan need a mesh with a tp dim "
                                           "(--mesh shard=S,tp=T)");
        return FC_OK;
    }
    if (o->tp_plan != NULL)
        FC_TRY_GOTO(fc_tp_plan_load(&tp, o->tp_plan), rc, done);
    for (size_t i = 0; i < o->ntp_rules; i++)
        FC_TRY_GOTO(fc_tp_plan_add(&tp, o->tp_rules[i], "--tp"), rc, done);
    int *dims = fc_calloc(xr->n + 1, sizeof(*dims));
    if (dims != NULL)
        *out = dims;
    *ruled = dims != NULL ? fc_calloc(xr->n + 1, sizeof(**ruled)) : NULL;
    if (*ruled == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    for (size_t i = 0; i < xr->n; i++)
        if (fc_strmap_put(&keys, xr->specs[i].key, i, NULL) < 0) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
    for (size_t i = 0; i < xr->n; i++) {
        const struct fc_xspec *s = &xr->specs[i];
        const struct fc_xspec *ps = s->param_of >= 0 ? &xr->specs[s->param_of] : s;
        dims[i] = -1;
        if (s->kind != FC_ENTRY_TENSOR)
            continue;
        char *fqn = NULL;
        if (ps == s)
            FC_TRY_GOTO(fc_tp_state_param(s->key, &keys, &fqn), rc, done);
        /* 0-d optimizer state (step) is stored whole */
        if (s->ndim > 0 || (ps == s && fqn == NULL))
            rc = fc_tp_plan_dim(&tp, fqn != NULL ? fqn : ps->key, s->ndim, &dims[i]);
        fc_free(fqn);
        if (rc < 0)
            goto done;
        (*ruled)[i] = rc == 1;
        rc = FC_OK;
        if (dims[i] >= 0 && s->replicate) {
            rc = fc_error_set(FC_EINVAL,
                              "'%s' is stored whole (--replicate) but a tp rule "
                              "shards its dim %d",
                              s->key, dims[i]);
            goto done;
        }
    }
    rc = fc_tp_plan_check_used(&tp);
done:
    fc_strmap_release(&keys);
    fc_tp_plan_release(&tp);
    return rc;
}

/* The rules of the command line, in its order (--rules FILE runs its lines where it stands). */
static int fc_job_rules(const struct fc_full_to_dcp_opts *o, struct fc_job *j)
{
    for (size_t i = 0; i < o->nrules; i++) {
        char where[64];
        if (strcmp(o->rules[i].op, "rules") == 0) {
            FC_TRY(fc_xform_rules_load(&j->rules, o->rules[i].arg));
            continue;
        }
        snprintf(where, sizeof(where), "--%s", o->rules[i].op);
        FC_TRY(fc_xform_rules_add(&j->rules, o->rules[i].op, o->rules[i].arg, where));
    }
    return FC_OK;
}

/* --optim / --optim-select / --layout: add the optimizer state's entries to the specs. */
static int fc_job_optim(const struct fc_full_to_dcp_opts *o, struct fc_job *j)
{
    if (o->optim == NULL && o->optim_select == NULL && o->layout == FC_LAYOUT_NONE)
        return FC_OK;
    if (fc_xform_rules_have(&j->rules, FC_RULE_ADD_PREFIX))
        return fc_error_set(FC_EINVAL, "--layout and --optim set the key prefixes; drop "
                                       "--add-prefix");
    const struct fc_source *os = NULL;
    if (o->optim != NULL) {
        FC_TRY(fc_source_open(&j->optim_src, o->optim, o->source_flags));
        os = j->optim_src;
    } else if (o->optim_select != NULL) {
        os = j->src;
    }
    return fc_xform_add_optimizer(&j->xr, &j->rules, os, o->optim_select,
                                  (enum fc_layout)o->layout);
}

/* The plan tensor made from spec `spec` (tin is in spec order, so tags ascend); -1: none. */
static int64_t fc_tensor_of_spec(const struct fc_plan_tensor_in *tin, size_t nt, size_t spec)
{
    size_t lo = 0, hi = nt;
    while (lo < hi) {
        const size_t mid = lo + (hi - lo) / 2;
        if (tin[mid].tag < spec)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < nt && tin[lo].tag == spec ? (int64_t)lo : -1;
}

/*
 * The planner's inputs from the specs, in spec order: tensors into tin (each
 * tagged with its spec), values into vin with their bytes in the DCP sink.
 */
static int fc_plan_inputs(const struct fc_full_to_dcp_opts *o, struct fc_job *j,
                          struct fc_plan_tensor_in *tin, size_t *nt, struct fc_plan_value_in *vin,
                          size_t *nv)
{
    const int st = o->format != FC_OUT_DCP; /* per-rank safetensors files */
    for (size_t i = 0; i < j->xr.n; i++) {
        const struct fc_xspec *s = &j->xr.specs[i];
        if (s->kind == FC_ENTRY_VALUE && o->format == FC_OUT_TORCH_CHECKPOINTING &&
            strncmp(s->key, "optimizer.param_groups.", 23) == 0) {
            FC_TRY(fc_tcp_sink_add_group_value(&j->tcp, s)); /* the optimizer item's */
            continue;
        }
        if (s->kind == FC_ENTRY_VALUE && st)
            return fc_error_set(FC_EFORMAT,
                                "'%s' is a non-tensor value, which %s; leave it out with --drop "
                                "or use --format dcp",
                                s->key,
                                o->format == FC_OUT_SAFETENSORS
                                    ? "safetensors cannot store"
                                    : "fsdpconv's torch-checkpointing output does not hold");
        if (s->kind == FC_ENTRY_VALUE) {
            vin[*nv].key = s->key;
            FC_TRY(fc_dcp_sink_add_value(&j->dcp, s, &vin[*nv].blob_size));
            ++*nv;
            continue;
        }
        struct fc_plan_tensor_in *t = &tin[*nt];
        t->key = s->key;
        t->dtype = s->dtype;
        t->ndim = s->ndim;
        memcpy(t->shape, s->shape, sizeof(t->shape));
        t->placement = s->ndim == 0 || s->replicate ? FC_PLACE_REPLICATE : FC_PLACE_SHARD0;
        t->tp_dim = j->tp_dims != NULL ? j->tp_dims[i] : -1;
        /* Safetensors cannot share bytes between names: a tied tensor is stored again. */
        t->alias_of =
            s->alias_of >= 0 && !st ? fc_tensor_of_spec(tin, *nt, (size_t)s->alias_of) : -1;
        t->tag = i;
        ++*nt;
    }
    return FC_OK;
}

/* --compress / --decompress / default: keep the input's compression (DCP inputs). */
static int fc_compress_level(const struct fc_full_to_dcp_opts *o, const struct fc_source *src)
{
    if (o->format != FC_OUT_DCP)
        return 0;
    if (o->compress >= 0)
        return o->compress;
    if (fc_source_is_compressed(src))
        return 3;
    return 0;
}

/* Open the inputs, run the rules and plan every item into j->plan, for either output format. */
static int fc_plan_job(const struct fc_full_to_dcp_opts *o, const struct fc_job_kind *kind,
                       struct fc_job *j)
{
    const int st = o->format != FC_OUT_DCP; /* per-rank safetensors files */
    if (o->format != FC_OUT_TORCH_CHECKPOINTING &&
        (o->mesh_device || o->mesh_dim_names || o->tcp_layout || o->torch_version))
        return fc_error_set(FC_EINVAL, "%s: only --format torch-checkpointing takes it",
                            o->mesh_device      ? "--mesh-device"
                            : o->mesh_dim_names ? "--mesh-dim-names"
                            : o->tcp_layout     ? "--tcp-layout"
                                                : "--torch-version");
    if (o->format == FC_OUT_TORCH_CHECKPOINTING && o->tcp_layout != NULL &&
        strcmp(o->tcp_layout, "safetensors") == 0 && (o->optim != NULL || o->optim_select != NULL))
        return fc_error_set(FC_EINVAL, "--optim: optimizer state holds non-tensor values "
                                       "(param_groups) that the safetensors layout cannot store; "
                                       "use --tcp-layout pt");
    if (o->format == FC_OUT_SAFETENSORS && (o->optim != NULL || o->optim_select != NULL))
        return fc_error_set(FC_EINVAL, "--optim: optimizer state holds non-tensor values "
                                       "(param_groups) that safetensors cannot store; use "
                                       "--format dcp");
    if (st && o->compress > 0)
        return fc_error_set(FC_EINVAL, "--compress: safetensors files are not compressed; use "
                                       "--format dcp");
    if (st && o->rank_local)
        return fc_error_set(FC_EINVAL, "--metadata rank-local: safetensors files carry their own "
                                       "headers; use --format dcp");
    FC_TRY(fc_job_rules(o, j));
    FC_TRY(fc_open_inputs(o, kind, j));
    FC_TRY(fc_job_optim(o, j));
    FC_TRY(fc_tp_dims(o, &j->xr, &j->tp_dims, &j->tp_ruled));
    const size_t n = j->xr.n;
    struct fc_plan_tensor_in *tin = fc_calloc(n + 1, sizeof(*tin));
    struct fc_plan_value_in *vin = fc_calloc(n + 1, sizeof(*vin));
    size_t nt = 0, nv = 0;
    struct fc_mesh mesh;
    int rc = FC_OK;
    if (tin == NULL || vin == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    FC_TRY_GOTO(fc_dcp_sink_init(&j->dcp, n, fc_compress_level(o, j->src)), rc, done);
    FC_TRY_GOTO(fc_plan_inputs(o, j, tin, &nt, vin, &nv), rc, done);
    FC_TRY_GOTO(fc_mesh_init(&mesh, o->replicate, o->shard, o->tp > 0 ? o->tp : 1), rc, done);
    if (!st) {
        FC_TRY_GOTO(
            fc_plan_build(&j->plan, &mesh, tin, nt, vin, nv, fc_dcp_sink_item_size, &j->dcp), rc,
            done);
        rc = fc_dcp_sink_layout(&j->dcp, j->plan);
        goto done;
    }
    FC_TRY_GOTO(fc_plan_build(&j->plan, &mesh, tin, nt, NULL, 0, fc_st_sink_item_size, NULL), rc,
                done);
    rc = o->format == FC_OUT_TORCH_CHECKPOINTING
             ? fc_tcp_sink_layout(&j->tcp, j->plan, j->tp_ruled, o->mesh_device, o->mesh_dim_names,
                                  o->tcp_layout, o->torch_version)
             : fc_st_sink_layout(&j->st, j->plan);
done:
    fc_free(tin);
    fc_free(vin);
    return rc;
}

static int fc_copy_notes(const struct fc_xform_result *xr, struct fc_full_to_dcp_result *res)
{
    if (xr->nnotes == 0)
        return FC_OK;
    res->notes = fc_calloc(xr->nnotes, sizeof(*res->notes));
    if (res->notes == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    for (size_t i = 0; i < xr->nnotes; i++) {
        res->notes[i] = fc_strdup(xr->notes[i]);
        if (res->notes[i] == NULL)
            return fc_error_set(FC_ENOMEM, "out of memory");
        res->nnotes++;
    }
    return FC_OK;
}

/* Safetensors files carry their own headers; a DCP exists once its metadata (.metadata, or
 * every __{r}.metadata) does, a torch_checkpointing checkpoint once its metadata.pkl does:
 * written into dir last, after every rank file is durable. */
static int fc_write_metadata(const struct fc_full_to_dcp_opts *o, const struct fc_job *j,
                             const char *dir)
{
    if (o->format == FC_OUT_TORCH_CHECKPOINTING)
        return fc_tcp_sink_write_metadata(&j->tcp, j->plan, dir);
    if (o->format != FC_OUT_DCP)
        return FC_OK;
    return fc_dcp_sink_write_metadata(&j->dcp, j->plan, &j->xr, j->extents, dir, o->output,
                                      o->rank_local);
}

/*
 * What makes two runs the same job: the inputs (names, sizes, mtimes), the
 * options that change bytes, the rules, the whole plan and the value blobs.
 * Shares started anywhere agree on it without talking (share.h).
 */
static int fc_job_hash(const struct fc_full_to_dcp_opts *o, struct fc_job *j, uint64_t *out)
{
    struct fc_buf id = FC_BUF_INIT(FC_PLAN_TEXT_CAP);
    const struct fc_input_arg one = {NULL, o->input};
    const struct fc_input_arg *args = o->ninputs > 0 ? o->inputs : &one;
    const size_t n = o->ninputs > 0 ? o->ninputs : 1;
    const struct fc_sink sink = fc_dcp_sink_sink(&j->dcp);
    int rc = fc_buf_printf(&id, "fsdpconv job 1\nformat %d compress %d metadata %d layout %d\n",
                           (int)o->format, j->dcp.compress_level, o->rank_local, o->layout);
    for (size_t i = 0; i < n && rc == FC_OK; i++) {
        rc = fc_buf_printf(&id, "input %s=\n", args[i].prefix != NULL ? args[i].prefix : "");
        if (rc == FC_OK)
            rc = fc_share_add_path(&id, args[i].path);
    }
    if (rc == FC_OK && o->optim != NULL) {
        rc = fc_buf_puts(&id, "optim\n");
        if (rc == FC_OK)
            rc = fc_share_add_path(&id, o->optim);
    }
    if (rc == FC_OK && o->optim_select != NULL)
        rc = fc_buf_printf(&id, "optim-select %s\n", o->optim_select);
    if (rc == FC_OK && o->format == FC_OUT_TORCH_CHECKPOINTING)
        rc = fc_buf_printf(&id, "mesh %s %s %s %s\n", o->mesh_device != NULL ? o->mesh_device : "-",
                           o->mesh_dim_names != NULL ? o->mesh_dim_names : "-",
                           o->tcp_layout != NULL ? o->tcp_layout : "-",
                           o->torch_version != NULL ? o->torch_version : "-");
    if (rc == FC_OK)
        rc = fc_xform_rules_describe(&j->rules, &id);
    if (rc == FC_OK)
        rc = fc_plan_describe(j->plan, &id);
    for (size_t v = 0; o->format == FC_OUT_DCP && v < j->plan->nvalues && rc == FC_OK; v++) {
        const struct fc_buf *b = sink.ops->value_bytes(sink.ctx, v);
        rc = fc_buf_append(&id, b->data, b->len);
    }
    if (rc == FC_OK)
        rc = fc_share_hash(id.data, id.len, out);
    fc_buf_release(&id);
    return rc;
}

/*
 * One share of the job (--part K/N, --nproc, launchers; share.h), then the
 * commit where this process does it: rank 0 once every rank reported, or a
 * run of its own (part -1).  A failed multi-process job leaves no staging:
 * every rank has reported (or died) before rank 0 removes it.
 */
static int fc_run_share(const struct fc_full_to_dcp_opts *o, struct fc_job *j, struct fc_exec *ex,
                        struct fc_full_to_dcp_result *res)
{
    struct fc_share sh;
    uint64_t hash = 0;
    int began = 0;
    memset(&sh, 0, sizeof(sh));
    sh.lock_fd = -1;
    int rc = fc_job_hash(o, j, &hash);
    if (rc == FC_OK)
        rc = fc_share_begin(&sh, o->output, o->force, hash, o->part, o->nparts, ex);
    began = rc == FC_OK;
    ex->dir = sh.stage.path;
    if (rc == FC_OK && o->part >= 0 && !sh.resumed) {
        fc_cancel_polled(); /* files appear in the staging dir from here on */
        rc = fc_exec_run(ex);
        if (rc == FC_OK)
            rc = fc_verify_inputs(j); /* what reads left partial, before the share counts */
        if (rc == FC_OK)
            rc = fc_share_record(&sh, ex);
        if (rc < 0)
            fc_share_discard(&sh, ex);
    }
    res->resumed = sh.resumed;
    /* The share's lock goes before its status: the commit takes every share's lock. */
    if (sh.lock_fd >= 0)
        close(sh.lock_fd);
    sh.lock_fd = -1;
    if (o->comm != NULL && fc_comm_rank(o->comm) != 0) {
        /* Rank 0 reports the job; a worker speaks only when rank 0 cannot (it is gone). */
        const int sent = fc_comm_report(o->comm, rc);
        const int outcome = sent == FC_OK ? fc_comm_await(o->comm) : sent;
        j->reported = sent == FC_OK && outcome != FC_EIO;
        if (rc == FC_OK)
            rc = outcome;
    } else if (o->comm != NULL || o->part < 0) {
        if (o->comm != NULL) {
            const int all = fc_comm_gather(o->comm);
            if (rc == FC_OK)
                rc = all;
        }
        if (rc == FC_OK)
            rc = fc_share_collect(&sh, ex);
        if (rc == FC_OK)
            rc = fc_write_metadata(o, j, sh.stage.path);
        if (rc == FC_OK)
            rc = fc_share_seal(&sh);
        if (rc == FC_OK)
            rc = fc_stage_commit(&sh.stage);
        if (rc < 0 && o->comm != NULL && began)
            (void)fc_remove_tree(sh.stage.path);
        fc_comm_done(o->comm, rc == FC_OK);
    }
    fc_share_release(&sh);
    return rc;
}

int fc_write_job_run(const struct fc_full_to_dcp_opts *o, const struct fc_job_kind *kind,
                     struct fc_full_to_dcp_result *res)
{
    struct fc_job j;
    int rc;
    fc_engine engine;
    memset(&j, 0, sizeof(j));
    memset(res, 0, sizeof(*res));
    /* --engine cuda without a usable GPU fails before anything is read or written. */
    FC_TRY(fc_engine_resolve((fc_engine)o->engine, &engine));
    /* The output is checked (and its partial made) before any input is read; shares check it
     * when they know their job's staging directory (fc_run_share). */
    if (!o->dry_run && o->nparts == 0) {
        fc_cancel_hold();
        rc = fc_stage_begin(&j.out, o->output, 1, o->force, fc_cancel_requested);
        fc_cancel_staged(rc == FC_OK ? j.out.path : NULL);
        fc_cancel_release();
        if (rc < 0)
            goto done;
    }
    FC_TRY_GOTO(fc_plan_job(o, kind, &j), rc, done);
    FC_TRY_GOTO(fc_copy_notes(&j.xr, res), rc, done);
    if (kind->hf_notes)
        FC_TRY_GOTO(fc_hf_tie_note(o, &j.xr, res), rc, done);
    res->nfiles = j.plan->nfiles;
    res->ntensors = j.plan->ntensors;
    res->nvalues = j.plan->nvalues;
    if (o->dry_run) {
        struct fc_buf text = FC_BUF_INIT(FC_PLAN_TEXT_CAP);
        rc = j.rules.n > 0 ? fc_xform_rules_describe(&j.rules, &text) : FC_OK;
        if (rc == FC_OK)
            rc = fc_plan_describe(j.plan, &text);
        if (rc == FC_OK)
            rc = fc_buf_putc(&text, '\0');
        if (rc < 0) {
            fc_buf_release(&text);
            goto done;
        }
        res->plan_text = (char *)fc_buf_detach(&text, NULL);
        goto done;
    }
    if (j.dcp.compress_level > 0) {
        j.extents = fc_calloc(j.plan->nitems + 1, sizeof(*j.extents));
        if (j.extents == NULL) {
            rc = fc_error_set(FC_ENOMEM, "out of memory");
            goto done;
        }
    }
    if (o->part >= 0) {
        /* Mean fill rows of --resize-rows: one pass over the rows they average, before writing. */
        struct fc_slabs slabs;
        memset(&slabs, 0, sizeof(slabs));
        rc = fc_stream_fill_means(&j.xr, o->max_memory, &slabs);
        fc_slabs_release(&slabs);
        if (rc < 0)
            goto done;
    }
    struct fc_exec ex = {
        .plan = j.plan,
        .src = j.src,
        .xr = &j.xr,
        .sink = o->format == FC_OUT_SAFETENSORS           ? fc_st_sink_sink(&j.st)
                : o->format == FC_OUT_TORCH_CHECKPOINTING ? fc_tcp_sink_sink(&j.tcp)
                                                          : fc_dcp_sink_sink(&j.dcp),
        .dir = j.out.path,
        .max_memory = o->max_memory,
        .threads = o->threads,
        .progress = o->progress,
        .progress_ctx = o->progress_ctx,
        .extents = j.extents,
        .engine = engine,
        .device = fc_local_rank(0),
        .comm = o->nparts == 0 ? o->comm : NULL,
        .part = o->part,
        .nparts = o->nparts,
    };
    if (o->nparts > 0) {
        FC_TRY_GOTO(fc_run_share(o, &j, &ex, res), rc, done);
    } else {
        fc_cancel_polled(); /* files appear in the staging dir from here on */
        FC_TRY_GOTO(fc_exec_run(&ex), rc, done);
        FC_TRY_GOTO(fc_verify_inputs(&j), rc, done);
        /* Every NCCL worker has fsynced its files before .metadata makes the checkpoint exist. */
        if (o->comm != NULL)
            FC_TRY_GOTO(fc_comm_finish(o->comm), rc, done);
        FC_TRY_GOTO(fc_write_metadata(o, &j, j.out.path), rc, done);
        FC_TRY_GOTO(fc_stage_commit(&j.out), rc, done);
    }
    {
        /* A --part run counts its own share; a committing run, the whole checkpoint. */
        const int whole = o->part < 0 || o->comm != NULL;
        res->nfiles = 0;
        for (size_t f = 0; f < j.plan->nfiles; f++) {
            if (!whole && !fc_exec_owns(&ex, f))
                continue;
            res->nfiles++;
            res->bytes_written += j.extents == NULL ? j.plan->files[f].nbytes : 0;
        }
        for (size_t i = 0; j.extents != NULL && i < j.plan->nitems; i++)
            if (whole || fc_exec_owns(&ex, (size_t)j.plan->items[i].rank))
                res->bytes_written += j.extents[i].length;
    }
done:
    if (rc < 0)
        fc_full_to_dcp_result_release(res);
    res->reported = j.reported;
    fc_job_release(&j);
    fc_cancel_staged(NULL);
    return rc;
}

int fc_full_to_dcp(const struct fc_full_to_dcp_opts *o, struct fc_full_to_dcp_result *res)
{
    static const struct fc_job_kind full = {NULL, 1};
    return fc_write_job_run(o, &full, res);
}
