#include "text.h"

#include <stdlib.h>
#include <string.h>

/* What lr_text_record() appends when it had to cut: a backslash followed
 * by neither '\' nor 'x' never occurs in recorded text otherwise. */
#define CUT_MARK "\\..."

/*
 * Decodes the character at s (n >= 1 bytes available). Returns its length
 * (1-4) and sets *cp, or, for an invalid sequence, minus the length of
 * its maximal subpart (1-3). The ranges of the second byte are those of
 * Unicode table 3-7; they exclude overlong forms, surrogates and code
 * points above U+10FFFF. No system calls.
 */
int lr_text_decode(const char *s, size_t n, uint32_t *cp)
{
	const unsigned char *u = (const unsigned char *)s;
	unsigned char lo = 0x80, hi = 0xbf;
	size_t len;
	uint32_t c;

	if (u[0] < 0x80) {
		*cp = u[0];
		return 1;
	}
	if (u[0] >= 0xc2 && u[0] <= 0xdf) {
		len = 2;
		c = u[0] & 0x1f;
	} else if (u[0] >= 0xe0 && u[0] <= 0xef) {
		len = 3;
		c = u[0] & 0x0f;
		if (u[0] == 0xe0)
			lo = 0xa0; /* overlong below U+0800 */
		else if (u[0] == 0xed)
			hi = 0x9f; /* surrogates */
	} else if (u[0] >= 0xf0 && u[0] <= 0xf4) {
		len = 4;
		c = u[0] & 0x07;
		if (u[0] == 0xf0)
			lo = 0x90; /* overlong below U+10000 */
		else if (u[0] == 0xf4)
			hi = 0x8f; /* above U+10FFFF */
	} else {
		return -1; /* a continuation byte, C0, C1 or F5-FF */
	}
	for (size_t i = 1; i < len; i++) {
		if (i >= n || u[i] < lo || u[i] > hi)
			return -(int)i;
		c = c << 6 | (u[i] & 0x3f);
		lo = 0x80;
		hi = 0xbf;
	}
	*cp = c;
	return (int)len;
}

/* Whether showing cp raw could do more than show a character: see text.h. */
bool lr_text_hidden(uint32_t cp)
{
	return cp < 0x20 || (cp >= 0x7f && cp <= 0x9f) || cp == 0x2028 || cp == 0x2029 ||
	       cp == 0x061c || cp == 0x200e || cp == 0x200f || (cp >= 0x202a && cp <= 0x202e) ||
	       (cp >= 0x2066 && cp <= 0x2069);
}

/* Whether a terminal gives cp two columns: the East Asian Wide and
 * Fullwidth blocks (after Markus Kuhn's wcwidth), without asking the
 * locale. Approximate; it errs towards two. */
static bool wide(uint32_t cp)
{
	return (cp >= 0x1100 && cp <= 0x115f) || cp == 0x2329 || cp == 0x232a ||
	       (cp >= 0x2e80 && cp <= 0xa4cf && cp != 0x303f) || (cp >= 0xac00 && cp <= 0xd7a3) ||
	       (cp >= 0xf900 && cp <= 0xfaff) || (cp >= 0xfe10 && cp <= 0xfe19) ||
	       (cp >= 0xfe30 && cp <= 0xfe6f) || (cp >= 0xff00 && cp <= 0xff60) ||
	       (cp >= 0xffe0 && cp <= 0xffe6) || (cp >= 0x1f300 && cp <= 0x1f64f) ||
	       (cp >= 0x1f900 && cp <= 0x1f9ff) || (cp >= 0x20000 && cp <= 0x3fffd);
}

static const char hex[] = "0123456789abcdef";

/*
 * How the character at s[0..n) is written (see text.h): its bytes as they
 * are, a doubled backslash (LR_TEXT_RECORD), or \xHH for each byte of a
 * hidden character or invalid sequence. Fills out (at most 16 bytes) and
 * *outlen, sets *cost to the characters it takes (LR_TEXT_SHOW: terminal
 * columns, a wide character two) and returns how many bytes of s it
 * covers. No system calls.
 */
static size_t piece(const char *s, size_t n, enum lr_text_mode mode, char out[16], size_t *outlen,
                    size_t *cost)
{
	uint32_t cp = 0;
	int len = lr_text_decode(s, n, &cp);
	size_t bytes = (size_t)(len < 0 ? -len : len);

	if (len > 0 && !lr_text_hidden(cp) && !(cp == '\\' && mode == LR_TEXT_RECORD)) {
		memcpy(out, s, bytes);
		*outlen = bytes;
		*cost = mode == LR_TEXT_SHOW && wide(cp) ? 2 : 1;
	} else if (len > 0 && cp == '\\') {
		memcpy(out, "\\\\", 2);
		*outlen = *cost = 2;
	} else {
		for (size_t k = 0; k < bytes; k++) {
			unsigned char b = (unsigned char)s[k];
			char e[4] = {'\\', 'x', hex[b >> 4], hex[b & 15]};
			memcpy(out + 4 * k, e, sizeof(e));
		}
		*outlen = *cost = 4 * bytes;
	}
	return bytes;
}

