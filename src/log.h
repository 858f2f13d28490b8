/* Diagnostics on stderr, prefixed with the program name, or one JSON
 * object a line (--log-format=json).
 *
 * May use: strbuf, text.
 */
#ifndef LR_LOG_H
#define LR_LOG_H

#include <stdbool.h>

enum lr_log_level {
	LR_LOG_QUIET = 0, /* errors only */
	LR_LOG_NORMAL,    /* errors and warnings */
	LR_LOG_VERBOSE,   /* plus progress: acquired, renewed, released */
	LR_LOG_DEBUG,     /* plus every statement */
};

void lr_log_init(const char *prog, enum lr_log_level level);
void lr_log_set_json(bool on);
enum lr_log_level lr_log_level(void);
void lr_log_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lr_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lr_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lr_log_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void lr_log_status(const char *line);

#endif
