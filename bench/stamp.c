/*
 * stamp - the command that bench/run wraps in a lock: it appends one line
 * "TAG START_NS END_NS" to FILE and exits.  Benchmark helper, never
 * installed.
 *
 * Usage: stamp FILE [TAG]        (TAG defaults to "-")
 *
 * START_NS is taken first thing in main() and END_NS just before the line is
 * written, both from CLOCK_REALTIME in nanoseconds, so that stamps from
 * different processes compare.  A shell command with date(1) would cost two
 * forks inside the critical section, and bash's $EPOCHREALTIME costs a bash
 * start-up (1-3 ms under load): either would cap flock's rate long before
 * flock does.  The line is written with one write(2) to an O_APPEND file, so
 * lines from concurrent processes never interleave.
 */

#include <fcntl.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	long long start = now_ns();
	char line[128];
	int fd, n;

	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: stamp FILE [TAG]\n");
		return 2;
	}
	fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
	if (fd < 0) {
		perror(argv[1]);
		return 1;
	}
	n = snprintf(line, sizeof(line), "%.16s %lld %lld\n", argc == 3 ? argv[2] : "-", start,
	             now_ns());
	if (n < 0 || write(fd, line, (size_t)n) != n) {
		perror(argv[1]);
		return 1;
	}
	return close(fd) == 0 ? 0 : 1;
}
