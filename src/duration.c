#include "duration.h"

#include <math.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

static const struct {
	char unit;
	double secs;
} units[] = {{'s', 1}, {'m', 60}, {'h', 3600}, {'d', 86400}};

/*
 * The syntax of DURATION: a decimal number, a fraction allowed (".5" and
 * "5." as well, as sleep(1) takes them), then at most one unit letter, s
 * (the default), m, h or d ("90", "30s", "1.5m", "2h", "7d"). No sign,
 * space, exponent, hex, infinity or NaN, so a typo is an error rather than
 * a surprise. Sets *out_s (infinite when too large for a double) and *unit
 * (the letter, 0 for none); no range check. No system calls.
 */
static bool parse(const char *s, double *out_s, char *unit)
{
	const char *p = s;
	char *end;
	double d;
	size_t i, digits = 0;

	for (; *p >= '0' && *p <= '9'; p++)
		digits++;
	if (*p == '.')
		for (p++; *p >= '0' && *p <= '9'; p++)
			digits++;
	if (!digits)
		return false;
	d = strtod(s, &end); /* ERANGE: HUGE_VAL, out of any range */
	if (end != p || isnan(d))
		return false;
	*unit = *p;
	if (*p) {
		for (i = 0; i < sizeof(units) / sizeof(units[0]) && units[i].unit != *p; i++)
			;
		if (i == sizeof(units) / sizeof(units[0]) || p[1])
			return false;
		d *= units[i].secs;
	}
	*out_s = d;
	return true;
}

/* Parses DURATION (see parse()): false if malformed or past max_s seconds. */
bool lr_duration_parse(const char *s, double max_s, double *out_s)
{
	double d;
	char unit;

	if (!parse(s, &d, &unit) || !(d <= max_s))
		return false;
	*out_s = d;
	return true;
}

/* A range's bound for a message: in the unit the value was written in
 * when it is whole there ("1d", "1440m"), else in seconds ("1s", "0.5s"). */
static void bound(char *buf, size_t len, double secs, char unit)
{
	double k = 1, u;
	size_t i, n;

	for (i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (units[i].unit == unit)
			k = units[i].secs;
	u = secs / k;
	if (u < 1e15 && (double)(unsigned long long)u == u) {
		snprintf(buf, len, "%llu%c", (unsigned long long)u, unit ? unit : 's');
		return;
	}
	snprintf(buf, len, "%.3f", secs);
	n = strlen(buf);
	while (n && buf[n - 1] == '0')
		n--;
	if (n && buf[n - 1] == '.')
		n--;
	snprintf(buf + n, len - n, "s");
}

/*
 * Parses the DURATION value v of the option or key what, within lo..hi
 * seconds. False with a one-line message in err that names what and v:
 * "WHAT: 'V' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d)", or
 * "WHAT: 'V' is out of range (1s to 1d)" with the bounds in the unit V was
 * written in where they are whole in it. No system calls.
 */
bool lr_duration_arg(const char *what, const char *v, double lo, double hi, double *out_s,
                     char *err, size_t errlen)
{
	char unit, a[48], b[48];
	double d;

	if (!parse(v, &d, &unit)) {
		snprintf(err, errlen, "%s: '%s' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d)",
		         what, v);
		return false;
	}
	if (!(d >= lo && d <= hi)) {
		bound(a, sizeof(a), lo, unit);
		bound(b, sizeof(b), hi, unit);
		snprintf(err, errlen, "%s: '%s' is out of range (%s to %s)", what, v, a, b);
		return false;
	}
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
