/*
 * The child: spawning it in its own process group with the lock's
 * environment and the signal dispositions lockrun was started with,
 * forwarding signals to that group, reaping it (and, as PID 1, the
 * orphans reparented to us), and stopping it (SIGTERM, then SIGKILL after
 * a grace period). No SQL here.
 *
 * May use: btimer, exitcodes, log.
 */
#ifndef LR_SUPERVISOR_H
#define LR_SUPERVISOR_H

#include <stdbool.h>
#include <sys/types.h>

#include <uv.h>

typedef struct lr_sup lr_sup;

/* Called for each forwarded signal the supervisor receives. */
typedef void (*lr_sup_signal_fn)(int signo, void *arg);

struct lr_sup_status {
	bool exited; /* exited normally with code */
	int code;
	bool signaled; /* killed by signal */
	int signo;
};

/* Notes the signals lockrun's caller left ignored: they stay ignored in
 * lockrun (not forwarded) and in the child. To be called first in main,
 * before lockrun or a library changes a disposition. */
void lr_sup_note_ignored(void);

lr_sup *lr_sup_create(uv_loop_t *loop, lr_sup_signal_fn on_signal, void *arg);
void lr_sup_destroy(lr_sup *sup);

int lr_sup_spawn(lr_sup *sup, char *const argv[], char *const extra_env[], char *err,
                 size_t errlen);
bool lr_sup_done(const lr_sup *sup);
const volatile bool *lr_sup_done_flag(const lr_sup *sup);
struct lr_sup_status lr_sup_status(const lr_sup *sup);
void lr_sup_terminate(lr_sup *sup, unsigned kill_after_ms);
void lr_sup_kill_group(lr_sup *sup);

#endif
