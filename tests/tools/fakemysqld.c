/*
 * fakemysqld - impersonate a MySQL/MariaDB server so the test suite can
 * check lockrun's error handling.  Test helper only, never installed.
 *
 * Usage: fakemysqld --mode MODE [--port N] [--port-file FILE]
 *
 * Listens on 127.0.0.1:N (N = 0 or absent: an ephemeral port), reports
 * the port on stdout and in FILE, and serves clients until SIGTERM or
 * SIGINT.  Modes:
 *
 *   hang         accept connections and never send a byte
 *   old          let anyone log in to a pretend 5.1.73 server, then
 *                answer COM_PING with OK and every query with ERR 1064
 *   refuse-auth  pretend to be MariaDB 10.11 and reject every login
 *
 * Only enough of the client/server protocol is spoken for libmariadb and
 * the mariadb client to get that far.  All sockets are non-blocking and
 * served from one poll() loop, so one silent client never stalls others.
 */

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "toolutil.h"

#define PROG        "fakemysqld"
#define MAX_CLIENTS 64
#define IN_SIZE     4096
#define OUT_SIZE    1024
#define MAX_REPLY   256 /* more than any packet we send, header included */
#define POLL_MS     200 /* bounds how long a signal can go unnoticed */

#define CLIENT_LONG_PASSWORD     0x00000001u
#define CLIENT_CONNECT_WITH_DB   0x00000008u
#define CLIENT_PROTOCOL_41       0x00000200u
#define CLIENT_TRANSACTIONS      0x00002000u
#define CLIENT_SECURE_CONNECTION 0x00008000u
#define CLIENT_MULTI_RESULTS     0x00020000u
#define CLIENT_PLUGIN_AUTH       0x00080000u

#define SERVER_CAPS                                                                                \
	(CLIENT_LONG_PASSWORD | CLIENT_CONNECT_WITH_DB | CLIENT_PROTOCOL_41 |                      \
	 CLIENT_TRANSACTIONS | CLIENT_SECURE_CONNECTION | CLIENT_MULTI_RESULTS |                   \
	 CLIENT_PLUGIN_AUTH)

#define SERVER_STATUS_AUTOCOMMIT 0x0002
#define CHARSET_UTF8_GENERAL_CI  33
#define SCRAMBLE_LEN             20
#define AUTH_PLUGIN              "mysql_native_password"
#define MAX_PAYLOAD              0xffffffu

#define COM_QUIT  0x01
#define COM_QUERY 0x03
#define COM_PING  0x0e

enum mode { MODE_HANG, MODE_OLD, MODE_REFUSE_AUTH };

enum phase {
	PH_AUTH,    /* greeting sent, waiting for the handshake response */
	PH_COMMAND, /* logged in, waiting for commands */
	PH_CLOSING, /* close once the output buffer has drained */
};

/* Per-connection state.  Incoming packets are parsed as a byte stream:
 * only the header and the first payload byte (the command) are kept, so
 * packets of any size can be consumed without buffering them. */
struct client {
	int fd;
	enum phase phase;
	unsigned long id;
	unsigned char hdr[4];
	size_t hdr_len;
	size_t left;       /* payload bytes of the current packet not yet read */
	int more;          /* current packet is 0xffffff long: another follows */
	int first;         /* first payload byte of the logical packet, or -1 */
	unsigned char seq; /* sequence id of the last packet header seen */
	unsigned char in[IN_SIZE];
	size_t in_off, in_len;
	unsigned char out[OUT_SIZE];
	size_t out_off, out_len;
};

struct server {
	enum mode mode;
	int lfd;
	unsigned long next_id;
	size_t nclients;
	struct client clients[MAX_CLIENTS];
	struct pollfd pfd[MAX_CLIENTS + 1];
};

struct options {
	enum mode mode;
	unsigned port;
	const char *port_file;
};

/* One packet payload under construction. */
struct pkt {
	unsigned char b[MAX_REPLY - 4];
	size_t n;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: " PROG " --mode hang|old|refuse-auth [--port N] [--port-file FILE]\n");
}

static void put_mem(struct pkt *p, const void *src, size_t len)
{
	if (len > sizeof(p->b) - p->n)
		abort(); /* every reply is a compile-time constant size */
	memcpy(p->b + p->n, src, len);
	p->n += len;
}

static void put_u8(struct pkt *p, unsigned v)
{
	unsigned char b = (unsigned char)v;
	put_mem(p, &b, 1);
}

static void put_u16(struct pkt *p, unsigned v)
{
	put_u8(p, v & 0xff);
	put_u8(p, (v >> 8) & 0xff);
}

