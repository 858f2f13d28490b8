#include "supervisor.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include "btimer.h"
#include "exitcodes.h"
#include "log.h"

extern char **environ;

/* Signals passed on to the child's process group, as tini and dumb-init do. */
static const int forwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof(forwarded) / sizeof(forwarded[0]))

/* The signals ignored when lockrun started (lr_sup_note_ignored): written
 * once, before any other thread or child exists; read by the vforked
 * child too. */
static sigset_t caller_ignored;

/*
 * What nohup(1) does (SIGHUP), and a shell for a command it runs in the
 * background (SIGINT, SIGQUIT), is an ignored signal, which exec keeps:
 * the command is meant to live through it. So a signal ignored when
 * lockrun started stays ignored, as a POSIX shell keeps the signals
 * ignored on its entry: lockrun does not catch it (it neither forwards it
 * nor gives up a wait for it), and the child starts with it ignored.
 * Every other signal starts at its default action in the child, whatever
 * lockrun or its libraries did with it (SIGPIPE, ignored here). Called
 * first in main; costs one sigaction per signal.
 */
void lr_sup_note_ignored(void)
{
	struct sigaction sa;

	sigemptyset(&caller_ignored);
	for (int s = 1; s < NSIG; s++)
		if (sigaction(s, NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			sigaddset(&caller_ignored, s);
}

struct lr_sup {
	uv_loop_t *loop;
	lr_sup_signal_fn on_signal;
	void *arg;
	uv_signal_t *sigs[NFORWARDED];
	uv_signal_t *sigchld;
	lr_btimer *kill_timer; /* on CLOCK_BOOTTIME: a suspend must not postpone SIGKILL */
	pid_t pid;             /* 0 before spawn; also the child's process group id */
	volatile bool done;
	bool took_tty;
	bool init; /* we are PID 1: orphans are ours to reap */
	int wstatus;
};

static void free_handle(uv_handle_t *h)
{
	free(h);
}

/* Hands the terminal to a process group; SIGTTOU would stop us for it. */
static void give_tty(pid_t pgrp)
{
	void (*old)(int) = signal(SIGTTOU, SIG_IGN);

	tcsetpgrp(STDIN_FILENO, pgrp);
	signal(SIGTTOU, old);
}

/*
 * ^Z at a terminal stops the command, which owns the terminal. Its shell
 * waits on us, not on it, so we take the terminal back and stop too; on
 * `fg` (SIGCONT to us) we give the terminal back and continue the command.
 * Our lease is not renewed meanwhile: past the deadline, the loop stops
 * the command as soon as we run again.
 */
static void child_stopped(lr_sup *sup, int signo)
{
	if (!sup->took_tty || (signo != SIGTSTP && signo != SIGTTIN && signo != SIGTTOU))
		return;
	give_tty(getpgrp());
	kill(getpid(), SIGSTOP);
	give_tty(sup->pid);
	kill(-sup->pid, SIGCONT);
}

/* Reaps our child only: never waitpid(-1), which could steal other
 * children's statuses (libuv's, or a library's). Stops are seen too, for
 * job control. Returns false while the child is still there (running or
 * stopped), true once it is reaped or before it is spawned. Costs a
 * waitpid per state change. */
static bool reap_child(lr_sup *sup)
{
	int st;
	pid_t r;

	while (sup->pid && !sup->done) {
		do
			r = waitpid(sup->pid, &st, WNOHANG | WUNTRACED | WCONTINUED);
		while (r < 0 && errno == EINTR);
		if (r != sup->pid)
			return false;
		if (WIFSTOPPED(st)) {
			child_stopped(sup, WSTOPSIG(st));
		} else if (WIFEXITED(st) || WIFSIGNALED(st)) {
			sup->wstatus = st;
			sup->done = true;
			lr_btimer_disarm(sup->kill_timer);
		}
	}
	return true;
}

/*
 * As PID 1 (a container without an init), orphans are reparented to us
 * and would stay zombies: reaps those that exited, as tini does. lockrun
 * starts no child but the command, so any other child is an orphan. Each
 * is peeked at first (WNOWAIT), so our child's status is never taken
 * here: returns true, reaping nothing more, when the peek finds our child
 * exited, for reap_child() to take it. Called on SIGCHLD until lockrun
 * exits, the release included; a waitid and a waitpid per orphan.
 */
static bool reap_orphans(lr_sup *sup)
{
	siginfo_t si;
	int r;

	for (;;) {
		memset(&si, 0, sizeof(si)); /* si_pid stays 0 if none exited */
		do
			r = waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT);
		while (r < 0 && errno == EINTR);
		if (r < 0 || si.si_pid == 0)
			return false;
		if (si.si_pid == sup->pid && !sup->done)
			return true;
		while (waitpid(si.si_pid, NULL, WNOHANG) < 0 && errno == EINTR)
			;
	}
}

/* A child changed state: ours, or as PID 1 an orphan. Wakes the loop
 * when our child is over. */
static void on_sigchld(uv_signal_t *h, int signo)
{
	lr_sup *sup = h->data;
	bool over;

	(void)signo;
	do
		over = reap_child(sup);
	while (sup->init && reap_orphans(sup));
	if (over)
		uv_stop(h->loop);
}

static void on_forward(uv_signal_t *h, int signo)
{
	lr_sup *sup = h->data;

	if (sup->pid && !sup->done) {
		lr_log_debug("forwarding signal %d to process group %ld", signo, (long)sup->pid);
		kill(-sup->pid, signo);
	}
	if (sup->on_signal)
		sup->on_signal(signo, sup->arg);
	uv_stop(h->loop);
}

/* The grace after SIGTERM is over. Kills first and logs after: a log
 * line must never delay the kill. */
static void on_kill_timer(void *arg)
{
	lr_sup *sup = arg;

	if (sup->pid && !sup->done) {
		kill(-sup->pid, SIGKILL);
		lr_log_warn("child did not stop in time; sent SIGKILL to process group %ld",
		            (long)sup->pid);
	}
}

lr_sup *lr_sup_create(uv_loop_t *loop, lr_sup_signal_fn on_signal, void *arg)
{
	lr_sup *sup = calloc(1, sizeof(*sup));
	size_t i;

	if (!sup)
		return NULL;
	sup->loop = loop;
	sup->on_signal = on_signal;
	sup->arg = arg;
	sup->init = getpid() == 1;
	for (i = 0; i < NFORWARDED; i++) {
		if (sigismember(&caller_ignored, forwarded[i]) == 1) {
			lr_log_debug("signal %d was ignored when lockrun started: it stays ignored",
			             forwarded[i]);
			continue;
		}
		sup->sigs[i] = malloc(sizeof(uv_signal_t));
		if (!sup->sigs[i])
			goto fail;
		uv_signal_init(loop, sup->sigs[i]);
		sup->sigs[i]->data = sup;
		uv_signal_start(sup->sigs[i], on_forward, forwarded[i]);
	}
	/* Each handle is initialised as soon as it exists, so that a failure
	 * half way leaves only initialised handles for destroy to close. */
	sup->sigchld = malloc(sizeof(*sup->sigchld));
	if (!sup->sigchld)
		goto fail;
	uv_signal_init(loop, sup->sigchld);
	sup->sigchld->data = sup;
	uv_signal_start(sup->sigchld, on_sigchld, SIGCHLD);
	/* Children that exited before the handler was there (inherited
	 * across the exec that started us) sent their SIGCHLD for nothing. */
	if (sup->init)
		reap_orphans(sup);
	sup->kill_timer = lr_btimer_create(loop, on_kill_timer, sup);
	if (!sup->kill_timer)
		goto fail;
	return sup;
fail:
	lr_sup_destroy(sup);
	return NULL;
}

/* Handles are closed; the owner runs the loop once more to free them. */
void lr_sup_destroy(lr_sup *sup)
{
	if (!sup)
		return;
	for (size_t i = 0; i < NFORWARDED; i++)
		if (sup->sigs[i])
			uv_close((uv_handle_t *)sup->sigs[i], free_handle);
	if (sup->sigchld)
		uv_close((uv_handle_t *)sup->sigchld, free_handle);
	lr_btimer_destroy(sup->kill_timer);
	if (sup->took_tty) /* or the shell would be left behind a dead group */
		give_tty(getpgrp());
	free(sup);
}

/*
 * Finds the program as execvp(3) would, but in the parent: after fork only
 * async-signal-safe calls are allowed (libuv may have started threads), so
 * the child just calls execve. Returns 0, ENOENT or EACCES.
 */
static int find_program(const char *name, char *out, size_t outlen)
{
	const char *path = getenv("PATH");
	int err = ENOENT;
	struct stat st;

	if (strchr(name, '/')) {
		snprintf(out, outlen, "%s", name);
		if (stat(name, &st) != 0)
			return errno;
		return S_ISDIR(st.st_mode) ? EACCES : 0;
	}
	if (!path)
		path = "/usr/local/bin:/usr/bin:/bin";
	while (*path) {
		const char *colon = strchr(path, ':');
		size_t n = colon ? (size_t)(colon - path) : strlen(path);
		snprintf(out, outlen, "%.*s%s%s", (int)n, n ? path : ".", "/", name);
		if (stat(out, &st) == 0) {
			if (S_ISREG(st.st_mode) && access(out, X_OK) == 0)
				return 0;
			err = EACCES;
		}
		if (!colon)
			break;
		path = colon + 1;
	}
	return err;
}

/* The child's environment: ours, less stale LOCKRUN_* lock variables from
 * an outer lockrun, plus the new ones. Built before fork. */
static char **build_env(char *const extra[])
{
	size_t n = 0, m = 0, k = 0;
	char **env;

	while (environ[n])
		n++;
	while (extra[m])
		m++;
	env = calloc(n + m + 1, sizeof(*env));
	if (!env)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "LOCKRUN_FENCE=", 14) == 0 ||
		    strncmp(environ[i], "LOCKRUN_FENCES=", 15) == 0 ||
		    strncmp(environ[i], "LOCKRUN_LEASE=", 14) == 0 ||
		    strncmp(environ[i], "LOCKRUN_GRANT=", 14) == 0 ||
		    strncmp(environ[i], "LOCKRUN_WINDOW=", 15) == 0)
			continue;
		env[k++] = environ[i];
	}
	for (size_t i = 0; i < m; i++)
		env[k++] = extra[i];
	return env;
}

