/*
 * Small utilities shared by the test helper programs (fakemysqld, lrproxy):
 * signal handling, socket and file plumbing, argument parsing.  Test code
 * only, never installed.  Functions that complain on stderr take the
 * program name to put in front of the message.
 */
#ifndef TU_TOOLUTIL_H
#define TU_TOOLUTIL_H

#include <signal.h>
#include <stddef.h>
#include <netinet/in.h>

/* Set by SIGTERM and SIGINT once tu_install_signals() has run. */
extern volatile sig_atomic_t tu_stop_requested;

int tu_install_signals(const char *prog);
int tu_set_nonblock(int fd);
int tu_write_all(int fd, const char *buf, size_t len);
char *tu_with_suffix(const char *path, const char *suffix);
int tu_open_listener(const char *prog, unsigned port, int backlog, unsigned *bound);
int tu_open_listener_at(const char *prog, struct in_addr addr, unsigned port, int backlog,
                        unsigned *bound);
int tu_write_port_file(const char *prog, const char *path, unsigned port);
int tu_publish_port(const char *prog, const char *path, unsigned port);
int tu_match_opt(const char *name, int argc, char **argv, int *i, const char **val);
int tu_bad_arg(const char *prog, int r, const char *arg);
int tu_parse_port(const char *prog, const char *s, int zero_ok, unsigned *port);

#endif
