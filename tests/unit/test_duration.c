/* DURATION arguments: what is accepted, what is refused, and how
 * durations print. */
#include <stdlib.h>

#include "duration.h"
#include "tap.h"

static void accepts(const char *s, double want)
{
	double got = 12345;

	ok(lr_duration_parse(s, 100.0 * 365 * 86400, &got) && got == want, "'%s' is %g s (got %g)",
	   s, want, got);
}

static void refuses(const char *s)
{
	double got = 12345;

	ok(!lr_duration_parse(s, 100.0 * 365 * 86400, &got) && got == 12345, "'%s' is refused", s);
}

int main(void)
{
	char buf[32];

	accepts("0", 0);
	accepts("30", 30);
	accepts("30s", 30);
	accepts("5m", 300);
	accepts("2h", 7200);
	accepts("7d", 604800);
	accepts("36500d", 36500.0 * 86400);
	accepts("1.5m", 90);
	accepts("0.25", 0.25);
	accepts("1.5d", 1.5 * 86400);
	accepts(".5", 0.5);
	accepts("1.", 1);
	accepts("5.m", 300);
	refuses("");
	refuses("s");
	refuses("-1");
	refuses("+1");
	refuses(" 1");
	refuses("1 ");
	refuses(".");
	refuses(".s");
	refuses("1.5.");
	refuses("1e3");
	refuses("0x10");
	refuses("inf");
	refuses("nan");
	refuses("1w");
	refuses("1dd");
	refuses("1ms");
	refuses("36501d");
	refuses("99999999999999999999999");
	/* One message for every DURATION: the culprit, and the range in the
	 * unit it was written in where the bounds are whole there. */
	{
		char err[256];
		double d = 0;

		ok(lr_duration_arg("--ttl", "5m", 1, 86400, &d, err, sizeof(err)) && d == 300,
		   "--ttl 5m is 300 s");
		ok(!lr_duration_arg("--ttl", "2d", 1, 86400, &d, err, sizeof(err)), "--ttl 2d");
		is_str(err, "--ttl: '2d' is out of range (1s to 1d)", "days: %s", err);
		lr_duration_arg("--ttl", "100000", 1, 86400, &d, err, sizeof(err));
		is_str(err, "--ttl: '100000' is out of range (1s to 86400s)", "seconds: %s", err);
		lr_duration_arg("--wait", "400d", 0, 31536000, &d, err, sizeof(err));
		is_str(err, "--wait: '400d' is out of range (0d to 365d)", "no exponent: %s", err);
		lr_duration_arg("--wait", "9000h", 0, 31536000, &d, err, sizeof(err));
		is_str(err, "--wait: '9000h' is out of range (0h to 8760h)", "hours: %s", err);
		lr_duration_arg("ttl", "0.01m", 1, 86400, &d, err, sizeof(err));
		is_str(err, "ttl: '0.01m' is out of range (1s to 1440m)", "minutes: %s", err);
		lr_duration_arg("--since", "0", 0.001, 86400, &d, err, sizeof(err));
		is_str(err, "--since: '0' is out of range (0.001s to 86400s)", "a fraction: %s",
		       err);
		lr_duration_arg("--wait", "99999999999999999999999d", 0, 31536000, &d, err,
		                sizeof(err));
		ok(strstr(err, "out of range (0d to 365d)") != NULL, "huge: %s", err);
		ok(!lr_duration_arg("--ttl", "5x", 1, 86400, &d, err, sizeof(err)), "--ttl 5x");
		is_str(err, "--ttl: '5x' is not a duration (e.g. 90, 30s, 1.5m, 2h, 1d)", "%s",
		       err);
	}
	is_str(lr_duration_format(0.04, buf, sizeof(buf)), "0.0s", "tenths below a second");
	is_str(lr_duration_format(0.94, buf, sizeof(buf)), "0.9s", "0.94 s");
	is_str(lr_duration_format(1.4, buf, sizeof(buf)), "1s", "whole seconds from one");
	is_str(lr_duration_format(-12.2, buf, sizeof(buf)), "12s", "negative as its magnitude");
	is_str(lr_duration_format(192, buf, sizeof(buf)), "3m12s", "minutes and seconds");
	is_str(lr_duration_format(300, buf, sizeof(buf)), "5m", "no zero second unit");
	is_str(lr_duration_format(5 * 3600 + 180 + 59, buf, sizeof(buf)), "5h3m",
	       "two units at most");
	is_str(lr_duration_format(7 * 86400, buf, sizeof(buf)), "7d", "days");
	is_str(lr_duration_format(2 * 86400 + 4 * 3600, buf, sizeof(buf)), "2d4h",
	       "days and hours");
	return tap_done();
}
