/* The host queue's count of the runs behind its head, from the text of
 * /proc/locks: blocked requests of our file only, at any indentation,
 * however long their lines. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "prequeue.h"
#include "tap.h"

/* Counts in text as if it were /proc/locks. */
static unsigned count(const char *text, const char *id)
{
	FILE *f = fmemopen((void *)text, strlen(text), "r");
	unsigned n;

	if (!f)
		return 9999;
	n = lr_prequeue_count_blocked(f, id);
	fclose(f);
	return n;
}

int main(void)
{
	/* Lines as Linux prints them: the holder, then each blocked request
	 * one space further in; another file's lock and its waiter; a
	 * POSIX lock whose pid field happens to look like our inode. */
	const char *text = "1: OFDLCK ADVISORY  WRITE -1 fe:00:10954056 0 EOF\n"
	                   "1: -> OFDLCK ADVISORY  WRITE -1 fe:00:10954056 0 EOF\n"
	                   "1:  -> OFDLCK ADVISORY  WRITE -1 fe:00:10954056 0 EOF\n"
	                   "1:   -> OFDLCK ADVISORY  WRITE -1 fe:00:10954056 0 EOF\n"
	                   "2: OFDLCK ADVISORY  WRITE -1 fe:00:777 0 EOF\n"
	                   "2: -> OFDLCK ADVISORY  WRITE -1 fe:00:777 0 EOF\n"
	                   "3: POSIX  ADVISORY  WRITE 10954056 fe:00:1 0 EOF\n";
	char *big;
	size_t n = 0, cap = 1 << 20;

	ok(count(text, "fe:00:10954056") == 3, "three blocked on our file");
	ok(count(text, "fe:00:777") == 1, "one blocked on another file");
	ok(count(text, "fe:00:1") == 0, "a holder alone: nobody blocked");
	ok(count(text, "fe:00:1095405") == 0, "a prefix of an inode is not the inode");
	ok(count("", "fe:00:10954056") == 0, "an empty table");

	/* 400 waiters: the last lines are over 400 bytes long. */
	big = malloc(cap);
	if (!big)
		return 1;
	n += (size_t)snprintf(big + n, cap - n, "7: OFDLCK ADVISORY  WRITE -1 fe:00:42 0 EOF\n");
	for (int i = 1; i <= 400; i++)
		n += (size_t)snprintf(big + n, cap - n,
		                      "7:%*s-> OFDLCK ADVISORY  WRITE -1 fe:00:42 0 EOF\n", i, "");
	ok(count(big, "fe:00:42") == 400, "400 blocked, the longest line %d bytes", 400 + 46);
	free(big);
	return tap_done();
}
