#include "duration.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/*
 * Parses DURATION into whole seconds: digits, then at most one unit
 * letter. Nothing else is accepted (no sign, no space, no fraction), so
 * a typo is an error rather than a surprise. False past max_s.
 */
bool lr_duration_parse(const char *s, unsigned long long max_s, unsigned long long *out_s)
{
	unsigned long long v = 0, unit = 1;
	const char *p = s;

	if (*p < '0' || *p > '9')
		return false;
	for (; *p >= '0' && *p <= '9'; p++) {
		if (v > max_s)
			return false;
		v = v * 10 + (unsigned)(*p - '0');
	}
	switch (*p) {
	case '\0':
	case 's':
		break;
	case 'm':
		unit = 60;
		break;
	case 'h':
		unit = 3600;
		break;
	case 'd':
		unit = 86400;
		break;
	default:
		return false;
	}
	if (*p && p[1])
		return false;
	if (v > max_s / unit)
		return false;
	*out_s = v * unit;
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
	s = (unsigned long long)llround(secs);
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
