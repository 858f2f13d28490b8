/*
 * lrproxy - a TCP proxy between lockrun and MariaDB that the test suite
 * can tell to misbehave.  Test helper only, never installed.
 *
 * Usage: lrproxy --target PORT [--target-host ADDR] [--listen PORT]
 *                [--bind ADDR] [--netns FILE] [--port-file FILE] --control FIFO
 *
 * Listens on ADDR:PORT (--bind, default 127.0.0.1; PORT 0 or absent: an
 * ephemeral port) and relays every client to its own connection to
 * TARGET-HOST:TARGET (default 127.0.0.1).  Both are IPv4 addresses, so
 * that each of several clients can have its own path to each of several
 * servers on one port (127.1.H.N to 127.0.0.N).  With --netns FILE (a
 * network namespace's file, such as /proc/PID/ns/net), the listener is made
 * inside that namespace and the upstream connections in lrproxy's own: a
 * client in the namespace reaches the servers by their own addresses and
 * port (127.0.0.N), through a path of its own.  When one side
 * closes, what it sent before is still delivered, then both are closed.
 * The port is reported on stdout and in FILE; FILE appears only once the
 * FIFO is being read, so commands may be sent as soon as it exists.  Runs
 * until SIGTERM or SIGINT.
 *
 * Commands are read line by line from FIFO (created if missing), e.g.
 * `echo 'blackhole on' >FIFO`.  Each is acknowledged by appending "ok
 * COMMAND" (or "error COMMAND" if not understood) to FIFO.log, which is
 * emptied at startup, so a test can wait until a command took effect.
 *
 *   blackhole on|off    on: a silent network partition.  Nothing is read
 *                       or written on any connection, so both peers see an
 *                       open, quiet connection and no RST; new clients are
 *                       accepted (by the kernel's handshake) but are not
 *                       connected upstream.  off: everything resumes.
 *   delay MS            hold each chunk read from either side for MS ms
 *                       before passing it on (0: no delay); MS may have
 *                       up to three decimals (delay 0.5: a 1 ms round
 *                       trip).  Applies to data read from then on.
 *   drop-reply PATTERN  one shot: the next COM_QUERY whose SQL text starts
 *                       with PATTERN (ASCII, case-insensitive; or one of
 *                       its statements does, within its first 256 bytes:
 *                       lockrun on MySQL sends its session's SET and its
 *                       first CALL as one query), or the
 *                       next COM_STMT_EXECUTE of a statement prepared on
 *                       its connection from such a text (before, or in
 *                       the same send: MariaDB's direct execution), is passed
 *                       to the server, its reply is swallowed, and 50 ms
 *                       after the reply started arriving the client gets a
 *                       RST and the server connection is closed.  Logs
 *                       "fired drop-reply PATTERN" then.
 *   hold-query PATTERN MS
 *                       one shot: the next COM_QUERY whose SQL text starts
 *                       with PATTERN is caught as drop-reply's is, but the
 *                       client gets a RST as soon as the query has been
 *                       read, and the query is passed to the server only
 *                       MS ms later (a query still in flight when its
 *                       client's connection is lost).  The server's reply
 *                       is swallowed; 50 ms after it started arriving the
 *                       server connection is closed and "fired hold-query
 *                       PATTERN" is logged.  The trap is shared with
 *                       drop-reply: arming one disarms the other.
 *   drop-replies on|off on: a one-way loss.  What clients send still
 *                       reaches the server, but everything the server
 *                       sends (greetings of new connections included) is
 *                       read and thrown away; connections stay open.
 *                       off: replies pass again (those thrown away are
 *                       lost for good).
 *   stall-login on|off  on: a connection goes silent, as in a blackhole
 *                       of its own, once its client has sent more than
 *                       the first 36 bytes it ever sent: what comes next
 *                       (after a request to start TLS, which is 36
 *                       bytes, the TLS hello; without TLS, the rest of
 *                       the login) is read but neither passed on nor
 *                       answered, so the client waits in the middle of
 *                       its login.  Connections past their login are
 *                       untouched.  off: new logins pass (those stalled
 *                       stay so).
 *   kill-all            reset (RST) both sides of every connection
 *   turns               logs "turns N": how many commands clients sent,
 *                       since the last turns, after having been answered
 *                       on their connection: the round trips they waited
 *                       out, the login's not counted, nor a command sent
 *                       with the one before it (one round trip), nor the
 *                       goodbye (COM_QUIT, which waits for no answer)
 *   reset               blackhole off, delay 0, drop-replies off,
 *                       stall-login off,
 *                       drop-reply and hold-query disarmed (a query
 *                       already caught is still served as its trap said)
 *
 * Only the plaintext protocol can be inspected: no TLS, no compression.
 * Each direction buffers at most 1 MiB; while that is full, the sending
 * side is not read.  Everything runs from one ppoll() loop, which keeps
 * time in microseconds.
 */

#define _GNU_SOURCE /* ppoll */

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "toolutil.h"

#define PROG          "lrproxy"
#define MAX_CONNS     1000
#define BUF_MIN       (16 * 1024)   /* first allocation of a direction's buffer */
#define BUF_MAX       (1024 * 1024) /* most bytes buffered per direction */
#define READ_MIN      4096          /* compact or grow when less room is left */
#define MAX_CHUNKS    256           /* delay time stamps kept per direction */
#define POLL_US       200000        /* bounds how long a signal can go unnoticed */
#define DROP_GRACE_US 50000         /* reply seen -> client cut off */
#define ACCEPT_PAUSE  100000        /* µs without accepting when out of fds */
#define MAX_DELAY     600000        /* ms */
#define CTL_LINE      512
#define MAX_PATTERN   256
#define MAX_PAYLOAD   0xffffffu
#define COM_QUIT      0x01
#define COM_QUERY     0x03
#define COM_PREPARE   0x16 /* COM_STMT_PREPARE */
#define COM_EXECUTE   0x17 /* COM_STMT_EXECUTE */
#define MAX_STMTS     32   /* prepared statements remembered per connection */
#define STALL_AFTER   36   /* a request to start TLS: header and 32 bytes */

/* A run of buffered bytes that may be sent from time due on.  It ends at
 * stream position end (counted in bytes ever read from that side). */
struct chunk {
	uint64_t end;
	int64_t due;
};

