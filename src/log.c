#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static const char *prog_name = "lockrun";
static enum lr_log_level cur_level = LR_LOG_NORMAL;
static char status_line[256]; /* shown on a terminal; "" when none */

void lr_log_init(const char *prog, enum lr_log_level level)
{
	prog_name = prog;
	cur_level = level;
}

enum lr_log_level lr_log_level(void)
{
	return cur_level;
}

/* One message is one fprintf of a whole line, so lines of concurrent
 * processes sharing a stderr do not interleave mid-line. */
static void emit(enum lr_log_level need, const char *tag, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

static void emit(enum lr_log_level need, const char *tag, const char *fmt, va_list ap)
{
	char msg[2048];

	if (cur_level < need)
		return;
	if (status_line[0]) {
		fputs("\r\033[K", stderr);
		status_line[0] = '\0';
	}
	vsnprintf(msg, sizeof(msg), fmt, ap);
	fprintf(stderr, "%s: %s%s\n", prog_name, tag, msg);
}

/* A live status line for -v on a terminal, rewritten in place when it
 * changes; NULL clears it. Elsewhere (a log file, a pipe) it prints
 * nothing: the one-off messages say what a log needs. */
void lr_log_status(const char *line)
{
	if (cur_level < LR_LOG_VERBOSE || !isatty(STDERR_FILENO))
		return;
	if (!line) {
		if (status_line[0])
			fputs("\r\033[K", stderr);
		status_line[0] = '\0';
		return;
	}
	if (strcmp(line, status_line) == 0)
		return;
	snprintf(status_line, sizeof(status_line), "%s", line);
	fprintf(stderr, "\r\033[K%s: %s", prog_name, status_line);
	fflush(stderr);
}

void lr_log_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_QUIET, "", fmt, ap);
	va_end(ap);
}

void lr_log_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_NORMAL, "warning: ", fmt, ap);
	va_end(ap);
}

void lr_log_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_VERBOSE, "", fmt, ap);
	va_end(ap);
}

void lr_log_debug(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_DEBUG, "debug: ", fmt, ap);
	va_end(ap);
}
