/*
 * cancel.c - the interrupt flag: set from a signal handler (async-signal-safe:
 * one sig_atomic_t store), polled by the executors between slabs, so Ctrl-C or
 * SIGTERM stops a conversion at the next slab and the usual failure path
 * removes the partial output.
 */
#include <signal.h>

#include "fc_convert.h"

static volatile sig_atomic_t fc_cancel_flag;

void fc_request_cancel(void)
{
    fc_cancel_flag = 1;
}

int fc_cancel_requested(void)
{
    return fc_cancel_flag != 0;
}