/* One direction of a connection: bytes read from one side and not yet
 * written to the other are buf[off, len).  q is a ring of chunks whose due
 * times never decrease, so what may be sent now is always a prefix. */
struct flow {
	unsigned char *buf;
	size_t cap, off, len;
	struct chunk q[MAX_CHUNKS];
	size_t qhead, qn;
	uint64_t in, out; /* bytes read from the source, written to the sink */
};

/* Framing of the client's packets, fed every byte the client sends: only
 * the header and the first bytes of a COM_QUERY, a COM_STMT_PREPARE (its
 * text) or a COM_STMT_EXECUTE (its statement id) are kept. */
struct parser {
	unsigned char hdr[4];
	size_t hdr_len;
	size_t left;  /* payload bytes of the current packet still to come */
	size_t seen;  /* payload bytes of the current packet seen so far */
	int more;     /* current packet is 0xffffff long: the next continues it */
	int cont;     /* current packet continues the previous one */
	int sniffing; /* current packet may still be the trap's query */
	unsigned char cmd;
	char sql[MAX_PATTERN];
	size_t sql_len;
};

/* A statement prepared on a connection: its id (from the server's answer)
 * and the start of its text. */
struct stmt {
	uint32_t id;
	char sql[MAX_PATTERN];
	size_t sql_len;
};

enum state {
	ST_WAIT,       /* accepted during a blackhole; not connected upstream */
	ST_CONNECTING, /* upstream connect() in progress */
	ST_OPEN,       /* relaying; a side whose fd is -1 has gone */
};

enum trap {
	TR_NONE,
	TR_QUERY,   /* reading the trap's query from the client */
	TR_FORWARD, /* query read, being written to the server */
	TR_SWALLOW, /* query written: discard the server's reply */
};

struct conn {
	int cfd, ufd; /* client, upstream; -1 once closed */
	enum state state;
	struct flow up, down; /* client -> server, server -> client */
	struct parser ps;
	enum trap trap;
	uint64_t trap_end; /* client->server position where the query ends */
	int64_t fire_at;   /* when to cut the client off (µs); 0: no reply yet */
	char pattern[MAX_PATTERN + 1];
	int64_t hold; /* hold-query: µs to hold the query; 0: drop-reply */
	int done;
	/* A COM_STMT_PREPARE was sent: the first packet of the server's next
	 * answer (header and 5 payload bytes, gathered in ans) says its id. */
	int prep_wait;
	struct stmt prep;
	unsigned char ans[9];
	size_t ans_len;
	struct stmt stmts[MAX_STMTS];
	size_t nstmts;
	int heard;   /* the server sent something since the client's last command */
	int stalled; /* stall-login caught it in its login: silent for good */
};

struct proxy {
	int lfd, ctl_fd, ctl_wfd, log_fd;
	unsigned target;
	struct in_addr target_addr;
	char target_name[INET_ADDRSTRLEN];
	int blackhole;
	int drop_replies; /* the server's bytes are read and thrown away */
	int stall_login;  /* logins go silent after the client's first 36 bytes */
	int64_t delay;    /* µs */
	int armed;
	int64_t hold; /* the armed trap is hold-query's, holding this long */
	char pattern[MAX_PATTERN + 1];
	size_t pattern_len;
	char line[CTL_LINE];
	size_t line_len;
	int line_skip; /* discarding an overlong command up to its newline */
	int64_t accept_after;
	uint64_t turns; /* commands sent after an answer (the turns command) */
	struct conn **conns;
	size_t nconns, cap;
	struct pollfd *pfd; /* listener, FIFO, then client and upstream per conn */
};

struct options {
	unsigned target, listen;
	struct in_addr target_addr, bind;
	const char *port_file, *control, *netns;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " --target PORT [--target-host ADDR] [--listen PORT]"
	           " [--bind ADDR] [--netns FILE] [--port-file FILE] --control FIFO\n");
}

static int64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* Relayed data is sent as soon as it is due; Nagle would add delays we
 * did not ask for.  Failure only costs latency. */
static void set_nodelay(int fd)
{
	int one = 1;

	(void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Close a socket with a RST instead of a FIN: the peer's next read or
 * write fails with ECONNRESET, as when a connection is torn down. */
static void abort_fd(int fd)
{
	struct linger lg = {.l_onoff = 1, .l_linger = 0};

	if (fd < 0)
		return;
	(void)setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg));
	close(fd);
}

static void close_fd(int *fd)
{
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

/* Append "WORD TEXT\n" to the log with one write(), so a test reading it
 * concurrently never sees half a line. */
static void log_event(const struct proxy *p, const char *word, const char *text)
{
	char buf[CTL_LINE + 64];
	int n = snprintf(buf, sizeof(buf), "%s %s\n", word, text);

	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf)) {
		n = (int)sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	if (tu_write_all(p->log_fd, buf, (size_t)n) < 0)
		fprintf(stderr, PROG ": writing the log: %s\n", strerror(errno));
}

/* ---- buffered flows ---------------------------------------------------- */

static size_t flow_pending(const struct flow *f)
{
	return f->len - f->off;
}

/* May more be read into f?  Both the bytes and the time stamps are
 * bounded; when either is full, the source waits (backpressure). */
static int flow_has_room(const struct flow *f)
{
	return flow_pending(f) < BUF_MAX && f->qn < MAX_CHUNKS;
}

/* Make room at the end of buf and return how much there is (0: out of
 * memory).  Data is moved to the front, or buf grown up to BUF_MAX, only
 * when the tail is short.  Callers checked flow_has_room(). */
static size_t flow_space(struct flow *f)
{
	size_t used = flow_pending(f);

	if (f->off > 0 && f->cap - f->len < READ_MIN) {
		memmove(f->buf, f->buf + f->off, used);
		f->off = 0;
		f->len = used;
	}
	if (f->cap - f->len < READ_MIN && f->cap < BUF_MAX) {
		size_t ncap = f->cap ? f->cap * 2 : BUF_MIN;
		unsigned char *nb;

		if (ncap > BUF_MAX)
			ncap = BUF_MAX;
		nb = realloc(f->buf, ncap);
		if (nb) {
			f->buf = nb;
			f->cap = ncap;
		}
	}
	return f->cap - f->len;
}

