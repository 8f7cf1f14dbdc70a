/*
 * cancel.c - what Ctrl-C and SIGTERM do, set from the signal handler
 * (async-signal-safe: sig_atomic_t stores, rmdir/unlink, write, _exit).
 *
 * Before the first output byte is written (parsing, rule expansion, planning,
 * --dry-run, inspect, diff) nothing is polled, so a signal must act at once:
 * the handler removes the empty staging directory registered with
 * fc_cancel_staged(), says so and exits with status 1.  From
 * fc_cancel_polled() on, it only sets the flag that the executors poll
 * between slabs, so the usual failure path removes the partial output.
 */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "fc_convert.h"
#include "fc_io.h"

static volatile sig_atomic_t fc_cancel_flag;
static volatile sig_atomic_t fc_cancel_poll;
static volatile sig_atomic_t fc_cancel_have_stage;
static char fc_cancel_stage[4096];

void fc_request_cancel(void)
{
    if (fc_cancel_poll) {
        fc_cancel_flag = 1;
        return;
    }
    static const char msg[] = "fsdpconv: interrupted; nothing was written\n";
    if (fc_cancel_have_stage)
        (void)rmdir(fc_cancel_stage);
    (void)!write(STDERR_FILENO, msg, sizeof(msg) - 1);
    _exit(1);
}

int fc_cancel_requested(void)
{
    return fc_cancel_flag != 0;
}

void fc_cancel_staged(const char *dir)
{
    fc_cancel_have_stage = 0;
    if (dir == NULL || strlen(dir) >= sizeof(fc_cancel_stage))
        return; /* too long to keep: a partial left behind is removed by the next run */
    memcpy(fc_cancel_stage, dir, strlen(dir) + 1);
    fc_cancel_have_stage = 1;
}

void fc_cancel_polled(void)
{
    fc_cancel_poll = 1;
}

static sigset_t fc_cancel_old_mask;

void fc_cancel_hold(void)
{
    fc_hold_interrupts(&fc_cancel_old_mask);
}

void fc_cancel_release(void)
{
    fc_release_interrupts(&fc_cancel_old_mask);
}
