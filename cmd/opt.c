/*
 * opt.c - the option-table parser and usage printer of opt.h, and the
 * checked value parsers: one description of each command's options gives
 * its parsing, its --help and (through --help) its man-page check.
 */
#define _GNU_SOURCE
#include "opt.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "fc_alloc.h"
#include "fc_dtype.h"
#include "fc_error.h"

/* Every command takes these; main.c takes them before the command name too. */
static const struct fc_opt fc_opt_common[] = {
    {'q', 'q', "quiet", NULL, 0, NULL, NULL,
     "print nothing but errors and results: no summary line"},
    {'v', 'v', "verbose", NULL, 0, NULL, NULL, "more diagnostics; repeat for more"},
    {'h', 'h', "help", NULL, 0, NULL, NULL, "show this help"},
    {0, 0, NULL, NULL, 0, NULL, NULL, NULL},
};

/* getopt_long() hands back FC_OPT_VAL_BASE + i for the i-th option of the flattened spec. */
enum { FC_OPT_VAL_BASE = 1000 };

#define FC_USAGE_WIDTH 100
#define FC_HELP_COLUMN 29

/*
 * A command's options in order: its tables with each FC_OPT_OP_RULES row
 * replaced by the op table's options of that scope (built into `made`), then
 * the common ones from index `ncmd` on.
 */
struct fc_opt_list {
    const struct fc_opt **opts;
    size_t n, ncmd;
    struct fc_opt *made;
};

/* The command's own table and the shared ones its row's flags name; the common ones are apart. */
#define FC_OPT_MAX_TABLES 5

/* The tables of spec in usage order, NULL-terminated. */
static void fc_opt_tables(const struct fc_cmd_spec *spec, const struct fc_opt **t)
{
    const unsigned flags = fc_cli_cmd != NULL ? fc_cli_cmd->flags : 0;
    size_t n = 0;
    if (flags & FC_CMD_JOB)
        t[n++] = fc_cli_job_target_opts;
    if (spec->opts != NULL)
        t[n++] = spec->opts;
    if (flags & FC_CMD_RULES)
        t[n++] = fc_cli_pipeline_opts;
    if (flags & FC_CMD_JOB)
        t[n++] = fc_cli_job_run_opts;
    if (flags & FC_CMD_READS_DCP)
        t[n++] = fc_cli_verify_opts;
    t[n] = NULL;
}

/* An op rule's option as an FC_OPT_RULE row. */
static struct fc_opt fc_opt_of_rule(const struct fc_rule_option *r)
{
    return (struct fc_opt){.name = r->name,
                           .value = r->value,
                           .flags = FC_OPT_RULE | FC_OPT_REPEAT,
                           .rule = r->name,
                           .check = r->check != NULL ? fc_opt_check_op : NULL,
                           .help = r->help};
}

/* Append what row o stands for: itself, or the op rules of its scope. */
static void fc_opt_expand(const struct fc_opt *o, struct fc_opt_list *out, size_t *nmade)
{
    if (!(o->flags & FC_OPT_OPS)) {
        out->opts[out->n++] = o;
        return;
    }
    const struct fc_rule_option *r;
    for (size_t i = 0; (r = fc_op_rule_option(i)) != NULL; i++)
        if ((int)r->scope == o->id) {
            out->made[*nmade] = fc_opt_of_rule(r);
            out->opts[out->n++] = &out->made[(*nmade)++];
        }
}

static int fc_opt_flatten(const struct fc_cmd_spec *spec, struct fc_opt_list *out)
{
    const struct fc_opt *tables[FC_OPT_MAX_TABLES + 1];
    size_t n = 0, nrules = 0, nmade = 0;
    fc_opt_tables(spec, tables);
    while (fc_op_rule_option(nrules) != NULL)
        nrules++;
    for (size_t t = 0; tables[t] != NULL; t++)
        for (const struct fc_opt *o = tables[t]; o->name != NULL; o++)
            n += o->flags & FC_OPT_OPS ? nrules : 1;
    for (const struct fc_opt *o = fc_opt_common; o->name != NULL; o++)
        n++;
    out->n = 0;
    out->opts = fc_calloc(n, sizeof(*out->opts));
    out->made = fc_calloc(n, sizeof(*out->made));
    if (out->opts == NULL || out->made == NULL) {
        fc_free(out->opts);
        fc_free(out->made);
        out->opts = NULL;
        out->made = NULL;
        return fc_error_set(FC_ENOMEM, "out of memory");
    }
    for (size_t t = 0; tables[t] != NULL; t++)
        for (const struct fc_opt *o = tables[t]; o->name != NULL; o++)
            fc_opt_expand(o, out, &nmade);
    out->ncmd = out->n;
    for (const struct fc_opt *o = fc_opt_common; o->name != NULL; o++)
        out->opts[out->n++] = o;
    return FC_OK;
}