/* Account for n bytes just read into the tail of buf, to be sent at due.
 * They join the last chunk when that does not make anything earlier or
 * later than asked: same due time or later, or due at once anyway. */
static void flow_add(struct flow *f, size_t n, int64_t due, int64_t now)
{
	struct chunk *last = f->qn ? &f->q[(f->qhead + f->qn - 1) % MAX_CHUNKS] : NULL;

	f->len += n;
	f->in += n;
	if (last && (due <= last->due || due <= now)) {
		last->end = f->in;
		return;
	}
	last = &f->q[(f->qhead + f->qn++) % MAX_CHUNKS];
	last->end = f->in;
	last->due = due;
}

/* Number of buffered bytes whose time has come. */
static size_t flow_due(const struct flow *f, int64_t now)
{
	uint64_t end = f->out;
	size_t i;

	for (i = 0; i < f->qn; i++) {
		const struct chunk *c = &f->q[(f->qhead + i) % MAX_CHUNKS];

		if (c->due > now)
			break;
		end = c->end;
	}
	return (size_t)(end - f->out);
}

/* When the first chunk that is not due yet will be, or -1. */
static int64_t flow_next_due(const struct flow *f, int64_t now)
{
	size_t i;

	for (i = 0; i < f->qn; i++) {
		const struct chunk *c = &f->q[(f->qhead + i) % MAX_CHUNKS];

		if (c->due > now)
			return c->due;
	}
	return -1;
}

/* Write what is due to fd, as much as the socket takes.  Returns -1 when
 * the connection is broken. */
static int flow_send(struct flow *f, int fd, int64_t now)
{
	size_t due = flow_due(f, now);

	while (due > 0) {
		ssize_t n = send(fd, f->buf + f->off, due, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				break;
			return -1;
		}
		f->off += (size_t)n;
		f->out += (uint64_t)n;
		due -= (size_t)n;
	}
	while (f->qn > 0 && f->q[f->qhead].end <= f->out) {
		f->qhead = (f->qhead + 1) % MAX_CHUNKS;
		f->qn--;
	}
	if (f->off == f->len)
		f->off = f->len = 0;
	return 0;
}

/* Forget everything buffered: its destination is gone. */
static void flow_clear(struct flow *f)
{
	f->off = f->len = 0;
	f->qn = 0;
	f->out = f->in;
}

/* Read once from fd into buf.  Returns the byte count, 0 if nothing was
 * there, or -1 on end-of-file or error. */
static ssize_t sock_read(int fd, void *buf, size_t len)
{
	ssize_t n;

	do
		n = recv(fd, buf, len, 0);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
	return n == 0 ? -1 : n;
}

/* ---- the drop-reply trap ----------------------------------------------- */

/* The text of the statement prepared on c with this id, or NULL. */
static const struct stmt *find_stmt(const struct conn *c, uint32_t id)
{
	for (size_t i = 0; i < c->nstmts; i++)
		if (c->stmts[i].id == id)
			return &c->stmts[i];
	return NULL;
}

/* Does this text (of len bytes) start with the armed pattern? */
static int matches(const struct proxy *p, const char *sql, size_t len)
{
	return p->armed && len >= p->pattern_len && !strncasecmp(sql, p->pattern, p->pattern_len);
}

/* Does a statement of this query text (its first len bytes) start with
 * the armed pattern: the first, or one after a ';' and blanks? A ';'
 * inside a quoted string counts too, which the tests' queries never
 * have. */
static int query_matches(const struct proxy *p, const char *sql, size_t len)
{
	size_t i = 0;

	for (;;) {
		while (i < len && isspace((unsigned char)sql[i]))
			i++;
		if (matches(p, sql + i, len - i))
			return 1;
		while (i < len && sql[i] != ';')
			i++;
		if (i++ >= len)
			return 0;
	}
}

/* The trap is c's: its query is being read. */
static void take_trap(struct proxy *p, struct conn *c)
{
	p->armed = 0;
	memcpy(c->pattern, p->pattern, sizeof(c->pattern));
	c->hold = p->hold;
	c->trap = TR_QUERY;
}

/* Look at payload bytes of a packet that may be the trap's query: the
 * first is the command, then the bytes it is judged by are gathered: up
 * to MAX_PATTERN bytes of a COM_QUERY's SQL (judged when they are in, or
 * at the packet's end, end_packet), the 4-byte statement id of
 * a COM_STMT_EXECUTE, the start of a COM_STMT_PREPARE's text (kept for
 * the statement's id, see parse_answer).  A match takes the (one-shot)
 * trap from the proxy. */
static void sniff_query(struct proxy *p, struct conn *c, const unsigned char *b, size_t n)
{
	struct parser *ps = &c->ps;
	size_t i = 0, want;
	const struct stmt *st;

	if (ps->seen == 0) {
		ps->cmd = b[0];
		if (c->heard && ps->cmd != COM_QUIT)
			p->turns++;
		c->heard = 0;
		if (ps->cmd != COM_PREPARE &&
		    (!p->armed || (ps->cmd != COM_QUERY && ps->cmd != COM_EXECUTE))) {
			ps->sniffing = 0;
			return;
		}
		i = 1;
	}
	want = ps->cmd == COM_EXECUTE ? 4 : sizeof(ps->sql);
	while (i < n && ps->sql_len < want && ps->sql_len < sizeof(ps->sql))
		ps->sql[ps->sql_len++] = (char)b[i++];
	if (ps->cmd == COM_PREPARE) {
		memcpy(c->prep.sql, ps->sql, ps->sql_len);
		c->prep.sql_len = ps->sql_len;
		return; /* judged when the packet ends (end_packet) */
	}
	if (ps->sql_len < want)
		return; /* wait for more of the packet */
	ps->sniffing = 0;
	if (ps->cmd == COM_EXECUTE) {
		const unsigned char *u = (const unsigned char *)ps->sql;
		uint32_t id = (uint32_t)u[0] | (uint32_t)u[1] << 8 | (uint32_t)u[2] << 16 |
		              (uint32_t)u[3] << 24;
		/* MariaDB's id 0xffffffff: the statement prepared just before,
		 * sent with it, whose id the answer has not told yet. */
		st = id == UINT32_MAX ? &c->prep : find_stmt(c, id);
		if (!st || !matches(p, st->sql, st->sql_len))
			return;
	} else if (!query_matches(p, ps->sql, ps->sql_len)) {
		return;
	}
	take_trap(p, c);
}

