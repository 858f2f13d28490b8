#include "log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

#include "strbuf.h"
#include "text.h"

/* Most time spent at exit trying to report dropped lines. */
#define EXIT_REPORT_MS 200

static const char *prog_name = "lockrun";
static enum lr_log_level cur_level = LR_LOG_NORMAL;
static char status_line[256]; /* shown on a terminal; "" when none */
static bool json_lines;       /* --log-format=json: one JSON object a line */

/*
 * How a line reaches stderr without ever blocking. stderr is usually shared
 * with the command, and a stderr nobody reads (a full pipe, a stalled
 * journald stream, a terminal stopped with ^S) must not stop us from
 * stopping the command when its lease runs out.
 *
 * O_NONBLOCK cannot go on fd 2 itself: it is a flag of the open file
 * description, which the command shares, and its own writes would fail
 * with EAGAIN. So:
 *  - a pipe, FIFO or terminal is reopened through /proc/self/fd/2, which
 *    gives us an open file description of our own to set O_NONBLOCK on;
 *  - a socket (journald's stream) cannot be reopened that way, but send()
 *    takes MSG_DONTWAIT per call;
 *  - a regular file (or block device) never blocks for long: fd 2 as is;
 *  - anything else we cannot reopen gets a poll() with no timeout before
 *    each write, best effort.
 * A writer thread with a queue was the alternative; it would need locking
 * and still drop lines once its queue is full, for nothing this does not do.
 */
enum out_mode { OUT_UNSET, OUT_NONE, OUT_FD, OUT_OWN_FD, OUT_SOCKET, OUT_POLL };
static enum out_mode out_mode = OUT_UNSET;
static int out_fd = -1;
static bool out_tty;
static bool out_journal;      /* stderr is journald's stream: "<N>" prefixes */
static unsigned long dropped; /* lines not written since the last report */

static void report_at_exit(void);

/*
 * Whether fd 2 is the stream systemd connected to the journal: systemd
 * sets JOURNAL_STREAM to "DEV:INODE" of that stream, and it counts only
 * while fd 2 is still that very file (not when stderr was redirected
 * after systemd started us, or by a parent in between). Costs nothing
 * past parsing the variable; st is fd 2's fstat.
 */
static bool is_journal(const struct stat *st)
{
	const char *v = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	char *end;

	if (!v || !*v)
		return false;
	errno = 0;
	dev = strtoull(v, &end, 10);
	if (errno || end == v || *end != ':')
		return false;
	v = end + 1;
	ino = strtoull(v, &end, 10);
	if (errno || end == v || *end)
		return false;
	return dev == (unsigned long long)st->st_dev && ino == (unsigned long long)st->st_ino;
}

/* Picks the way to write stderr (see above). Called once, from the first
 * lr_log_init; costs an fstat and maybe an open and an fcntl. */
