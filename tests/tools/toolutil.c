/* Utilities shared by the test helper programs; see toolutil.h. */

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "toolutil.h"

volatile sig_atomic_t tu_stop_requested;

/* The SIGTERM/SIGINT handler: only raise the flag, which the main loop
 * checks after every poll() round. */
static void on_signal(int sig)
{
	(void)sig;
	tu_stop_requested = 1;
}

/* SIGTERM/SIGINT set the stop flag without SA_RESTART, so a blocked
 * poll() returns EINTR; SIGPIPE is ignored so a vanished peer shows up
 * as EPIPE instead of killing us.  Returns 0, or -1 after complaining as
 * prog. */
int tu_install_signals(const char *prog)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sigemptyset(&sa.sa_mask);
	sa.sa_handler = on_signal;
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
		goto fail;
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGPIPE, &sa, NULL) < 0)
		goto fail;
	return 0;
fail:
	fprintf(stderr, "%s: sigaction: %s\n", prog, strerror(errno));
	return -1;
}

/* Put fd in non-blocking mode, as everything is served from one poll()
 * loop that must never stall on a single socket.  Returns 0 or -1. */
int tu_set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0)
		return -1;
	return 0;
}

/* Write all len bytes of buf to a blocking fd, retrying short writes and
 * EINTR (a signal must not lose part of a file or log line).  Returns 0,
 * or -1 with errno set. */
int tu_write_all(int fd, const char *buf, size_t len)
{
	while (len > 0) {
		ssize_t n = write(fd, buf, len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		buf += n;
		len -= (size_t)n;
	}
	return 0;
}

/* path + suffix in a new string, or NULL (errno ENOMEM): names such as
 * FILE.tmp and FIFO.log are derived from the paths given on the command
 * line.  The caller frees it. */
char *tu_with_suffix(const char *path, const char *suffix)
{
	size_t plen = strlen(path), slen = strlen(suffix);
	char *s = malloc(plen + slen + 1);

	if (s) {
		memcpy(s, path, plen);
		memcpy(s + plen, suffix, slen + 1);
	}
	return s;
}

/* Bind and listen (with the given backlog) on 127.0.0.1:port, in
 * non-blocking mode, and report the port actually bound (the kernel's
 * choice when port is 0), so tests can run side by side on ephemeral
 * ports.  Returns the socket, or -1 after complaining as prog. */
int tu_open_listener(const char *prog, unsigned port, int backlog, unsigned *bound)
{
	struct in_addr lo = {htonl(INADDR_LOOPBACK)};

	return tu_open_listener_at(prog, lo, port, backlog, bound);
}

/* As tu_open_listener(), on address addr (a loopback address other than
 * 127.0.0.1: one path of several to the same port). */
int tu_open_listener_at(const char *prog, struct in_addr addr, unsigned port, int backlog,
                        unsigned *bound)
{
	char name[INET_ADDRSTRLEN];
	struct sockaddr_in sa;
	socklen_t len = sizeof(sa);
	int one = 1;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0)
		goto fail;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0)
		goto fail;
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	sa.sin_addr = addr;
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		goto fail;
	if (listen(fd, backlog) < 0 || tu_set_nonblock(fd) < 0)
		goto fail;
	if (getsockname(fd, (struct sockaddr *)&sa, &len) < 0)
		goto fail;
	*bound = ntohs(sa.sin_port);
	return fd;
fail:
	fprintf(stderr, "%s: listen on %s:%u: %s\n", prog,
	        inet_ntop(AF_INET, &addr, name, sizeof(name)) ? name : "?", port, strerror(errno));
	if (fd >= 0)
		close(fd);
	return -1;
}

/* Publish the port as "N\n" in path.  Written to path.tmp and renamed, so
 * a test polling for the file never reads it half-written.  Returns 0, or
 * -1 after complaining as prog (path.tmp removed). */
int tu_write_port_file(const char *prog, const char *path, unsigned port)
{
	char line[16];
	char *tmp = tu_with_suffix(path, ".tmp");
	int len = snprintf(line, sizeof(line), "%u\n", port);
	int fd = -1, rc = -1;

	if (!tmp)
		goto out;
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		goto out;
	if (tu_write_all(fd, line, (size_t)len) < 0)
		goto out;
	if (close(fd) < 0) {
		fd = -1;
		goto out;
	}
	fd = -1;
	if (rename(tmp, path) < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0) {
		fprintf(stderr, "%s: port file %s: %s\n", prog, tmp ? tmp : path, strerror(errno));
		if (tmp)
			unlink(tmp);
	}
	if (fd >= 0)
		close(fd);
	free(tmp);
	return rc;
}

/* Report the port a helper listens on: in path (if not NULL, see
 * tu_write_port_file) and then as "N\n" on stdout, flushed at once since
 * the test reads it while we keep running.  Returns 0, or -1 after
 * complaining as prog (nothing printed then). */
int tu_publish_port(const char *prog, const char *path, unsigned port)
{
	if (path && tu_write_port_file(prog, path, port) < 0)
		return -1;
	printf("%u\n", port);
	fflush(stdout);
	return 0;
}

/* If argv[*i] is option name, as "--name VALUE" or "--name=VALUE", store
 * its value and return 1 (stepping *i over a separate value); return 0 if
 * it is another argument and -1 if the value is missing.  Lets a plain
 * loop over argv accept both spellings without getopt_long. */
int tu_match_opt(const char *name, int argc, char **argv, int *i, const char **val)
{
	size_t n = strlen(name);
	const char *a = argv[*i];

	if (strncmp(a, name, n) != 0)
		return 0;
	if (a[n] == '=') {
		*val = a + n + 1;
		return 1;
	}
	if (a[n] != '\0')
		return 0;
	if (*i + 1 >= argc)
		return -1;
	*val = argv[++*i];
	return 1;
}

/* Complain as prog about an argument tu_match_opt() did not take: r < 0
 * means its value is missing, r == 0 that no option matched it.  Returns
 * -1, for the caller's parse_args() to return. */
int tu_bad_arg(const char *prog, int r, const char *arg)
{
	if (r < 0)
		fprintf(stderr, "%s: %s needs a value\n", prog, arg);
	else
		fprintf(stderr, "%s: unknown argument '%s'\n", prog, arg);
	return -1;
}

/* Parse a TCP port number in decimal (0 allowed when zero_ok, meaning an
 * ephemeral port), rejecting signs, junk and values over 65535 that
 * strtoul() would let through.  Returns 0, or -1 after complaining as
 * prog. */
int tu_parse_port(const char *prog, const char *s, int zero_ok, unsigned *port)
{
	char *end;
	unsigned long v;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || s[0] == '-' || v > 65535 || (v == 0 && !zero_ok)) {
		fprintf(stderr, "%s: bad port '%s'\n", prog, s);
		return -1;
	}
	*port = (unsigned)v;
	return 0;
}