/* Feed the first bytes of the server's answer to a COM_STMT_PREPARE: its
 * first packet is 0x00 and the statement's id (or an error, 0xff).
 * Remembers the id with the text; the oldest is forgotten when full. */
static void parse_answer(struct conn *c, const unsigned char *b, size_t n)
{
	while (c->prep_wait && n > 0 && c->ans_len < sizeof(c->ans)) {
		c->ans[c->ans_len++] = *b++;
		n--;
	}
	if (!c->prep_wait || c->ans_len < sizeof(c->ans))
		return;
	c->prep_wait = 0;
	if (c->ans[4] != 0x00)
		return;
	c->prep.id = (uint32_t)c->ans[5] | (uint32_t)c->ans[6] << 8 | (uint32_t)c->ans[7] << 16 |
	             (uint32_t)c->ans[8] << 24;
	if (c->nstmts == MAX_STMTS) {
		memmove(&c->stmts[0], &c->stmts[1], sizeof(c->stmts[0]) * (MAX_STMTS - 1));
		c->nstmts--;
	}
	c->stmts[c->nstmts++] = c->prep;
}

/* A packet ended at client->server position pos.  If it ended the trap's
 * query (not just a 0xffffff part of it), remember where. */
static void end_packet(struct proxy *p, struct conn *c, uint64_t pos)
{
	if (!c->ps.more && c->ps.sniffing && c->ps.cmd == COM_PREPARE && c->ps.seen > 0) {
		c->prep_wait = 1;
		c->ans_len = 0;
	}
	/* A query shorter than MAX_PATTERN: judged now, whole. */
	if (c->ps.sniffing && c->ps.cmd == COM_QUERY && c->ps.seen > 0 &&
	    query_matches(p, c->ps.sql, c->ps.sql_len))
		take_trap(p, c);
	c->ps.hdr_len = 0;
	c->ps.sniffing = 0;
	if (!c->ps.more && c->trap == TR_QUERY) {
		c->trap = TR_FORWARD;
		c->trap_end = pos;
	}
}

/* Feed the parser n bytes from the client, starting at client->server
 * position pos.  Packets are 3 bytes of little-endian length, a sequence
 * id and the payload; a command is a packet with sequence id 0 that does
 * not continue a 0xffffff one (login and auth-switch packets have other
 * sequence ids).  Works across reads of any size. */
static void parse_client(struct proxy *p, struct conn *c, const unsigned char *b, size_t n,
                         uint64_t pos)
{
	struct parser *ps = &c->ps;
	size_t i = 0;

	while (i < n) {
		size_t take;

		if (ps->hdr_len < sizeof(ps->hdr)) {
			ps->hdr[ps->hdr_len++] = b[i++];
			if (ps->hdr_len < sizeof(ps->hdr))
				continue;
			ps->left =
			    (size_t)ps->hdr[0] | (size_t)ps->hdr[1] << 8 | (size_t)ps->hdr[2] << 16;
			ps->cont = ps->more;
			ps->more = ps->left == MAX_PAYLOAD;
			ps->seen = 0;
			ps->sql_len = 0;
			ps->sniffing = !ps->cont && ps->hdr[3] == 0;
			if (ps->left == 0)
				end_packet(p, c, pos + i);
			continue;
		}
		take = n - i;
		if (take > ps->left)
			take = ps->left;
		if (ps->sniffing)
			sniff_query(p, c, b + i, take);
		ps->seen += take;
		ps->left -= take;
		i += take;
		if (ps->left == 0)
			end_packet(p, c, pos + i);
	}
}

/* Cut the trapped client off: RST to the client, close to the server,
 * and tell the test. */
static void fire_trap(const struct proxy *p, struct conn *c)
{
	abort_fd(c->cfd);
	c->cfd = -1;
	close_fd(&c->ufd);
	c->done = 1;
	log_event(p, c->hold ? "fired hold-query" : "fired drop-reply", c->pattern);
}

/* ---- connections ------------------------------------------------------- */

/* The client has gone: what was meant for it is dropped, and what it sent
 * before still goes to the server (see finish_if_idle). */
static void client_gone(struct conn *c)
{
	close_fd(&c->cfd);
	flow_clear(&c->down);
}

static void upstream_gone(struct conn *c)
{
	close_fd(&c->ufd);
	flow_clear(&c->up);
}

/* Start a non-blocking connect to the target.  Loopback connects
 * usually complete at once; otherwise ppoll() reports writability. */
static void start_upstream(const struct proxy *p, struct conn *c)
{
	struct sockaddr_in sa;
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	if (fd < 0 || tu_set_nonblock(fd) < 0)
		goto fail;
	set_nodelay(fd);
	memset(&sa, 0, sizeof(sa));
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)p->target);
	sa.sin_addr = p->target_addr;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		c->ufd = fd;
		c->state = ST_OPEN;
		return;
	}
	if (errno == EINPROGRESS || errno == EINTR) { /* both: still connecting */
		c->ufd = fd;
		c->state = ST_CONNECTING;
		return;
	}
fail:
	fprintf(stderr, PROG ": connect to %s:%u: %s\n", p->target_name, p->target,
	        strerror(errno));
	if (fd >= 0)
		close(fd);
	close_fd(&c->cfd);
	c->done = 1;
}

/* The upstream connect() has reported back: go on relaying, or close the
 * client if the server could not be reached. */