static void setup_output(void)
{
	struct stat st;
	int fd;

	if (out_mode != OUT_UNSET)
		return;
	out_mode = OUT_NONE;
	if (fstat(STDERR_FILENO, &st) != 0)
		return;
	out_tty = isatty(STDERR_FILENO);
	out_journal = is_journal(&st);
	out_fd = STDERR_FILENO;
	if (S_ISREG(st.st_mode) || S_ISBLK(st.st_mode)) {
		out_mode = OUT_FD;
	} else if (S_ISSOCK(st.st_mode)) {
		out_mode = OUT_SOCKET;
	} else {
		fd = open("/proc/self/fd/2", O_WRONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
		if (fd >= 0) {
			out_fd = fd;
			out_mode = OUT_OWN_FD;
		} else {
			out_mode = OUT_POLL;
		}
	}
	atexit(report_at_exit);
}

/* Writes buf in one call, or not at all if that could block. Returns
 * whether all of it went out. A short write (only ever past PIPE_BUF, or
 * on a terminal or socket) counts as a failure: the rest would block. */
static bool put(const char *buf, size_t len)
{
	ssize_t n;
	struct pollfd p;

	switch (out_mode) {
	case OUT_SOCKET:
		do
			n = send(out_fd, buf, len, MSG_DONTWAIT | MSG_NOSIGNAL);
		while (n < 0 && errno == EINTR);
		break;
	case OUT_POLL:
		p.fd = out_fd;
		p.events = POLLOUT;
		if (poll(&p, 1, 0) != 1 || !(p.revents & POLLOUT))
			return false;
		/* fall through */
	case OUT_FD:
	case OUT_OWN_FD:
		do
			n = write(out_fd, buf, len);
		while (n < 0 && errno == EINTR);
		break;
	default:
		return false;
	}
	return n == (ssize_t)len;
}

static size_t format_line(char *buf, size_t size, int prio, const char *tag, const char *raw);

/* Appends the count of dropped lines, if any, as a line of its own. */
static size_t drop_note(char *buf, size_t size)
{
	char msg[100];

	if (!dropped)
		return 0;
	snprintf(msg, sizeof(msg), "%lu log line%s dropped (stderr was not writable)", dropped,
	         dropped == 1 ? "" : "s");
	return format_line(buf, size, LOG_WARNING, "warning: ", msg);
}

/* Writes what buf holds (the drop note first, if pending) in one write,
 * so lines of processes sharing a stderr never interleave mid-line. */
static void send_line(char *buf, size_t len, bool has_note)
{
	if (put(buf, len)) {
		if (has_note)
			dropped = 0;
		return;
	}
	dropped++;
}

/* At exit, tells how many lines were dropped, waiting at most
 * EXIT_REPORT_MS for stderr to take it: never hangs on a stderr that is
 * never read. */
static void report_at_exit(void)
{
	char buf[256];
	size_t n = drop_note(buf, sizeof(buf));
	struct pollfd p = {.fd = out_fd, .events = POLLOUT};

	if (!n || out_fd < 0)
		return;
	if (out_mode != OUT_FD && poll(&p, 1, EXIT_REPORT_MS) != 1)
		return;
	if (out_mode == OUT_POLL)
		out_mode = OUT_OWN_FD; /* polled already */
	put(buf, n);
}

/* --log-format=json: each message one JSON object on a line of its own,
 * for log shippers (see format_line); no live status line on a terminal.
 * Call before anything is logged. */
void lr_log_set_json(bool on)
{
	json_lines = on;
}

void lr_log_init(const char *prog, enum lr_log_level level)
{
	prog_name = prog;
	cur_level = level;
	setup_output();
}

enum lr_log_level lr_log_level(void)
{
	return cur_level;
}

static void emit(enum lr_log_level need, int prio, const char *tag, const char *fmt, va_list ap)
    __attribute__((format(printf, 4, 0)));

/* Formats one message into one buffer (a pending drop note and the erasing
 * of a status line included) and writes it with one non-blocking write.
 * Messages are capped well under PIPE_BUF, so a pipe takes all of a line
 * or none of it. Whatever the message quotes (names, paths, values, a
 * server's text) is escaped by lr_text_line(): a control character in it
 * shows as \xHH and can neither drive the terminal nor start a line of its
 * own. In the journal a line starts with its syslog priority prio as "<N>"
 * (sd-daemon(3)), which journald strips and records. */
static void emit(enum lr_log_level need, int prio, const char *tag, const char *fmt, va_list ap)
{
	char buf[PIPE_BUF], raw[2048];
	size_t n, note, k;

	if (cur_level < need)
		return;
	setup_output();
	n = 0;
	if (status_line[0]) {
		n = (size_t)snprintf(buf, sizeof(buf), "\r\033[K");
		status_line[0] = '\0';
	}
	note = drop_note(buf + n, sizeof(buf) - n);
	n += note;
	vsnprintf(raw, sizeof(raw), fmt, ap);
	k = format_line(buf + n, sizeof(buf) - n, prio, tag, raw);
	if (!k)
		return;
	send_line(buf, n + k, note > 0);
}

/*
 * One line for stderr into buf (size > 1), newline included; returns its
 * length, 0 if nothing fits. Text: "PROG: TAGMESSAGE", the message
 * escaped by lr_text_line() and cut to fit. JSON (--log-format=json):
 * {"time":"2026-11-25T10:00:00.123456Z","program":"lockrun","pid":123,
 * "level":"warning","message":"..."}, the message a JSON string (valid
 * UTF-8, control characters as \uXXXX), cut at 1000 bytes, or 500 if its
 * escapes would not fit one write. The time is this host's clock. In the
 * journal either starts with "<prio>".
 */
static size_t format_line(char *buf, size_t size, int prio, const char *tag, const char *raw)
{
	char msg[2048];
	const char *level = prio <= LOG_ERR       ? "error"
	                    : prio == LOG_WARNING ? "warning"
	                    : prio == LOG_DEBUG   ? "debug"
	                                          : "info";
	size_t n = 0;
	int k;

	if (out_journal)
		n = (size_t)snprintf(buf, size, "<%d>", prio);
	if (!json_lines) {
		lr_text_line(msg, sizeof(msg), raw);
		k = snprintf(buf + n, size - n, "%s: %s%s\n", prog_name, tag, msg);
	} else {
		struct timespec ts;
		struct tm tm;
		char when[40];
		struct lr_sb sb;

		clock_gettime(CLOCK_REALTIME, &ts);
		gmtime_r(&ts.tv_sec, &tm);
		strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
		for (size_t cut = 1000;; cut = 500) {
			lr_sb_init(&sb);
			lr_sb_printf(&sb, "{\"time\":\"%s.%06ldZ\",\"program\":", when,
			             ts.tv_nsec / 1000);
			lr_text_json(&sb, prog_name);
			lr_sb_printf(&sb,
			             ",\"pid\":%ld,\"level\":\"%s\",\"message\":", (long)getpid(),
			             level);
			snprintf(msg, cut + 1 < sizeof(msg) ? cut + 1 : sizeof(msg), "%s", raw);
			lr_text_json(&sb, msg);
			lr_sb_puts(&sb, "}\n");
			if (sb.oom || sb.len < size - n || cut == 500)
				break;
			lr_sb_finish(&sb);
		}
		k = sb.oom || sb.len >= size - n
		        ? -1
		        : snprintf(buf + n, size - n, "%s", lr_sb_str(&sb));
		lr_sb_finish(&sb);
	}
	if (k < 0)
		return 0;
	n = (size_t)k < size - n ? n + (size_t)k : size - 1;
	buf[n - 1] = '\n';
	return n;
}

/* Elsewhere than a terminal (a log file, a pipe, the journal): the status
 * line as an info line when it changes (another holder, another place in
 * the queue) and at least once a minute while it lasts, so a long wait
 * shows in a log. Costs a clock read. */
static void status_as_line(const char *line)
{
	static char said[sizeof(status_line)];
	static struct timespec said_at;
	struct timespec now;

	if (!line || !line[0]) {
		said[0] = '\0';
		return;
	}
	clock_gettime(CLOCK_BOOTTIME, &now);
	if (strcmp(line, said) == 0 && now.tv_sec - said_at.tv_sec < 60)
		return;
	snprintf(said, sizeof(said), "%s", line);
	said_at = now;
	lr_log_info("%s", line);
}

/* A live status line for -v on a terminal, rewritten in place when it
 * changes, escaped like any message; NULL clears it. Elsewhere, a line
 * now and then (see status_as_line). Never blocks either (a terminal
 * stopped with ^S): a line that cannot be shown is dropped. */
void lr_log_status(const char *line)
{
	char buf[sizeof(status_line) + 64], shown[sizeof(status_line)];
	int n;

	if (cur_level < LR_LOG_VERBOSE)
		return;
	if (!out_tty || json_lines) {
		status_as_line(line);
		return;
	}
	if (!line) {
		if (status_line[0] && !put("\r\033[K", 3))
			dropped++;
		status_line[0] = '\0';
		return;
	}
	lr_text_line(shown, sizeof(shown), line);
	if (strcmp(shown, status_line) == 0)
		return;
	memcpy(status_line, shown, sizeof(status_line));
	n = snprintf(buf, sizeof(buf), "\r\033[K%s: %s", prog_name, status_line);
	if (n > 0 && !put(buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1))
		dropped++;
}

void lr_log_error(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_QUIET, LOG_ERR, "", fmt, ap);
	va_end(ap);
}

void lr_log_warn(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_NORMAL, LOG_WARNING, "warning: ", fmt, ap);
	va_end(ap);
}

void lr_log_info(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_VERBOSE, LOG_INFO, "", fmt, ap);
	va_end(ap);
}

void lr_log_debug(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	emit(LR_LOG_DEBUG, LOG_DEBUG, "debug: ", fmt, ap);
	va_end(ap);
}
