/*
 * opt.h - one option table per command (libgit2's cli_opt_spec, git's
 * parse-options), and checked parsers for option values.
 *
 * A command describes itself once, in a struct fc_cmd_spec: its operands and
 * its own table of struct fc_opt.  The shared tables its command-table row
 * asks for (enum fc_cmd_flags) join it in a fixed order: the job's target
 * options, the command's own, the transform rules, the job's run options,
 * --no-verify.  From that one description come:
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
 * Errors follow cli.h's one convention: the parser, the callbacks and the
 * value parsers return FC_OK or a negative code with the message set
 * (fc_cli_usage() for a bad command line) and print nothing.
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
    /* FC_OPT_RULE: validate the value before it is recorded (FC_OK or an error), or NULL. */
    int (*check)(const char *opt, const char *value);
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

struct fc_cmd_spec {
    const char *name;
    const struct fc_operand *operands; /* NULL-named entry ends the list */
    int min_operands, max_operands;    /* max -1: unlimited */
    const struct fc_opt *opts;         /* the command's own options, or NULL */
    const char *epilog;                /* printed after the option list, or NULL */
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
 * command-line order, with value NULL for flags.  Returns FC_OK, or a
 * negative code with the message set (fc_cli_usage() or an fc_opt_* parser).
 */
typedef int (*fc_opt_fn)(void *ctx, int id, const char *value);

/* fc_opt_parse() after --help: the usage is printed, the command is done (exit 0). */
#define FC_OPT_HELP 1

/*
 * fc_opt_parse() - parse argv (argv[0] is the command name) against spec and
 * the shared tables of the running command's row (fc_cli_cmd).  Returns
 * FC_OK when the command should go on (out filled; release it with
 * fc_cmdline_release), FC_OPT_HELP after --help, or a negative code
 * (FC_CLI_EUSAGE, FC_ENOMEM or a callback's) with the message set; out is
 * empty then.  Either way the caller returns fc_cli_report(rc).
 */
int fc_opt_parse(const struct fc_cmd_spec *spec, int argc, char **argv, fc_opt_fn fn, void *ctx,
                 struct fc_cmdline *out);
void fc_cmdline_release(struct fc_cmdline *c);

/* The usage text of spec: synopsis, operands, options, epilog. */
void fc_opt_usage(const struct fc_cmd_spec *spec, FILE *f);

/* An id that the callback does not handle: the table and the callback disagree (a bug). */
int fc_opt_unknown(int id);

/*
 * ---- checked parsers for option values ----
 * Each returns FC_OK, or FC_CLI_EUSAGE with the message "invalid value for
 * <opt>: '<s>' (<why>)".
 */

/* Integer in [min, max]. */
int fc_opt_int(const char *opt, const char *s, long min, long max, long *out);
/*
 * Size >= min in bytes, with an optional suffix: 512, 64K, 2M, 2GiB (powers of
 * 1024), 1.5GB, 5kB (powers of 1000).  Every size option reads it this way.
 */
int fc_opt_size(const char *opt, const char *s, uint64_t min, uint64_t *out);
/* Why a size's suffix is refused: the suffixes and what they mean. */
#define FC_OPT_SIZE_SUFFIXES                                                                       \
    "unknown size suffix; K, M, G, T, KiB, MiB, GiB, TiB are powers of 1024, KB, MB, GB, TB of "   \
    "1000"
/* --max-memory, which every command that moves tensor data takes (default FC_MAX_MEMORY_DEFAULT).
 */
#define FC_OPT_MAX_MEMORY_HELP                                                                     \
    "cap on data buffers (default 1GiB); a <size> is bytes,\n"                                     \
    "with K, M, G, T or KiB, MiB, GiB, TiB powers of 1024 and\n"                                   \
    "KB, MB, GB, TB powers of 1000 (5GB = 5e9, as Hugging Face)"
int fc_opt_max_memory(const char *s, uint64_t *out);
/* FC_OPT_RULE check of an op rule's option ("--dtype"): its check in the op table. */
int fc_opt_check_op(const char *opt, const char *s);
/* "[replicate=R,]shard=S[,tp=T]" (any order; each >= 1; R and T default to 1). */
int fc_opt_mesh(const char *opt, const char *s, int *replicate, int *shard, int *tp);
/* "zstd" or "zstd:<level>" (1..22; default 3) -> *level. */
int fc_opt_compress(const char *opt, const char *s, int *level);
/* "cpu", "cuda" or "auto" -> 1, 2, 0 (enum fc_engine). */
int fc_opt_engine(const char *opt, const char *s, int *engine);
/* -o PATH: any name but the empty one, which names no file (a usage error before any work). */
int fc_opt_output(const char *s, const char **out);
/* One of names[0..n) -> its index. */
int fc_opt_choice(const char *opt, const char *s, const char *const *names, int n, int *out);

#endif