static void finish_connect(const struct proxy *p, struct conn *c)
{
	int err = 0;
	socklen_t len = sizeof(err);

	if (getsockopt(c->ufd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		err = errno;
	if (err == 0) {
		c->state = ST_OPEN;
		return;
	}
	fprintf(stderr, PROG ": connect to %s:%u: %s\n", p->target_name, p->target, strerror(err));
	close_fd(&c->ufd);
	close_fd(&c->cfd);
	c->done = 1;
}

/* Read once from the client into the client->server flow, letting the
 * parser see the bytes first. */
static void read_client(struct proxy *p, struct conn *c, int64_t now)
{
	struct flow *f = &c->up;
	size_t room = flow_space(f);
	ssize_t n;

	if (room == 0) {
		fprintf(stderr, PROG ": out of memory\n");
		client_gone(c);
		return;
	}
	n = sock_read(c->cfd, f->buf + f->len, room);
	if (n < 0) {
		client_gone(c);
		return;
	}
	if (n == 0)
		return;
	if (p->stall_login && f->in <= STALL_AFTER && f->in + (uint64_t)n > STALL_AFTER)
		c->stalled = 1;
	parse_client(p, c, f->buf + f->len, (size_t)n, f->in);
	flow_add(f, (size_t)n, now + p->delay + (c->trap == TR_NONE ? 0 : c->hold), now);
	if (c->hold && c->trap == TR_FORWARD) {
		/* The whole query is in: the client loses its connection, the
		 * query goes on to the server when its time comes. */
		abort_fd(c->cfd);
		c->cfd = -1;
		flow_clear(&c->down);
	}
}

/* Read once from the server: into the server->client flow, or into the
 * void while the trap swallows the reply (whose first byte starts the
 * grace period before the client is cut off) or while drop-replies is
 * on. */
static void read_upstream(const struct proxy *p, struct conn *c, int64_t now)
{
	struct flow *f = &c->down;
	ssize_t n;

	if (c->trap == TR_SWALLOW || p->drop_replies) {
		unsigned char sink[16384];

		n = sock_read(c->ufd, sink, sizeof(sink));
		if (n > 0 && c->trap == TR_SWALLOW && c->fire_at == 0)
			c->fire_at = now + DROP_GRACE_US;
	} else {
		size_t room = flow_space(f);

		if (room == 0) {
			fprintf(stderr, PROG ": out of memory\n");
			upstream_gone(c);
			return;
		}
		n = sock_read(c->ufd, f->buf + f->len, room);
		if (n > 0) {
			c->heard = 1;
			parse_answer(c, f->buf + f->len, (size_t)n);
			flow_add(f, (size_t)n, now + p->delay, now);
		}
	}
	if (n < 0)
		upstream_gone(c);
}

static int want_client_input(const struct conn *c)
{
	return c->ufd >= 0 && c->trap != TR_SWALLOW && flow_has_room(&c->up);
}

static int want_upstream_input(const struct proxy *p, const struct conn *c)
{
	return c->trap == TR_SWALLOW || p->drop_replies || (c->cfd >= 0 && flow_has_room(&c->down));
}

/* Fill the two pollfds of a connection.  In a blackhole nothing is
 * polled at all, not even for errors: a partition hides those too. */
static void conn_events(const struct proxy *p, const struct conn *c, int64_t now, struct pollfd *pc,
                        struct pollfd *pu)
{
	pc->fd = pu->fd = -1;
	pc->events = pu->events = 0;
	pc->revents = pu->revents = 0;
	if (p->blackhole || c->done || c->state == ST_WAIT || c->stalled)
		return;
	pc->fd = c->cfd;
	pu->fd = c->ufd;
	if (c->state == ST_CONNECTING) {
		pu->events = POLLOUT;
		return;
	}
	if (c->cfd >= 0 && want_client_input(c))
		pc->events |= POLLIN;
	if (c->cfd >= 0 && flow_due(&c->down, now) > 0)
		pc->events |= POLLOUT;
	if (c->ufd >= 0 && want_upstream_input(p, c))
		pu->events |= POLLIN;
	if (c->ufd >= 0 && flow_due(&c->up, now) > 0)
		pu->events |= POLLOUT;
}

/* The earliest time a connection needs attention without any socket
 * becoming ready (delayed data falling due, the trap firing), or -1. */
static int64_t conn_wake(const struct proxy *p, const struct conn *c, int64_t now)
{
	int64_t t, wake = -1;

	if (p->blackhole || c->done || c->state != ST_OPEN || c->stalled)
		return -1;
	if (c->ufd >= 0 && (t = flow_next_due(&c->up, now)) >= 0)
		wake = t;
	if (c->cfd >= 0 && (t = flow_next_due(&c->down, now)) >= 0 && (wake < 0 || t < wake))
		wake = t;
	if (c->trap == TR_SWALLOW && c->fire_at && (wake < 0 || c->fire_at < wake))
		wake = c->fire_at;
	return wake;
}

/* Did ppoll() say this side has something for us?  Errors and hang-ups
 * count when we asked for input: the read then reports them. */
static int readable(const struct pollfd *pfd)
{
	return (pfd->events & POLLIN) && (pfd->revents & (POLLIN | POLLERR | POLLHUP));
}

/* An error or hang-up we did not read our way into (we were not
 * reading that side), which would make ppoll() return at once forever. */
static int broken(const struct pollfd *pfd)
{
	return !(pfd->events & POLLIN) && (pfd->revents & (POLLERR | POLLHUP | POLLNVAL));
}

/* A side has gone: the connection is finished once what that side sent
 * before has reached the other one. */
static void finish_if_idle(struct conn *c)
{
	if (c->cfd < 0 && (c->ufd < 0 || flow_pending(&c->up) == 0))
		c->done = 1;
	else if (c->ufd < 0 && flow_pending(&c->down) == 0)
		c->done = 1;
	if (c->done) {
		close_fd(&c->cfd);
		close_fd(&c->ufd);
	}
}

/* Do one round's work for an open connection: read what each side sent,
 * write what is due, and move the drop-reply trap along. */
static void relay(struct proxy *p, struct conn *c, const struct pollfd *pc, const struct pollfd *pu,
                  int64_t now)
{
	if (c->cfd >= 0 && readable(pc))
		read_client(p, c, now);
	else if (c->cfd >= 0 && broken(pc))
		client_gone(c);
	if (c->ufd >= 0 && readable(pu))
		read_upstream(p, c, now);
	else if (c->ufd >= 0 && broken(pu))
		upstream_gone(c);
	if (c->ufd >= 0 && flow_send(&c->up, c->ufd, now) < 0)
		upstream_gone(c);
	if (c->cfd >= 0 && flow_send(&c->down, c->cfd, now) < 0)
		client_gone(c);
	if (c->trap == TR_FORWARD && c->ufd >= 0 && c->up.out >= c->trap_end)
		c->trap = TR_SWALLOW;
	if (c->trap == TR_SWALLOW && (c->cfd >= 0 || c->hold) &&
	    ((c->fire_at && now >= c->fire_at) || c->ufd < 0)) {
		fire_trap(p, c);
		return;
	}
	if (c->hold && c->trap != TR_NONE && c->ufd >= 0)
		return; /* the held query still has to reach the server */
	finish_if_idle(c);
}

/* Has a client that waited out a blackhole given up meanwhile?  Then
 * the server never needs to hear of it (a connection closed before the
 * login counts against max_connect_errors).  Peeking consumes nothing. */
static int client_left(int fd)
{
	unsigned char b;
	ssize_t n;

	do
		n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
	while (n < 0 && errno == EINTR);
	return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Move a connection along after a ppoll() round; pc and pu are its pollfds
 * from that round (all zero for a connection accepted since). */
static void pump(struct proxy *p, struct conn *c, const struct pollfd *pc, const struct pollfd *pu,
                 int64_t now)
{
	if (p->blackhole || c->done || c->stalled)
		return;
	if (c->state == ST_WAIT) {
		if (client_left(c->cfd)) {
			close_fd(&c->cfd);
			c->done = 1;
			return;
		}
		start_upstream(p, c);
		if (c->done)
			return;
	}
	if (c->state == ST_CONNECTING) {
		if (pc->revents & (POLLERR | POLLHUP | POLLNVAL)) {
			close_fd(&c->cfd);
			close_fd(&c->ufd);
			c->done = 1;
			return;
		}
		if (!(pu->revents & (POLLOUT | POLLERR | POLLHUP)))
			return;
		finish_connect(p, c);
		if (c->done)
			return;
	}
	relay(p, c, pc, pu, now);
}

static void conn_free(struct conn *c)
{
	close_fd(&c->cfd);
	close_fd(&c->ufd);
	free(c->up.buf);
	free(c->down.buf);
	free(c);
}

/* Drop finished connections from the table, keeping the order. */
static void sweep(struct proxy *p)
{
	size_t i, kept = 0;

	for (i = 0; i < p->nconns; i++) {
		if (p->conns[i]->done) {
			conn_free(p->conns[i]);
			continue;
		}
		p->conns[kept++] = p->conns[i];
	}
	p->nconns = kept;
}

/* Make room for one more connection in the table and in the pollfd
 * array (which keeps this round's results across the realloc). */
static int grow_tables(struct proxy *p)
{
	size_t ncap = p->cap ? p->cap * 2 : 16;
	struct conn **nc;
	struct pollfd *np;

	if (p->nconns < p->cap)
		return 0;
	if (ncap > MAX_CONNS)
		ncap = MAX_CONNS;
	nc = realloc(p->conns, ncap * sizeof(*nc));
	if (!nc)
		return -1;
	p->conns = nc;
	np = realloc(p->pfd, (2 + 2 * ncap) * sizeof(*np));
	if (!np)
		return -1;
	p->pfd = np;
	p->cap = ncap;
	return 0;
}

/* Take one accepted client into the table, in ST_WAIT: pump() connects
 * it upstream unless a blackhole is on.  Returns -1 (fd closed) if there
 * is no memory for it. */
static int add_conn(struct proxy *p, int fd)
{
	struct conn *c;

	if (grow_tables(p) < 0 || !(c = calloc(1, sizeof(*c)))) {
		fprintf(stderr, PROG ": out of memory\n");
		close(fd);
		return -1;
	}
	c->cfd = fd;
	c->ufd = -1;
	c->state = ST_WAIT;
	c->trap = TR_NONE;
	p->conns[p->nconns++] = c;
	return 0;
}

/* Accept every pending connection while there are free slots.  When out
 * of file descriptors, stop accepting for a moment rather than spin. */
static void accept_clients(struct proxy *p, int64_t now)
{
	while (p->nconns < MAX_CONNS) {
		int fd = accept(p->lfd, NULL, NULL);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return;
			fprintf(stderr, PROG ": accept: %s\n", strerror(errno));
			p->accept_after = now + ACCEPT_PAUSE;
			return;
		}
		if (tu_set_nonblock(fd) < 0) {
			fprintf(stderr, PROG ": fcntl: %s\n", strerror(errno));
			close(fd);
			continue;
		}
		set_nodelay(fd);
		if (add_conn(p, fd) < 0)
			return;
	}
}

/* ---- control commands -------------------------------------------------- */

static void kill_all(struct proxy *p)
{
	size_t i;

	for (i = 0; i < p->nconns; i++) {
		struct conn *c = p->conns[i];

		abort_fd(c->cfd);
		abort_fd(c->ufd);
		c->cfd = c->ufd = -1;
		c->done = 1;
	}
}

/* Parse a time in milliseconds, with up to three decimals, into
 * microseconds; -1 if it is not one. */
static int64_t parse_ms(const char *s)
{
	int64_t frac = 0;
	char *end;
	long v;
	int digits = 0;

	if (*s < '0' || *s > '9')
		return -1;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || v > MAX_DELAY)
		return -1;
	if (*end == '.') {
		for (end++; *end >= '0' && *end <= '9' && digits < 3; end++, digits++)
			frac = frac * 10 + (*end - '0');
		if (digits == 0)
			return -1;
		for (; digits < 3; digits++)
			frac *= 10;
	}
	if (*end || (v == MAX_DELAY && frac > 0))
		return -1;
	return (int64_t)v * 1000 + frac;
}

static int is_blank(char ch);

/* Apply one command, split into its keyword and the (possibly empty)
 * rest.  Returns 0, or -1 if it is not understood. */
static int apply_command(struct proxy *p, const char *cmd, const char *arg)
{
	int64_t ms;
	size_t len;

	if (!strcmp(cmd, "blackhole") && !strcmp(arg, "on")) {
		p->blackhole = 1;
	} else if (!strcmp(cmd, "blackhole") && !strcmp(arg, "off")) {
		p->blackhole = 0;
	} else if (!strcmp(cmd, "delay")) {
		if ((ms = parse_ms(arg)) < 0)
			return -1;
		p->delay = ms;
	} else if (!strcmp(cmd, "drop-reply")) {
		len = strlen(arg);
		if (len == 0 || len > MAX_PATTERN)
			return -1;
		memcpy(p->pattern, arg, len + 1);
		p->pattern_len = len;
		p->hold = 0;
		p->armed = 1;
	} else if (!strcmp(cmd, "hold-query")) {
		const char *sp = strrchr(arg, ' ');
		len = sp ? (size_t)(sp - arg) : 0;
		while (len > 0 && is_blank(arg[len - 1]))
			len--;
		if (len == 0 || len > MAX_PATTERN || (ms = parse_ms(sp + 1)) <= 0)
			return -1;
		memcpy(p->pattern, arg, len);
		p->pattern[len] = '\0';
		p->pattern_len = len;
		p->hold = ms;
		p->armed = 1;
	} else if (!strcmp(cmd, "drop-replies") && !strcmp(arg, "on")) {
		p->drop_replies = 1;
	} else if (!strcmp(cmd, "drop-replies") && !strcmp(arg, "off")) {
		p->drop_replies = 0;
	} else if (!strcmp(cmd, "stall-login") && !strcmp(arg, "on")) {
		p->stall_login = 1;
	} else if (!strcmp(cmd, "stall-login") && !strcmp(arg, "off")) {
		p->stall_login = 0;
	} else if (!strcmp(cmd, "turns") && !*arg) {
		char n[24];
		snprintf(n, sizeof(n), "%llu", (unsigned long long)p->turns);
		log_event(p, "turns", n);
		p->turns = 0;
	} else if (!strcmp(cmd, "kill-all") && !*arg) {
		kill_all(p);
	} else if (!strcmp(cmd, "reset") && !*arg) {
		p->blackhole = 0;
		p->drop_replies = 0;
		p->stall_login = 0;
		p->delay = 0;
		p->armed = 0;
	} else {
		return -1;
	}
	return 0;
}

static int is_blank(char ch)
{
	return ch == ' ' || ch == '\t' || ch == '\r';
}

/* Run one command line: blanks around it and between keyword and
 * argument do not matter, and the log shows it normalised that way. */
static void handle_line(struct proxy *p, char *line)
{
	char *end = line + strlen(line), *arg, text[CTL_LINE + 2];

	while (is_blank(*line))
		line++;
	while (end > line && is_blank(end[-1]))
		*--end = '\0';
	if (!*line)
		return;
	for (arg = line; *arg && !is_blank(*arg); arg++)
		;
	if (*arg) {
		*arg++ = '\0';
		while (is_blank(*arg))
			arg++;
	}
	snprintf(text, sizeof(text), *arg ? "%s %s" : "%s%s", line, arg);
	if (apply_command(p, line, arg) < 0) {
		fprintf(stderr, PROG ": bad command '%s'\n", text);
		log_event(p, "error", text);
		return;
	}
	log_event(p, "ok", text);
}

/* Run every complete line in the buffer and keep the rest.  A line that
 * does not fit is thrown away up to its newline and logged as an error. */
static void take_lines(struct proxy *p)
{
	char *start = p->line, *nl;
	size_t rest;

	while ((nl = memchr(start, '\n', p->line_len - (size_t)(start - p->line)))) {
		*nl = '\0';
		if (p->line_skip)
			p->line_skip = 0;
		else
			handle_line(p, start);
		start = nl + 1;
	}
	rest = p->line_len - (size_t)(start - p->line);
	memmove(p->line, start, rest);
	p->line_len = rest;
	if (p->line_len == sizeof(p->line)) {
		if (!p->line_skip) {
			fprintf(stderr, PROG ": command too long\n");
			log_event(p, "error", "command too long");
		}
		p->line_skip = 1;
		p->line_len = 0;
	}
}

/* Read whatever the control FIFO holds and run the commands in it.  Our
 * own writer keeps it from ever reporting end-of-file. */
static void read_control(struct proxy *p)
{
	for (;;) {
		ssize_t n = read(p->ctl_fd, p->line + p->line_len, sizeof(p->line) - p->line_len);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				fprintf(stderr, PROG ": control: %s\n", strerror(errno));
			return;
		}
		if (n == 0)
			return;
		p->line_len += (size_t)n;
		take_lines(p);
	}
}

