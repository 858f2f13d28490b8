/*
 * lockrun's command line. Parsing stops at the first non-option or "--",
 * so the command's own flags are never looked at. lr_cli_bad_option()
 * words what getopt refused, for lockrunctl's command line too.
 *
 * May use: config, duration, exitcodes, item.
 */
#ifndef LR_CLI_H
#define LR_CLI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <getopt.h>

#include "item.h"

struct lr_cli {
	struct lr_item *items;
	size_t nitems;
	const char *id;     /* --id KEY */
	const char *config; /* -c FILE */
	bool nonblock;
	double wait; /* seconds; < 0 unset */
	double ttl;  /* seconds; < 0 unset */
	double kill_after;
	int conflict_exit;    /* < 0 unset */
	int on_lost;          /* < 0 unset, else enum lr_on_lost */
	int local_queue;      /* < 0 unset, else 0 or 1 */
	int done_exit;        /* --done-exit-code; < 0 unset */
	uint64_t once_per_ms; /* --once-per; 0 unset */
	uint64_t once_offset_ms;
	bool once_offset_set;
	uint64_t min_hold_ms; /* --min-hold; 0 unset */
	int verbosity;        /* 0 normal, < 0 quiet, > 0 verbose */
	bool log_json;        /* --log-format=json */
	bool help;
	bool version;
	char **command; /* NULL-terminated, inside argv */
};

/* The longest --once-per window (366 days: a yearly run, leap years too),
 * and the longest --min-hold (a day). */
#define LR_ONCE_MAX_S     (366.0 * 86400)
#define LR_MIN_HOLD_MAX_S 86400.0

void lr_cli_init(struct lr_cli *cli);
void lr_cli_finish(struct lr_cli *cli);
bool lr_cli_parse(struct lr_cli *cli, int argc, char **argv, char *err, size_t errlen);
void lr_cli_usage(FILE *out);
void lr_cli_bad_option(const struct option *opts, char **argv, int at, int c, char *err,
                       size_t errlen);

#endif