/* What the child needs, and where it leaves execve's errno: vfork shares
 * our memory until the exec, so no pipe is needed to tell failure. */
struct child {
	const char *path;
	char *const *argv;
	char **env;
	const sigset_t *oldmask;
	pid_t parent;
	bool take_tty;
	volatile int err;
};

/* Runs in the vforked child, on our stack and memory until it execs:
 * async-signal-safe calls only, and nothing written but c->err. Signal
 * dispositions are its own (vfork does not share them), so setting them
 * leaves ours alone: each as lockrun found it (lr_sup_note_ignored), and
 * before the mask is restored, so that no handler of ours runs here. */
static void child_exec(struct child *c)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	for (int s = 1; s < NSIG; s++) {
		sa.sa_handler = sigismember(&caller_ignored, s) == 1 ? SIG_IGN : SIG_DFL;
		sigaction(s, &sa, NULL);
	}
	setpgid(0, 0);
	/* If lockrun dies, even by SIGKILL, the child must not run on unlocked. */
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != c->parent)
		_exit(LR_EXIT_SOFTWARE);
	if (c->take_tty)
		tcsetpgrp(STDIN_FILENO, getpid()); /* SIGTTOU is still blocked here */
	sigprocmask(SIG_SETMASK, c->oldmask, NULL);
	execve(c->path, c->argv, c->env);
	c->err = errno;
	_exit(c->err == ENOENT ? LR_EXIT_NOTFOUND : LR_EXIT_NOEXEC);
}