/* ---- main loop --------------------------------------------------------- */

/* One ppoll() round over the listener, the FIFO and every connection.
 * Commands are applied before connections are served, so e.g. "blackhole
 * off" takes effect in the same round.  Returns -1 only if ppoll() fails. */
static int serve_once(struct proxy *p)
{
	static const struct pollfd none = {.fd = -1};
	size_t i, n = p->nconns;
	int64_t now = now_us(), wake = now + POLL_US, left;
	struct timespec ts;

	p->pfd[0].fd = n < MAX_CONNS && now >= p->accept_after ? p->lfd : -1;
	p->pfd[0].events = POLLIN;
	p->pfd[0].revents = 0;
	if (p->pfd[0].fd < 0 && n < MAX_CONNS && p->accept_after < wake)
		wake = p->accept_after;
	p->pfd[1].fd = p->ctl_fd;
	p->pfd[1].events = POLLIN;
	p->pfd[1].revents = 0;
	for (i = 0; i < n; i++) {
		int64_t t = conn_wake(p, p->conns[i], now);

		conn_events(p, p->conns[i], now, &p->pfd[2 + 2 * i], &p->pfd[3 + 2 * i]);
		if (t >= 0 && t < wake)
			wake = t;
	}
	left = wake > now ? wake - now : 0;
	ts.tv_sec = (time_t)(left / 1000000);
	ts.tv_nsec = (long)(left % 1000000 * 1000);
	if (ppoll(p->pfd, (nfds_t)(2 + 2 * n), &ts, NULL) < 0) {
		if (errno == EINTR)
			return 0;
		fprintf(stderr, PROG ": ppoll: %s\n", strerror(errno));
		return -1;
	}
	now = now_us();
	if (p->pfd[1].revents)
		read_control(p);
	if (p->pfd[0].revents & POLLIN)
		accept_clients(p, now);
	for (i = 0; i < p->nconns; i++) {
		const struct pollfd *pc = i < n ? &p->pfd[2 + 2 * i] : &none;
		const struct pollfd *pu = i < n ? &p->pfd[3 + 2 * i] : &none;

		pump(p, p->conns[i], pc, pu, now);
	}
	sweep(p);
	return 0;
}

