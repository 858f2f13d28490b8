/* A growable NUL-terminated string, for building SQL and messages.
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_STRBUF_H
#define LR_STRBUF_H

#include <stdbool.h>
#include <stddef.h>

struct lr_sb {
	char *buf; /* always NUL-terminated once anything was added */
	size_t len;
	size_t cap;
	bool oom; /* an allocation failed; the content is truncated */
};

void lr_sb_init(struct lr_sb *sb);
void lr_sb_finish(struct lr_sb *sb);
void lr_sb_reset(struct lr_sb *sb);
void lr_sb_add(struct lr_sb *sb, const char *s, size_t n);
void lr_sb_puts(struct lr_sb *sb, const char *s);
void lr_sb_printf(struct lr_sb *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
const char *lr_sb_str(const struct lr_sb *sb);

#endif