static void put_u32(struct pkt *p, uint32_t v)
{
	put_u16(p, v & 0xffff);
	put_u16(p, (v >> 16) & 0xffff);
}

/* NUL-terminated string, as the protocol's string<NUL>. */
static void put_strz(struct pkt *p, const char *s)
{
	put_mem(p, s, strlen(s) + 1);
}

static size_t out_room(const struct client *c)
{
	return sizeof(c->out) - (c->out_len - c->out_off);
}

/* Append header + payload to the client's output buffer.  Callers make
 * sure there is room (see process_input), so this cannot fail. */
static void queue_packet(struct client *c, unsigned char seq, const struct pkt *p)
{
	unsigned char hdr[4] = {p->n & 0xff, (p->n >> 8) & 0xff, (p->n >> 16) & 0xff, seq};

	if (c->out_len + sizeof(hdr) + p->n > sizeof(c->out)) {
		memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
		c->out_len -= c->out_off;
		c->out_off = 0;
	}
	if (c->out_len + sizeof(hdr) + p->n > sizeof(c->out))
		abort();
	memcpy(c->out + c->out_len, hdr, sizeof(hdr));
	memcpy(c->out + c->out_len + sizeof(hdr), p->b, p->n);
	c->out_len += sizeof(hdr) + p->n;
}

static void queue_ok(struct client *c, unsigned char seq)
{
	struct pkt p = {.n = 0};

	put_u8(&p, 0x00); /* OK header */
	put_u8(&p, 0);    /* affected rows, lenenc */
	put_u8(&p, 0);    /* last insert id, lenenc */
	put_u16(&p, SERVER_STATUS_AUTOCOMMIT);
	put_u16(&p, 0); /* warnings */
	queue_packet(c, seq, &p);
}

static void queue_err(struct client *c, unsigned char seq, unsigned code, const char *sqlstate,
                      const char *msg)
{
	struct pkt p = {.n = 0};

	put_u8(&p, 0xff);
	put_u16(&p, code);
	put_u8(&p, '#');
	put_mem(&p, sqlstate, 5);
	put_mem(&p, msg, strlen(msg));
	queue_packet(c, seq, &p);
}

/* Fill a 20-byte auth scramble.  Nothing is ever verified against it, so
 * it only has to look plausible: printable, and never NUL, since the
 * second half travels NUL-terminated. */
static void make_scramble(unsigned long id, unsigned char *buf)
{
	uint32_t x = (uint32_t)(id * 2654435761u) ^ (uint32_t)getpid() ^ 0x9e3779b9u;
	size_t i;

	for (i = 0; i < SCRAMBLE_LEN; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		buf[i] = (unsigned char)(0x21 + x % 94);
	}
}

/* Queue the server greeting, Protocol::HandshakeV10.  CLIENT_SSL is not
 * offered, so clients go straight to their HandshakeResponse41, and
 * CLIENT_LONG_PASSWORD (which MariaDB reads as CLIENT_MYSQL) is set, so
 * the 10 reserved bytes carry no MariaDB extended capabilities. */
static void queue_handshake(struct client *c, const char *version)
{
	struct pkt p = {.n = 0};
	unsigned char scramble[SCRAMBLE_LEN];
	static const unsigned char reserved[10];

	make_scramble(c->id, scramble);
	put_u8(&p, 10); /* protocol version */
	put_strz(&p, version);
	put_u32(&p, (uint32_t)c->id);
	put_mem(&p, scramble, 8);
	put_u8(&p, 0); /* filler */
	put_u16(&p, SERVER_CAPS & 0xffff);
	put_u8(&p, CHARSET_UTF8_GENERAL_CI);
	put_u16(&p, SERVER_STATUS_AUTOCOMMIT);
	put_u16(&p, SERVER_CAPS >> 16);
	put_u8(&p, SCRAMBLE_LEN + 1); /* auth plugin data length, with the NUL */
	put_mem(&p, reserved, sizeof(reserved));
	put_mem(&p, scramble + 8, SCRAMBLE_LEN - 8);
	put_u8(&p, 0);
	put_strz(&p, AUTH_PLUGIN);
	queue_packet(c, 0, &p);
}

/* React to one complete logical packet: the handshake response while in
 * PH_AUTH, a command afterwards.  Replies carry the client's sequence id
 * plus one. */