/*
 * Appends s[0..n) to sb escaped as text.h describes, writing at most
 * *budget characters (an escape is never split) and taking what it wrote
 * off *budget. LR_TEXT_SHOW counts terminal columns instead: a wide
 * character takes two. Returns how many bytes of s it covered: n unless
 * the budget ran out. One pass, no system calls beyond the buffer's
 * growth.
 */
size_t lr_text_escape(struct lr_sb *sb, const char *s, size_t n, enum lr_text_mode mode,
                      size_t *budget)
{
	size_t i = 0;

	while (i < n) {
		char out[16];
		size_t outlen, cost, bytes = piece(s + i, n - i, mode, out, &outlen, &cost);

		if (*budget < cost)
			break;
		lr_sb_add(sb, out, outlen);
		*budget -= cost;
		i += bytes;
	}
	return i;
}

/*
 * s as one line of a message, escaped like LR_TEXT_SHOW, into dst (size
 * bytes, NUL-terminated, cut at an escape boundary): for diagnostics that
 * quote what a user or a server gave, so that a control character shows as
 * \xHH and can neither end the line nor drive the terminal. Returns the
 * length written. One pass, no allocation: usable where memory is short.
 */
size_t lr_text_line(char *dst, size_t size, const char *s)
{
	size_t i = 0, n = strlen(s), len = 0;

	if (!size)
		return 0;
	while (i < n) {
		char out[16];
		size_t outlen, cost, bytes = piece(s + i, n - i, LR_TEXT_SHOW, out, &outlen, &cost);

		if (len + outlen >= size)
			break;
		memcpy(dst + len, out, outlen);
		len += outlen;
		i += bytes;
	}
	dst[len] = '\0';
	return len;
}

/*
 * s escaped for the record (LR_TEXT_RECORD), in at most max_chars
 * characters: what fits a VARCHAR(max_chars) column. Longer text is cut
 * at an escape boundary and ends in the mark "\...", so a cut record is
 * still valid UTF-8 and reads back unambiguously. Returns a heap string
 * (the caller frees it), or NULL when out of memory. Called once per run
 * for the command line, host and user; at most two passes over s.
 */
char *lr_text_record(const char *s, size_t max_chars)
{
	struct lr_sb sb;
	size_t len = strlen(s), budget = max_chars;
	char *out;

	lr_sb_init(&sb);
	if (lr_text_escape(&sb, s, len, LR_TEXT_RECORD, &budget) < len) {
		bool mark = max_chars >= strlen(CUT_MARK);
		lr_sb_reset(&sb);
		budget = mark ? max_chars - strlen(CUT_MARK) : max_chars;
		lr_text_escape(&sb, s, len, LR_TEXT_RECORD, &budget);
		if (mark)
			lr_sb_puts(&sb, CUT_MARK);
	}
	out = sb.oom ? NULL : strdup(lr_sb_str(&sb));
	lr_sb_finish(&sb);
	return out;
}

/* Appends s for a terminal (LR_TEXT_SHOW), in at most max_cols columns;
 * returns how many it took, for padding a column. */
size_t lr_text_show(struct lr_sb *sb, const char *s, size_t max_cols)
{
	size_t budget = max_cols;

	lr_text_escape(sb, s ? s : "", s ? strlen(s) : 0, LR_TEXT_SHOW, &budget);
	return max_cols - budget;
}

/*
 * Appends s as a JSON string literal (see text.h); NULL is the empty
 * string. Always valid JSON and valid UTF-8, whatever the bytes.
 */
void lr_text_json(struct lr_sb *sb, const char *s)
{
	size_t n = s ? strlen(s) : 0, i = 0;

	lr_sb_puts(sb, "\"");
	while (i < n) {
		uint32_t cp = 0;
		int len = lr_text_decode(s + i, n - i, &cp);

		if (len < 0) {
			lr_sb_puts(sb, "\\ufffd");
			i += (size_t)-len;
			continue;
		}
		if (cp == '"' || cp == '\\') {
			char e[2] = {'\\', (char)cp};
			lr_sb_add(sb, e, sizeof(e));
		} else if (lr_text_hidden(cp)) {
			char e[6] = {'\\',
			             'u',
			             hex[cp >> 12 & 15],
			             hex[cp >> 8 & 15],
			             hex[cp >> 4 & 15],
			             hex[cp & 15]};
			lr_sb_add(sb, e, sizeof(e));
		} else {
			lr_sb_add(sb, s + i, (size_t)len);
		}
		i += (size_t)len;
	}
	lr_sb_puts(sb, "\"");
}
