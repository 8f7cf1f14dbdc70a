/*
 * fc_regex.h - the regular expressions of every key option (--rename,
 * --drop, --copy, --key, ...), on PCRE2 so patterns copied from Python's
 * `re`, torchtitan or Megatron (\d, (?:...), (?P<name>...)) mean what they
 * meant there.
 *
 * A pattern matches anywhere in a key unless anchored (^...$), like re.search.
 * Replacements expand \0..\9 (group text; an unset group is empty),
 * \g<name> and \g<N> (named or numbered group) and \\ (a backslash); any other
 * byte is literal.  Only the first match is replaced (re.sub with count=1).
 *
 * Every pattern runs under limits (fc_regex.c: pattern length, compiled size,
 * and per match PCRE2's step, depth and heap limits), so a rule can neither
 * hang nor exhaust memory; a match that hits one fails with FC_EINVAL and a
 * message naming the rule ("<where>: regular expression '<p>' on key '<k>':
 * match limit exceeded ...").
 */
#ifndef FC_REGEX_H
#define FC_REGEX_H

#include <stddef.h>

struct fc_regex; /* opaque; compiled once, then read-only (safe to share between threads) */

/*
 * fc_regex_compile() - compile pattern; `where` names the rule for messages
 * ("--rename", "rules.txt:3").  Returns FC_OK, FC_EINVAL ("<where>: invalid
 * regular expression '<pattern>': <reason> at offset N"), FC_ENOMEM.
 */
int fc_regex_compile(struct fc_regex **out, const char *pattern, const char *where);
void fc_regex_free(struct fc_regex *re); /* accepts NULL */

/* The pattern and the rule (`where`) re was compiled from, for messages. */
const char *fc_regex_pattern(const struct fc_regex *re);
const char *fc_regex_where(const struct fc_regex *re);

/*
 * fc_regex_search() - 1 when re matches somewhere in s, 0 when not, or a
 * negative fc_err (a limit hit, or s is not UTF-8) whose message names the rule.
 */
int fc_regex_search(const struct fc_regex *re, const char *s);

/*
 * fc_regex_check_repl() - FC_EINVAL when repl names a group re does not have
 * ("\3" with two groups, "\g<nope>"); the message starts with `where`.
 */
int fc_regex_check_repl(const struct fc_regex *re, const char *repl, const char *where);

/*
 * fc_regex_unused_group() - the one capture group of re that repl does not
 * name (a stack's index: the group that differs between the keys stacked
 * into one tensor).  FC_EINVAL starting with `where` when repl names a group
 * re lacks, or when no group or more than one is left out.
 */
int fc_regex_unused_group(const struct fc_regex *re, const char *repl, const char *where,
                          int *group);

/*
 * fc_regex_group_text() - 1 and the text of group `group` of re's first
 * match in s (empty when the group is unset) in *out, 0 (and *out NULL) when
 * re does not match, or a negative fc_err.
 */
int fc_regex_group_text(const struct fc_regex *re, const char *s, int group, char **out);

/*
 * fc_regex_subst() - replace the first match of re in s by repl.  Returns 1
 * and a new string in *out, 0 (and *out NULL) when nothing matches, or a
 * negative fc_err.
 */
int fc_regex_subst(const struct fc_regex *re, const char *repl, const char *s, char **out);

#endif