/* Create the control FIFO unless it exists, open it for reading without
 * blocking, and open it once more for writing (never used) so that the
 * reader does not see end-of-file each time a test's writer closes.  Also
 * start FIFO.log afresh.  Sets *created if the FIFO is ours to remove. */
static int open_control(struct proxy *p, const char *path, int *created)
{
	struct stat st;
	char *log = tu_with_suffix(path, ".log");
	const char *what = path;
	int rc = -1;

	if (!log)
		goto out;
	if (mkfifo(path, 0600) == 0)
		*created = 1;
	else if (errno != EEXIST)
		goto out;
	p->ctl_fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
	if (p->ctl_fd < 0 || fstat(p->ctl_fd, &st) < 0)
		goto out;
	if (!S_ISFIFO(st.st_mode)) {
		errno = ENODEV; /* reported below as "not a FIFO" */
		goto out;
	}
	p->ctl_wfd = open(path, O_WRONLY | O_NONBLOCK | O_CLOEXEC);
	if (p->ctl_wfd < 0)
		goto out;
	what = log;
	p->log_fd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
	if (p->log_fd < 0)
		goto out;
	rc = 0;
out:
	if (rc < 0)
		fprintf(stderr, PROG ": %s: %s\n", what,
		        errno == ENODEV ? "not a FIFO" : strerror(errno));
	free(log);
	return rc;
}