/* vfork in a frame of its own, so nothing of the caller's can be
 * clobbered while the child borrows the stack. */
static pid_t start_child(struct child *c)
{
	pid_t pid = vfork();

	if (pid == 0)
		child_exec(c);
	return pid;
}

/*
 * Starts the command. Returns 0, or an exit status (126, 127, 71) with a
 * message in err. stdio is inherited as is; the database socket is not
 * (it is close-on-exec). Costs a vfork and an exec: the child borrows our
 * address space until it execs, so no page tables are copied and no
 * copy-on-write faults follow (a fork of lockrun, with libmariadb and
 * OpenSSL mapped, cost about 2 ms on a virtual machine).
 */
int lr_sup_spawn(lr_sup *sup, char *const argv[], char *const extra_env[], char *err, size_t errlen)
{
	char path[4096];
	int rc = LR_EXIT_OSERR, e;
	sigset_t all, old;
	struct child c = {
	    .path = path,
	    .argv = argv,
	    .oldmask = &old,
	    .parent = getpid(),
	    .take_tty = isatty(STDIN_FILENO) && tcgetpgrp(STDIN_FILENO) == getpgrp(),
	};
	pid_t pid;

	e = find_program(argv[0], path, sizeof(path));
	if (e) {
		snprintf(err, errlen, "%s: %s", argv[0],
		         e == ENOENT && !strchr(argv[0], '/') ? "command not found" : strerror(e));
		return e == ENOENT ? LR_EXIT_NOTFOUND : LR_EXIT_NOEXEC;
	}
	c.env = build_env(extra_env);
	if (!c.env) {
		snprintf(err, errlen, "cannot prepare to run %s: %s", argv[0], strerror(errno));
		goto out;
	}
	/* Block everything across vfork so no handler of ours runs in the
	 * child before it resets them. */
	sigfillset(&all);
	sigprocmask(SIG_SETMASK, &all, &old);
	pid = start_child(&c);
	e = errno;
	if (pid > 0)
		setpgid(pid, pid); /* both sides set it: no race with a fast child */
	sigprocmask(SIG_SETMASK, &old, NULL);
	if (pid < 0) {
		snprintf(err, errlen, "cannot fork: %s", strerror(e));
		goto out;
	}
	sup->pid = pid;
	sup->took_tty = c.take_tty;
	if (c.err) {
		snprintf(err, errlen, "%s: %s", argv[0], strerror(c.err));
		rc = c.err == ENOENT ? LR_EXIT_NOTFOUND : LR_EXIT_NOEXEC;
		goto out;
	}
	lr_log_debug("started %s as pid %ld", path, (long)pid);
	rc = 0;
out:
	free(c.env);
	return rc;
}