static void fc_opt_list_release(struct fc_opt_list *l)
{
    fc_free(l->opts);
    fc_free(l->made);
}

static int fc_opt_add_rule(struct fc_cmdline *c, const char *op, const char *arg)
{
    struct fc_rule_arg *r = fc_reallocarray(c->rules, c->nrules + 1, sizeof(*r));
    if (r == NULL)
        return fc_error_set(FC_ENOMEM, "out of memory");
    r[c->nrules++] = (struct fc_rule_arg){op, arg};
    c->rules = r;
    return FC_OK;
}

static const struct fc_opt *fc_opt_find(const struct fc_opt_list *l, int val)
{
    if (val >= FC_OPT_VAL_BASE && (size_t)(val - FC_OPT_VAL_BASE) < l->n)
        return l->opts[val - FC_OPT_VAL_BASE];
    for (size_t i = 0; i < l->n; i++)
        if (l->opts[i]->short_name != 0 && l->opts[i]->short_name == val)
            return l->opts[i];
    return NULL;
}

static int fc_opt_take(const struct fc_cmd_spec *spec, const struct fc_opt *o, const char *value,
                       fc_opt_fn fn, void *ctx, struct fc_cmdline *out)
{
    char optname[64];
    snprintf(optname, sizeof(optname), "--%s", o->name);
    if (o->flags & FC_OPT_RULE) {
        if (o->check != NULL)
            FC_TRY(o->check(optname, value));
        return fc_opt_add_rule(out, o->rule, value);
    }
    switch (o->id) {
    case 'q': fc_cli_verbosity = -1; return FC_OK;
    case 'v': fc_cli_verbosity++; return FC_OK;
    case 'h': fc_opt_usage(spec, stdout); return FC_OPT_HELP;
    default: return fn(ctx, o->id, value);
    }
}

static int fc_opt_operands(const struct fc_cmd_spec *spec, struct fc_cmdline *out)
{
    if (out->noperands < spec->min_operands) {
        const struct fc_operand *missing = &spec->operands[0];
        for (int i = 0; i < out->noperands && missing[1].name != NULL; i++)
            missing++;
        return fc_cli_usage("missing %s", missing->name);
    }
    if (spec->max_operands >= 0 && out->noperands > spec->max_operands)
        return fc_cli_usage("too many arguments: '%s'", out->operands[spec->max_operands]);
    return FC_OK;
}