/* Fill o from the command line.  Returns 0, 1 for --help, or -1 after
 * complaining on stderr. */
static int parse_args(int argc, char **argv, struct options *o)
{
	const char *target = NULL, *listen_port = NULL, *val;
	const char *target_host = "127.0.0.1", *bind_addr = "127.0.0.1";
	int i, r;

	memset(o, 0, sizeof(*o));
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return 1;
		if ((r = tu_match_opt("--target", argc, argv, &i, &val)) > 0)
			target = val;
		else if (r == 0 && (r = tu_match_opt("--listen", argc, argv, &i, &val)) > 0)
			listen_port = val;
		else if (r == 0 && (r = tu_match_opt("--target-host", argc, argv, &i, &val)) > 0)
			target_host = val;
		else if (r == 0 && (r = tu_match_opt("--bind", argc, argv, &i, &val)) > 0)
			bind_addr = val;
		else if (r == 0 && (r = tu_match_opt("--netns", argc, argv, &i, &val)) > 0)
			o->netns = val;
		else if (r == 0 && (r = tu_match_opt("--port-file", argc, argv, &i, &val)) > 0)
			o->port_file = val;
		else if (r == 0 && (r = tu_match_opt("--control", argc, argv, &i, &val)) > 0)
			o->control = val;
		if (r <= 0)
			return tu_bad_arg(PROG, r, argv[i]);
	}
	if (!target || !o->control) {
		fprintf(stderr, PROG ": --target and --control are required\n");
		return -1;
	}
	if (tu_parse_port(PROG, target, 0, &o->target) < 0)
		return -1;
	if (inet_pton(AF_INET, target_host, &o->target_addr) != 1 ||
	    inet_pton(AF_INET, bind_addr, &o->bind) != 1) {
		fprintf(stderr, PROG ": --target-host and --bind take an IPv4 address, not '%s'\n",
		        inet_pton(AF_INET, target_host, &o->target_addr) != 1 ? target_host
		                                                              : bind_addr);
		return -1;
	}
	if (listen_port && tu_parse_port(PROG, listen_port, 1, &o->listen) < 0)
		return -1;
	return 0;
}

/* The listener on bind:port, made inside network namespace NETNS when it
 * is given (then this process goes back to its own namespace, where the
 * upstream connections are made).  Returns the socket or -1. */
static int open_listener(const struct options *o, unsigned *port)
{
	int self = -1, ns = -1, fd = -1;

	if (!o->netns)
		return tu_open_listener_at(PROG, o->bind, o->listen, 128, port);
	self = open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
	ns = open(o->netns, O_RDONLY | O_CLOEXEC);
	if (self < 0 || ns < 0 || setns(ns, CLONE_NEWNET) < 0) {
		fprintf(stderr, PROG ": --netns %s: %s\n", o->netns, strerror(errno));
		goto out;
	}
	fd = tu_open_listener_at(PROG, o->bind, o->listen, 128, port);
	if (setns(self, CLONE_NEWNET) < 0) {
		fprintf(stderr, PROG ": back from --netns %s: %s\n", o->netns, strerror(errno));
		if (fd >= 0)
			close(fd);
		fd = -1;
	}
out:
	if (self >= 0)
		close(self);
	if (ns >= 0)
		close(ns);
	return fd;
}

/* Two descriptors per connection: lift the soft limit to the hard one so
 * MAX_CONNS fits.  If that fails, accept_clients() copes with EMFILE. */
static void raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
}

int main(int argc, char **argv)
{
	struct options opt;
	struct proxy *p = NULL;
	unsigned port = 0;
	int created = 0, rc = 2;
	size_t i;

	switch (parse_args(argc, argv, &opt)) {
	case 1:
		usage(stdout);
		return 0;
	case -1:
		usage(stderr);
		return 2;
	}
	rc = 1;
	if (tu_install_signals(PROG) < 0)
		goto out;
	raise_fd_limit();
	p = calloc(1, sizeof(*p));
	if (!p) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	p->lfd = p->ctl_fd = p->ctl_wfd = p->log_fd = -1;
	p->target = opt.target;
	p->target_addr = opt.target_addr;
	inet_ntop(AF_INET, &opt.target_addr, p->target_name, sizeof(p->target_name));
	p->pfd = calloc(2, sizeof(*p->pfd));
	if (!p->pfd) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	if (open_control(p, opt.control, &created) < 0)
		goto out;
	p->lfd = open_listener(&opt, &port);
	if (p->lfd < 0)
		goto out;
	if (tu_publish_port(PROG, opt.port_file, port) < 0)
		goto out;

	while (!tu_stop_requested)
		if (serve_once(p) < 0)
			goto out;
	rc = 0;
out:
	if (p) {
		for (i = 0; i < p->nconns; i++)
			conn_free(p->conns[i]);
		free(p->conns);
		free(p->pfd);
		close_fd(&p->lfd);
		close_fd(&p->ctl_fd);
		close_fd(&p->ctl_wfd);
		close_fd(&p->log_fd);
		free(p);
	}
	if (created)
		unlink(opt.control);
	return rc;
}
