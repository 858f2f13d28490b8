#include "strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void lr_sb_init(struct lr_sb *sb)
{
	memset(sb, 0, sizeof(*sb));
}

void lr_sb_finish(struct lr_sb *sb)
{
	free(sb->buf);
	lr_sb_init(sb);
}

void lr_sb_reset(struct lr_sb *sb)
{
	sb->len = 0;
	sb->oom = false;
	if (sb->buf)
		sb->buf[0] = '\0';
}

static bool reserve(struct lr_sb *sb, size_t extra)
{
	size_t want = sb->len + extra + 1;
	size_t cap = sb->cap ? sb->cap : 256;
	char *p;

	if (sb->oom)
		return false;
	if (want <= sb->cap)
		return true;
	while (cap < want)
		cap *= 2;
	p = realloc(sb->buf, cap);
	if (!p) {
		sb->oom = true;
		return false;
	}
	sb->buf = p;
	sb->cap = cap;
	return true;
}

void lr_sb_add(struct lr_sb *sb, const char *s, size_t n)
{
	if (!reserve(sb, n))
		return;
	memcpy(sb->buf + sb->len, s, n);
	sb->len += n;
	sb->buf[sb->len] = '\0';
}

void lr_sb_puts(struct lr_sb *sb, const char *s)
{
	lr_sb_add(sb, s, strlen(s));
}

void lr_sb_printf(struct lr_sb *sb, const char *fmt, ...)
{
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(NULL, 0, fmt, ap);
	va_end(ap);
	if (n < 0 || !reserve(sb, (size_t)n))
		return;
	va_start(ap, fmt);
	vsnprintf(sb->buf + sb->len, (size_t)n + 1, fmt, ap);
	va_end(ap);
	sb->len += (size_t)n;
}

const char *lr_sb_str(const struct lr_sb *sb)
{
	return sb->buf ? sb->buf : "";
}