int fc_opt_parse(const struct fc_cmd_spec *spec, int argc, char **argv, fc_opt_fn fn, void *ctx,
                 struct fc_cmdline *out)
{
    struct fc_opt_list l = {NULL, 0, 0, NULL};
    struct option *longopts = NULL;
    char *shortopts = NULL;
    int rc, c;
    memset(out, 0, sizeof(*out));
    FC_TRY_GOTO(fc_opt_flatten(spec, &l), rc, done);
    longopts = fc_calloc(l.n + 1, sizeof(*longopts));
    shortopts = fc_calloc(2 * l.n + 2, 1);
    if (longopts == NULL || shortopts == NULL) {
        rc = fc_error_set(FC_ENOMEM, "out of memory");
        goto done;
    }
    /* A leading ':' makes getopt tell a missing value (':') from an unknown option ('?'). */
    size_t ns = 0;
    shortopts[ns++] = ':';
    for (size_t i = 0; i < l.n; i++) {
        const struct fc_opt *o = l.opts[i];
        longopts[i] = (struct option){o->name, o->value != NULL ? required_argument : no_argument,
                                      NULL, FC_OPT_VAL_BASE + (int)i};
        if (o->short_name != 0) {
            shortopts[ns++] = o->short_name;
            if (o->value != NULL)
                shortopts[ns++] = ':';
        }
    }
    optind = 0;
    opterr = 0;
    rc = FC_OK;
    while (rc == FC_OK && (c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        char shortbuf[3];
        const struct fc_opt *o;
        switch (c) {
        case '?':
            if (optopt != 0 && optopt < FC_OPT_VAL_BASE) {
                snprintf(shortbuf, sizeof(shortbuf), "-%c", optopt);
                rc = fc_cli_usage("unknown option '%s'", shortbuf);
            } else {
                rc = fc_cli_usage("unknown option '%s'", argv[optind - 1]);
            }
            break;
        case ':':
            /* optopt is the letter for -c, our FC_OPT_VAL_BASE + i for --name. */
            o = fc_opt_find(&l, optopt);
            if (o == NULL)
                rc = fc_cli_usage("option '%s' requires a value", argv[optind - 1]);
            else if (optopt >= FC_OPT_VAL_BASE)
                rc = fc_cli_usage("option '--%s' requires a value %s", o->name, o->value);
            else
                rc = fc_cli_usage("option '-%c' requires a value %s", o->short_name, o->value);
            break;
        default:
            o = fc_opt_find(&l, c);
            rc = fc_opt_take(spec, o, optarg, fn, ctx, out);
            break;
        }
    }
    if (rc == FC_OK) {
        out->operands = argv + optind;
        out->noperands = argc - optind;
        rc = fc_opt_operands(spec, out);
    }
done:
    fc_free(shortopts);
    fc_free(longopts);
    fc_opt_list_release(&l);
    if (rc != FC_OK)
        fc_cmdline_release(out);
    return rc;
}

void fc_cmdline_release(struct fc_cmdline *c)
{
    fc_free(c->rules);
    memset(c, 0, sizeof(*c));
}

int fc_opt_unknown(int id)
{
    return fc_error_set(FC_ERROR, "option id %d has no handler", id);
}

/* ---- usage text ---- */

struct fc_usage_line {
    FILE *f;
    size_t col, indent; /* words after the first on a line are preceded by a space */
};

static void fc_usage_word(struct fc_usage_line *u, const char *w)
{
    const size_t len = strlen(w);
    if (u->col > u->indent && u->col + 1 + len > FC_USAGE_WIDTH) {
        fprintf(u->f, "\n%*s", (int)u->indent, "");
        u->col = u->indent;
    } else {
        fputc(' ', u->f);
        u->col++;
    }
    fputs(w, u->f);
    u->col += len;
}

/* "-o <dir>", "--mesh <m>", "--force" */
static void fc_opt_synopsis_item(const struct fc_opt *o, char *buf, size_t size)
{
    if (o->short_name != 0)
        snprintf(buf, size, "-%c%s%s", o->short_name, o->value != NULL ? " " : "",
                 o->value != NULL ? o->value : "");
    else
        snprintf(buf, size, "--%s%s%s", o->name, o->value != NULL ? " " : "",
                 o->value != NULL ? o->value : "");
}

static void fc_opt_synopsis(const struct fc_cmd_spec *spec, const struct fc_opt_list *l, FILE *f)
{
    char head[64];
    snprintf(head, sizeof(head), "usage: fsdpconv %s", spec->name);
    struct fc_usage_line u = {f, strlen(head), strlen(head) + 1};
    fputs(head, f);
    for (size_t i = 0; i < l->ncmd; i++) {
        const struct fc_opt *o = l->opts[i];
        char item[160], word[200];
        if (o->flags & FC_OPT_ONE_OF) {
            /* "(--a <x> | --b <y>)": the group is the run of entries with FC_OPT_ONE_OF. */
            size_t len = 0;
            word[len++] = '(';
            for (;; o = l->opts[++i]) {
                const int more = i + 1 < l->ncmd && (l->opts[i + 1]->flags & FC_OPT_ONE_OF);
                fc_opt_synopsis_item(o, item, sizeof(item));
                len += (size_t)snprintf(word + len, sizeof(word) - len, "%s%s", item,
                                        more ? " | " : ")");
                if (len >= sizeof(word) || !more)
                    break;
            }
            fc_usage_word(&u, word);
            continue;
        }
        fc_opt_synopsis_item(o, item, sizeof(item));
        if (o->flags & FC_OPT_REQUIRED)
            snprintf(word, sizeof(word), "%s", item);
        else
            snprintf(word, sizeof(word), "[%s]%s", item, o->flags & FC_OPT_REPEAT ? "..." : "");
        fc_usage_word(&u, word);
    }
    for (const struct fc_operand *op = spec->operands; op != NULL && op->name != NULL; op++)
        fc_usage_word(&u, op->name);
    fputc('\n', f);
}

/* "    <left>  help" with help at FC_HELP_COLUMN; '\n' in help continues aligned. */
static void fc_usage_entry(FILE *f, const char *left, const char *help)
{
    const int pad = FC_HELP_COLUMN - 4 - (int)strlen(left);
    if (pad >= 1)
        fprintf(f, "    %s%*s", left, pad, "");
    else
        fprintf(f, "    %s\n%*s", left, FC_HELP_COLUMN, "");
    for (const char *p = help; *p != '\0'; p++) {
        fputc(*p, f);
        if (*p == '\n')
            fprintf(f, "%*s", FC_HELP_COLUMN, "");
    }
    fputc('\n', f);
}

void fc_opt_usage(const struct fc_cmd_spec *spec, FILE *f)
{
    struct fc_opt_list l = {NULL, 0, 0, NULL};
    if (fc_opt_flatten(spec, &l) < 0)
        return;
    fc_opt_synopsis(spec, &l, f);
    fputc('\n', f);
    for (const struct fc_operand *op = spec->operands; op != NULL && op->name != NULL; op++)
        fc_usage_entry(f, op->name, op->help);
    for (size_t i = 0; i < l.n; i++) {
        const struct fc_opt *o = l.opts[i];
        {
            char left[160];
            if (o->short_name != 0)
                snprintf(left, sizeof(left), "-%c, --%s%s%s", o->short_name, o->name,
                         o->value != NULL ? " " : "", o->value != NULL ? o->value : "");
            else
                snprintf(left, sizeof(left), "--%s%s%s", o->name, o->value != NULL ? " " : "",
                         o->value != NULL ? o->value : "");
            fc_usage_entry(f, left, o->help);
        }
    }
    fc_opt_list_release(&l);
    if (spec->epilog != NULL)
        fprintf(f, "\n%s", spec->epilog);
}

/* ---- value parsers ---- */

static int fc_opt_bad(const char *opt, const char *s, const char *why)
{
    return fc_cli_usage("invalid value for %s: '%s' (%s)", opt, s, why);
}

int fc_opt_int(const char *opt, const char *s, long min, long max, long *out)
{
    char *end = NULL;
    errno = 0;
    const long v = strtol(s, &end, 10);
    if (s[0] == '\0' || end == NULL || *end != '\0' || errno != 0)
        return fc_opt_bad(opt, s, "not an integer");
    if (v < min || v > max) {
        char why[96];
        snprintf(why, sizeof(why), "must be between %ld and %ld", min, max);
        if (max == 2147483647L)
            snprintf(why, sizeof(why), "must be >= %ld", min);
        return fc_opt_bad(opt, s, why);
    }
    *out = v;
    return 0;
}

/*
 * Sizes as users mean them: "5GB" is 5e9 bytes, as Hugging Face reads
 * max_shard_size, while "5GiB" and the bare "5G" (ulimit, dd) are 5 * 2^30.
 */
int fc_opt_size(const char *opt, const char *s, uint64_t min, uint64_t *out)
{
    static const char letters[] = "KMGT";
    char *end = NULL;
    errno = 0;
    const double v = strtod(s, &end);
    if (s[0] == '\0' || end == s || errno != 0 || !(v >= 0))
        return fc_opt_bad(opt, s, "expected a size such as 512M or 2GiB");
    double mul = 1;
    if (*end != '\0') {
        const char *letter = strchr(letters, toupper((unsigned char)*end));
        if (letter == NULL)
            return fc_opt_bad(opt, s, FC_OPT_SIZE_SUFFIXES);
        end++;
        const int decimal = strcmp(end, "B") == 0 || strcmp(end, "b") == 0;
        if (!decimal && *end != '\0' && strcmp(end, "iB") != 0)
            return fc_opt_bad(opt, s, FC_OPT_SIZE_SUFFIXES);
        for (const char *l = letters; l <= letter; l++)
            mul *= decimal ? 1000.0 : 1024.0;
    }
    const double bytes = v * mul;
    if (bytes > 1.8e19)
        return fc_opt_bad(opt, s, "too large");
    if ((uint64_t)bytes < min) {
        char why[64];
        if (min % 1024 == 0)
            snprintf(why, sizeof(why), "must be at least %" PRIu64 "KiB", min / 1024);
        else
            snprintf(why, sizeof(why), "must be at least %" PRIu64, min);
        return fc_opt_bad(opt, s, why);
    }
    *out = (uint64_t)bytes;
    return 0;
}

/* 4 KiB: below a page, a slab could not hold a row of any real tensor. */
int fc_opt_max_memory(const char *s, uint64_t *out)
{
    return fc_opt_size("--max-memory", s, 4096, out);
}

int fc_opt_check_op(const char *opt, const char *s)
{
    const struct fc_rule_option *r;
    for (size_t i = 0; (r = fc_op_rule_option(i)) != NULL; i++) {
        const char *why = strcmp(r->name, opt + 2) == 0 && r->check != NULL ? r->check(s) : NULL;
        if (why != NULL)
            return fc_opt_bad(opt, s, why);
    }
    return 0;
}

int fc_opt_mesh(const char *opt, const char *s, int *replicate, int *shard, int *tp)
{
    static const char expect[] = "expected [replicate=R,]shard=S[,tp=T]";
    long r = -1, sh = -1, t = -1;
    const char *p = s;
    while (*p != '\0') {
        const char *eq = strchr(p, '=');
        if (eq == NULL)
            return fc_opt_bad(opt, s, expect);
        const char *comma = strchr(eq, ',');
        const size_t vlen = comma != NULL ? (size_t)(comma - eq - 1) : strlen(eq + 1);
        char val[32];
        if (vlen == 0 || vlen >= sizeof(val))
            return fc_opt_bad(opt, s, expect);
        memcpy(val, eq + 1, vlen);
        val[vlen] = '\0';
        char *end = NULL;
        errno = 0;
        const long v = strtol(val, &end, 10);
        if (*end != '\0' || errno != 0 || v < 1 || v > 1000000)
            return fc_opt_bad(opt, s, "mesh sizes must be integers >= 1");
        long *dst = NULL;
        if ((size_t)(eq - p) == 9 && strncmp(p, "replicate", 9) == 0)
            dst = &r;
        else if ((size_t)(eq - p) == 5 && strncmp(p, "shard", 5) == 0)
            dst = &sh;
        else if ((size_t)(eq - p) == 2 && strncmp(p, "tp", 2) == 0)
            dst = &t;
        else
            return fc_opt_bad(opt, s, "unknown mesh dimension; expected replicate, shard, tp");
        if (*dst != -1)
            return fc_opt_bad(opt, s, "a mesh dimension is given twice");
        *dst = v;
        p = comma != NULL ? comma + 1 : eq + 1 + vlen;
    }
    if (sh < 1)
        return fc_opt_bad(opt, s, expect);
    *replicate = r < 1 ? 1 : (int)r;
    *shard = (int)sh;
    *tp = t < 1 ? 1 : (int)t;
    return 0;
}

int fc_opt_compress(const char *opt, const char *s, int *level)
{
    long v = 3;
    if (strncmp(s, "zstd", 4) != 0 || (s[4] != '\0' && s[4] != ':'))
        return fc_opt_bad(opt, s, "expected zstd or zstd:<level>");
    if (s[4] == ':') {
        char *end = NULL;
        errno = 0;
        v = strtol(s + 5, &end, 10);
        if (s[5] == '\0' || *end != '\0' || errno != 0 || v < 1 || v > 22)
            return fc_opt_bad(opt, s, "zstd level must be between 1 and 22");
    }
    *level = (int)v;
    return 0;
}

int fc_opt_engine(const char *opt, const char *s, int *engine)
{
    if (strcmp(s, "auto") == 0)
        *engine = 0;
    else if (strcmp(s, "cpu") == 0)
        *engine = 1;
    else if (strcmp(s, "cuda") == 0)
        *engine = 2;
    else
        return fc_opt_bad(opt, s, "expected cpu, cuda or auto");
    return 0;
}

int fc_opt_output(const char *s, const char **out)
{
    if (s[0] == '\0')
        return fc_opt_bad("-o", s, "an empty name names no file");
    *out = s;
    return 0;
}

int fc_opt_choice(const char *opt, const char *s, const char *const *names, int n, int *out)
{
    char why[160];
    size_t len = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(s, names[i]) == 0) {
            *out = i;
            return 0;
        }
    }
    len += (size_t)snprintf(why, sizeof(why), "expected");
    for (int i = 0; i < n && len < sizeof(why); i++)
        len += (size_t)snprintf(why + len, sizeof(why) - len, "%s%s",
                                i == 0       ? " "
                                : i == n - 1 ? " or "
                                             : ", ",
                                names[i]);
    return fc_opt_bad(opt, s, why);
}
