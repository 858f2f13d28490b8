/*
 * cpurun - what one run of a command costs: bench/run's start-up table.
 * Benchmark helper, never installed.
 *
 * Usage: cpurun N COMMAND [ARG...]
 *
 * Runs COMMAND N times, one after the other, with its input and output on
 * /dev/null, and prints the mean user + system CPU time of one run in ms,
 * from wait4()'s rusage (microseconds; it includes the children that the
 * command waited for). posix_spawn() starts each run, so no shell's fork
 * is counted. Exits 1 if a run could not be started or failed.
 */

#define _GNU_SOURCE
#include <fcntl.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
	posix_spawn_file_actions_t fa;
	long n;
	double us = 0;
	int rc = 1;

	if (argc < 3 || (n = strtol(argv[1], NULL, 10)) < 1) {
		fputs("usage: cpurun N COMMAND [ARG...]\n", stderr);
		return 2;
	}
	if (posix_spawn_file_actions_init(&fa) != 0)
		return 1;
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	for (long i = 0; i < n; i++) {
		struct rusage ru;
		pid_t pid;
		int st;

		if (posix_spawnp(&pid, argv[2], &fa, NULL, argv + 2, environ) != 0 ||
		    wait4(pid, &st, 0, &ru) != pid) {
			fprintf(stderr, "cpurun: %s could not be run\n", argv[2]);
			goto out;
		}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "cpurun: %s failed (status %d)\n", argv[2], st);
			goto out;
		}
		us += (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1e6 +
		      (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
	}
	printf("%.2f\n", us / 1000.0 / (double)n);
	rc = 0;
out:
	posix_spawn_file_actions_destroy(&fa);
	return rc;
}
