/*
 * opt.h - one option table per command (libgit2's cli_opt_spec, git's
 * parse-options), and checked parsers for option values.
 *
 * A command describes itself once, in a struct fc_cmd_spec: its operands and
 * a few tables of struct fc_opt (its own, then shared ones such as the job
 * options of full-to-dcp and reshard).  From that one description come:
 *   - the getopt_long table (fc_opt_parse builds it),
 *   - the usage text (fc_opt_usage: synopsis and option list),
 *   - the man-page check (tests/setup/check_man.sh compares each page with
 *     the option list of `<command> --help`, which is the table).
 * Options that are transform rules (FC_OPT_RULE) are collected by the parser
 * itself, in command-line order, into one growable list.  The options of the
 * rules that append an op are not written here: a FC_OPT_OP_RULES(scope) row
 * stands for those of convert's op table (fc_op_rule_option) with that
 * scope, so a new op needs no line in cmd/.  -q/--quiet, -v/--verbose and
 * -h/--help belong to every command.
 *
 * Messages: a usage error is one line "fsdpconv: <cmd>: <what>" followed by
 * "see 'fsdpconv help <cmd>'"; the value parsers below print that themselves
 * and return -1.
 */
#ifndef FC_OPT_H
#define FC_OPT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "fc_convert.h"

enum fc_opt_flags {
    FC_OPT_REQUIRED = 1u << 0, /* synopsis shows it bare, not in [ ] (the command checks it) */
    FC_OPT_ONE_OF = 1u << 1,   /* with the next entries that have it: "(a | b)" in the synopsis */
    FC_OPT_REPEAT = 1u << 2,   /* may be given several times: "[...]..." in the synopsis */
    FC_OPT_RULE = 1u << 3,     /* a transform rule: collected into fc_cmdline.rules as `rule` */
    FC_OPT_OPS = 1u << 4       /* FC_OPT_OP_RULES: the op table's options of scope `id` */
};

struct fc_opt {
    int id;            /* handed to the command's callback: the short letter, or >= 256 */
    char short_name;   /* 'o' for -o, or 0 */
    const char *name;  /* long name without "--"; NULL ends a table */
    const char *value; /* placeholder such as "<dir>", or NULL when the option takes no value */
    unsigned flags;    /* enum fc_opt_flags */
    const char *rule;  /* FC_OPT_RULE: the op name recorded with the value */
    /* FC_OPT_RULE: validate the value before it is recorded (prints, returns -1), or NULL. */
    int (*check)(const char *cmd, const char *opt, const char *value);
    const char *help; /* usage text; '\n' continues on the next line, aligned */
};

/* Here: the options of the op table's rules of this enum fc_rule_scope, in the table's order. */
/* clang-format off */
#define FC_OPT_OP_RULES(scope) {(scope), 0, "", NULL, FC_OPT_OPS, NULL, NULL, NULL}
/* clang-format on */

struct fc_operand {
    const char *name; /* "<input>"; a trailing "..." in the synopsis when repeatable */
    const char *help;
};

#define FC_OPT_MAX_TABLES 5

struct fc_cmd_spec {
    const char *name;
    const struct fc_operand *operands;              /* NULL-named entry ends the list */
    int min_operands, max_operands;                 /* max -1: unlimited */
    const struct fc_opt *tables[FC_OPT_MAX_TABLES]; /* NULL ends; shown in this order */
    const char *epilog;                             /* printed after the option list, or NULL */
};

/* What fc_opt_parse() collected besides the callback's options.  Owned by the caller. */
struct fc_cmdline {
    struct fc_rule_arg *rules; /* FC_OPT_RULE options in command-line order */
    size_t nrules;
    char **operands; /* borrowed from argv */
    int noperands;
};

/*
 * Called once per option that is not a rule and not common (-q -v -h), in
 * command-line order, with value NULL for flags.  Returns 0, or -1 after
 * printing a usage error (fc_cli_usage_error or an fc_opt_* parser).
 */
typedef int (*fc_opt_fn)(void *ctx, int id, const char *value);

/*
 * fc_opt_parse() - parse argv (argv[0] is the command name) against spec.
 * Returns -1 when the command should go on (out filled; release it with
 * fc_cmdline_release), or an exit status to return at once: 0 after --help,
 * 2 after a usage error (already printed), 1 when out of memory.
 */
int fc_opt_parse(const struct fc_cmd_spec *spec, int argc, char **argv, fc_opt_fn fn, void *ctx,
                 struct fc_cmdline *out);
void fc_cmdline_release(struct fc_cmdline *c);

/* The usage text of spec: synopsis, operands, options, epilog. */
void fc_opt_usage(const struct fc_cmd_spec *spec, FILE *f);

/* ---- checked parsers for option values ---- */

/* Integer in [min, max]. */
int fc_opt_int(const char *cmd, const char *opt, const char *s, long min, long max, long *out);
/* Size >= min with optional suffix: 512, 64K, 2M, 1G, 2GiB, 1.5GB (powers of 1024). */
int fc_opt_size(const char *cmd, const char *opt, const char *s, uint64_t min, uint64_t *out);
/* FC_OPT_RULE check of an op rule's option ("--dtype"): its check in the op table. */
int fc_opt_check_op(const char *cmd, const char *opt, const char *s);
/* "[replicate=R,]shard=S[,tp=T]" (any order; each >= 1; R and T default to 1). */
int fc_opt_mesh(const char *cmd, const char *opt, const char *s, int *replicate, int *shard,
                int *tp);
/* "zstd" or "zstd:<level>" (1..22; default 3) -> *level. */
int fc_opt_compress(const char *cmd, const char *opt, const char *s, int *level);
/* "cpu", "cuda" or "auto" -> 1, 2, 0 (enum fc_engine). */
int fc_opt_engine(const char *cmd, const char *opt, const char *s, int *engine);
/* One of names[0..n) -> its index. */
/* -o PATH: any name but the empty one, which names no file (a usage error before any work). */
int fc_opt_output(const char *cmd, const char *s, const char **out);
int fc_opt_choice(const char *cmd, const char *opt, const char *s, const char *const *names, int n,
                  int *out);

#endif