bool lr_sup_done(const lr_sup *sup)
{
	return sup->done;
}

/* For callers that want a wait of theirs to end when the child does. */
const volatile bool *lr_sup_done_flag(const lr_sup *sup)
{
	return &sup->done;
}

struct lr_sup_status lr_sup_status(const lr_sup *sup)
{
	struct lr_sup_status s = {0};

	if (!sup->done)
		return s;
	if (WIFEXITED(sup->wstatus)) {
		s.exited = true;
		s.code = WEXITSTATUS(sup->wstatus);
	} else if (WIFSIGNALED(sup->wstatus)) {
		s.signaled = true;
		s.signo = WTERMSIG(sup->wstatus);
	}
	return s;
}

/* Asks the child's whole process group to stop, and makes sure it does:
 * SIGKILL follows after kill_after_ms unless the child is gone by then. */
void lr_sup_terminate(lr_sup *sup, unsigned kill_after_ms)
{
	if (!sup->pid || sup->done)
		return;
	kill(-sup->pid, SIGTERM);
	kill(-sup->pid, SIGCONT); /* a stopped group would never see the SIGTERM */
	if (!lr_btimer_armed(sup->kill_timer) &&
	    !lr_btimer_arm(sup->kill_timer, lr_btimer_now_ms() + kill_after_ms))
		kill(-sup->pid, SIGKILL); /* no timer: no grace either */
}

/* Kills whatever is left of the child's process group (grandchildren that
 * outlived it), when the lock they ran under is gone. */
void lr_sup_kill_group(lr_sup *sup)
{
	if (sup->pid)
		kill(-sup->pid, SIGKILL);
}