static void handle_packet(const struct server *s, struct client *c)
{
	unsigned char seq = (unsigned char)(c->seq + 1);

	if (c->phase == PH_AUTH) {
		if (s->mode == MODE_REFUSE_AUTH) {
			queue_err(c, seq, 1045, "28000", "Access denied for user (fakemysqld)");
			c->phase = PH_CLOSING;
		} else {
			queue_ok(c, seq);
			c->phase = PH_COMMAND;
		}
		return;
	}
	switch (c->first) {
	case COM_QUIT:
		c->phase = PH_CLOSING;
		break;
	case COM_PING:
		queue_ok(c, seq);
		break;
	case COM_QUERY:
		queue_err(c, seq, 1064, "42000", "fakemysqld answers no queries");
		break;
	default:
		queue_err(c, seq, 1047, "08S01", "Unknown command");
		break;
	}
}

/* A packet's payload has been consumed.  Packets of exactly 0xffffff
 * bytes are continued by the next one, so only answer at the end of the
 * whole logical packet. */
static void end_of_packet(const struct server *s, struct client *c)
{
	c->hdr_len = 0;
	if (c->more)
		return;
	handle_packet(s, c);
	c->first = -1;
}

/* Parse buffered input, one header byte or payload chunk per step.  Stops
 * while the output buffer could not take another reply, so a client that
 * pipelines commands without reading answers is throttled instead of
 * overflowing us; its input is then drained after the next flush. */
static void process_input(const struct server *s, struct client *c)
{
	while (c->in_off < c->in_len && c->phase != PH_CLOSING && out_room(c) >= MAX_REPLY) {
		size_t take;

		if (c->hdr_len < sizeof(c->hdr)) {
			c->hdr[c->hdr_len++] = c->in[c->in_off++];
			if (c->hdr_len < sizeof(c->hdr))
				continue;
			c->left =
			    (size_t)c->hdr[0] | (size_t)c->hdr[1] << 8 | (size_t)c->hdr[2] << 16;
			c->more = c->left == MAX_PAYLOAD;
			c->seq = c->hdr[3];
			if (c->left == 0)
				end_of_packet(s, c);
			continue;
		}
		take = c->in_len - c->in_off;
		if (take > c->left)
			take = c->left;
		if (c->first < 0)
			c->first = c->in[c->in_off];
		c->in_off += take;
		c->left -= take;
		if (c->left == 0)
			end_of_packet(s, c);
	}
	if (c->in_off == c->in_len)
		c->in_off = c->in_len = 0;
}

/* Write as much pending output as the socket takes.  Returns -1 when the
 * connection is broken. */
static int flush_out(struct client *c)
{
	while (c->out_off < c->out_len) {
		ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);

		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN || errno == EWOULDBLOCK)
				return 0;
			return -1;
		}
		c->out_off += (size_t)n;
	}
	c->out_off = c->out_len = 0;
	return 0;
}

/* Read what has arrived into the (empty) input buffer.  Returns -1 on EOF
 * or error. */
static int fill_input(struct client *c)
{
	ssize_t n;

	do
		n = read(c->fd, c->in, sizeof(c->in));
	while (n < 0 && errno == EINTR);
	if (n < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : -1;
	if (n == 0)
		return -1;
	c->in_off = 0;
	c->in_len = (size_t)n;
	return 0;
}

static short client_events(const struct client *c)
{
	short ev = 0;

	if (c->phase != PH_CLOSING && c->in_off == c->in_len)
		ev |= POLLIN;
	if (c->out_off < c->out_len)
		ev |= POLLOUT;
	return ev;
}

/* Handle poll() results for one client.  Returns -1 when the connection
 * should be dropped.  A hang-mode client only ever has its input read and
 * thrown away. */
static int service_client(const struct server *s, struct client *c, short revents)
{
	if (revents & (POLLERR | POLLHUP | POLLNVAL))
		return -1;
	if ((revents & POLLOUT) && flush_out(c) < 0)
		return -1;
	if (revents & POLLIN) {
		if (fill_input(c) < 0)
			return -1;
		if (s->mode == MODE_HANG)
			c->in_off = c->in_len = 0;
	}
	/* Each round either empties the input or leaves output pending, so
	 * poll() always has something to wait for afterwards. */
	do {
		process_input(s, c);
		if (flush_out(c) < 0)
			return -1;
	} while (c->in_off < c->in_len && c->out_off == c->out_len && c->phase != PH_CLOSING);
	if (c->phase == PH_CLOSING && c->out_off == c->out_len)
		return -1;
	return 0;
}

/* Accept every pending connection while there are free slots.  In the
 * protocol modes the greeting is queued right away; poll() reports the
 * socket writable and sends it on the next round. */
static void accept_clients(struct server *s)
{
	while (s->nclients < MAX_CLIENTS) {
		struct client *c;
		int fd = accept(s->lfd, NULL, NULL);

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			if (errno != EAGAIN && errno != EWOULDBLOCK)
				fprintf(stderr, PROG ": accept: %s\n", strerror(errno));
			return;
		}
		if (tu_set_nonblock(fd) < 0) {
			fprintf(stderr, PROG ": fcntl: %s\n", strerror(errno));
			close(fd);
			continue;
		}
		c = &s->clients[s->nclients++];
		memset(c, 0, offsetof(struct client, in));
		c->fd = fd;
		c->phase = PH_AUTH;
		c->id = ++s->next_id;
		c->first = -1;
		c->in_off = c->in_len = c->out_off = c->out_len = 0;
		if (s->mode == MODE_OLD)
			queue_handshake(c, "5.1.73-fake");
		else if (s->mode == MODE_REFUSE_AUTH)
			queue_handshake(c, "10.11.99-MariaDB-fake");
	}
}

