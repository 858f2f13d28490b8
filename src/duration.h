/*
 * Durations as people write them, on lockrun's and lockrunctl's command
 * lines and in the configuration file alike: a decimal number with an
 * optional unit, s (the default), m, h or d: "30", "30s", "1.5m", "2h",
 * "7d". And back, for output: "3m12s", "0.4s", "2d4h".
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_DURATION_H
#define LR_DURATION_H

#include <stdbool.h>
#include <stddef.h>

bool lr_duration_parse(const char *s, double max_s, double *out_s);
bool lr_duration_arg(const char *what, const char *v, double lo, double hi, double *out_s,
                     char *err, size_t errlen);
const char *lr_duration_format(double secs, char *buf, size_t len);
unsigned long long lr_duration_round(double x);
unsigned long long lr_duration_ceil(double x);

#endif
