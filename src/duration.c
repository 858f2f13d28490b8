#include "duration.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

/*
 * Parses DURATION, as lockrun and lockrunctl take it: a decimal number,
 * a fraction allowed, then at most one unit letter, s (the default), m,
 * h or d ("90", "30s", "1.5m", "2h", "7d"). No sign, space, exponent,
 * hex, infinity or NaN, so a typo is an error rather than a surprise.
 * False past max_s seconds.
 */
bool lr_duration_parse(const char *s, double max_s, double *out_s)
{
	static const struct {
		char unit;
		double secs;
	} units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};
	const char *p = s;
	char *end;
	double d;
	size_t i;

	while (*p >= '0' && *p <= '9')
		p++;
	if (p == s || (*p == '.' && !(p[1] >= '0' && p[1] <= '9')))
		return false;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			;
	errno = 0;
	d = strtod(s, &end);
	if (errno || end != p || !isfinite(d))
		return false;
	if (*p) {
		for (i = 0; i < sizeof(units) / sizeof(units[0]) && units[i].unit != *p; i++)
			;
		if (i == sizeof(units) / sizeof(units[0]) || p[1])
			return false;
		d *= units[i].secs;
	}
	if (d > max_s)
		return false;
	*out_s = d;
	return true;
}

/* "3m12s", or "3m" when the smaller unit is zero. */
static void two(char *buf, size_t len, unsigned long long a, char ua, unsigned long long b, char ub)
{
	if (b)
		snprintf(buf, len, "%llu%c%llu%c", a, ua, b, ub);
	else
		snprintf(buf, len, "%llu%c", a, ua);
}

/*
 * secs for people, two units at most: "0.4s" (tenths below a second only),
 * "12s", "3m12s", "5h3m",
 * "2d4h". Negative values are shown as their magnitude (callers say
 * "ago" themselves). Returns buf.
 */
const char *lr_duration_format(double secs, char *buf, size_t len)
{
	unsigned long long s;

	secs = fabs(secs);
	if (secs < 0.95) {
		snprintf(buf, len, "%.1fs", secs);
		return buf;
	}
	s = lr_duration_round(secs);
	if (s < 60)
		snprintf(buf, len, "%llus", s);
	else if (s < 3600)
		two(buf, len, s / 60, 'm', s % 60, 's');
	else if (s < 86400)
		two(buf, len, s / 3600, 'h', s % 3600 / 60, 'm');
	else
		two(buf, len, s / 86400, 'd', s % 86400 / 3600, 'h');
	return buf;
}

/*
 * The nearest whole number to x >= 0 (halves up), and the least one not
 * below it: libm's llround and ceil, which would map libm into every
 * lockrun (0.3 MiB of its resident memory) for these two alone.
 */
unsigned long long lr_duration_round(double x)
{
	return (unsigned long long)(x + 0.5);
}

unsigned long long lr_duration_ceil(double x)
{
	unsigned long long n = (unsigned long long)x;

	return (double)n < x ? n + 1 : n;
}
