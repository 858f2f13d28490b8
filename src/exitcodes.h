/*
 * Exit statuses of lockrun and lockrunctl. Besides these, lockrun exits with
 * its child's status, or 128+N when the child was killed by signal N.
 * The numbers follow sysexits(3) where one fits; keep doc/ and README in step.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_EXITCODES_H
#define LR_EXITCODES_H

enum {
	LR_EXIT_OK = 0,
	LR_EXIT_FAILURE = 1,      /* lockrunctl: the requested check failed */
	LR_EXIT_USAGE = 64,       /* bad option, name, count; unknown semaphore */
	LR_EXIT_UNAVAILABLE = 69, /* database unreachable, refused us, or lacks the schema */
	LR_EXIT_SOFTWARE = 70,    /* internal error */
	LR_EXIT_OSERR = 71,       /* fork, pipe, signal set-up failed */
	LR_EXIT_CANTCREAT = 73,   /* lockrunctl: an output file cannot be written */
	LR_EXIT_CONFLICT = 75,    /* not acquired: busy, or --wait ran out (-E changes it) */
	LR_EXIT_LOCK_LOST = 76,   /* lease could not be kept; the child was stopped */
	LR_EXIT_CONFIG = 78,      /* configuration file missing, unreadable or invalid */
	LR_EXIT_NOEXEC = 126,     /* command found but could not be executed */
	LR_EXIT_NOTFOUND = 127,   /* command not found */
	LR_EXIT_SIGBASE = 128,    /* child killed by signal N: 128 + N */
};

#endif
