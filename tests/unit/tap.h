/* A minimal TAP producer for meson's `protocol: 'tap'`. */
#ifndef LR_TAP_H
#define LR_TAP_H

#include <stdio.h>
#include <string.h>

static int tap_n, tap_failed;

#define ok(cond, ...)                                                                              \
	do {                                                                                       \
		int ok_ = !!(cond);                                                                \
		printf("%sok %d - ", ok_ ? "" : "not ", ++tap_n);                                  \
		printf(__VA_ARGS__);                                                               \
		printf("\n");                                                                      \
		if (!ok_) {                                                                        \
			tap_failed++;                                                              \
			printf("#   failed at %s:%d: %s\n", __FILE__, __LINE__, #cond);            \
		}                                                                                  \
	} while (0)

static inline int tap_streq(const char *a, const char *b)
{
	return a && b && strcmp(a, b) == 0;
}

#define is_str(a, b, ...) ok(tap_streq((a), (b)), __VA_ARGS__)

static inline int tap_done(void)
{
	printf("1..%d\n", tap_n);
	return tap_failed ? 1 : 0;
}

#endif