/* One poll() round over the listener and all clients.  Returns -1 only if
 * poll() itself fails; a signal just ends the round early. */
static int serve_once(struct server *s)
{
	size_t i, kept = 0, n = s->nclients;

	s->pfd[0].fd = n < MAX_CLIENTS ? s->lfd : -1; /* full: leave them in the backlog */
	s->pfd[0].events = POLLIN;
	s->pfd[0].revents = 0;
	for (i = 0; i < n; i++) {
		s->pfd[i + 1].fd = s->clients[i].fd;
		s->pfd[i + 1].events = client_events(&s->clients[i]);
		s->pfd[i + 1].revents = 0;
	}
	if (poll(s->pfd, (nfds_t)(n + 1), POLL_MS) < 0) {
		if (errno == EINTR)
			return 0;
		fprintf(stderr, PROG ": poll: %s\n", strerror(errno));
		return -1;
	}
	for (i = 0; i < n; i++) {
		struct client *c = &s->clients[i];

		if (s->pfd[i + 1].revents && service_client(s, c, s->pfd[i + 1].revents) < 0) {
			close(c->fd);
			continue;
		}
		if (kept != i)
			s->clients[kept] = *c;
		kept++;
	}
	s->nclients = kept;
	if (s->pfd[0].revents & POLLIN)
		accept_clients(s);
	return 0;
}

/* Fill o from the command line.  Returns 0, 1 for --help, or -1 after
 * complaining on stderr. */
static int parse_args(int argc, char **argv, struct options *o)
{
	const char *mode = NULL, *port = NULL, *val;
	int i, r;

	o->port = 0;
	o->port_file = NULL;
	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return 1;
		if ((r = tu_match_opt("--mode", argc, argv, &i, &val)) > 0)
			mode = val;
		else if (r == 0 && (r = tu_match_opt("--port", argc, argv, &i, &val)) > 0)
			port = val;
		else if (r == 0 && (r = tu_match_opt("--port-file", argc, argv, &i, &val)) > 0)
			o->port_file = val;
		if (r <= 0)
			return tu_bad_arg(PROG, r, argv[i]);
	}
	if (!mode) {
		fprintf(stderr, PROG ": --mode is required\n");
		return -1;
	}
	if (!strcmp(mode, "hang")) {
		o->mode = MODE_HANG;
	} else if (!strcmp(mode, "old")) {
		o->mode = MODE_OLD;
	} else if (!strcmp(mode, "refuse-auth")) {
		o->mode = MODE_REFUSE_AUTH;
	} else {
		fprintf(stderr, PROG ": unknown mode '%s'\n", mode);
		return -1;
	}
	if (port && tu_parse_port(PROG, port, 1, &o->port) < 0)
		return -1;
	return 0;
}

int main(int argc, char **argv)
{
	struct options opt;
	struct server *s = NULL;
	unsigned port = 0;
	size_t i;
	int rc = 2;

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
	s = calloc(1, sizeof(*s));
	if (!s) {
		fprintf(stderr, PROG ": out of memory\n");
		goto out;
	}
	s->mode = opt.mode;
	s->lfd = tu_open_listener(PROG, opt.port, 64, &port);
	if (s->lfd < 0)
		goto out;
	if (tu_publish_port(PROG, opt.port_file, port) < 0)
		goto out;

	while (!tu_stop_requested)
		if (serve_once(s) < 0)
			goto out;
	rc = 0;
out:
	if (s) {
		for (i = 0; i < s->nclients; i++)
			close(s->clients[i].fd);
		if (s->lfd >= 0)
			close(s->lfd);
		free(s);
	}
	return rc;
}
