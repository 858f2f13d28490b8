/* Escaping of untrusted bytes: the strict UTF-8 decoder against a
 * reference built from the definition, every byte value, every 1-3 byte
 * sequence, and what the record, show and JSON forms promise. */
#include <stdint.h>
#include <stdlib.h>

#include "tap.h"
#include "text.h"

/* --- a reference decoder, written from the definition (RFC 3629) ------- */

static size_t ref_seq_len(unsigned char b)
{
	return b < 0x80             ? 1
	       : (b & 0xe0) == 0xc0 ? 2
	       : (b & 0xf0) == 0xe0 ? 3
	       : (b & 0xf8) == 0xf0 ? 4
	                            : 0;
}

/* Whether the L bytes at u are the UTF-8 encoding of a scalar value. */
static bool ref_valid(const unsigned char *u, size_t L, uint32_t *cp)
{
	static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
	uint32_t c = L == 1 ? u[0] : u[0] & (0x7f >> L);

	for (size_t i = 1; i < L; i++) {
		if ((u[i] & 0xc0) != 0x80)
			return false;
		c = c << 6 | (u[i] & 0x3f);
	}
	*cp = c;
	return c >= min[L] && !(c >= 0xd800 && c <= 0xdfff) && c <= 0x10ffff;
}

/* Whether the k bytes at u begin some valid L-byte sequence. The code
 * points sharing a prefix form an aligned block that lies wholly inside
 * or outside the surrogates, so its two ends decide. */
static bool ref_prefix(const unsigned char *u, size_t k, size_t L)
{
	unsigned char a[4], b[4];
	uint32_t cp;

	for (size_t i = 0; i < L; i++) {
		a[i] = i < k ? u[i] : 0x80;
		b[i] = i < k ? u[i] : 0xbf;
	}
	return ref_valid(a, L, &cp) || ref_valid(b, L, &cp);
}

/* What lr_text_decode() must return for the n bytes at u. */
static int ref_decode(const unsigned char *u, size_t n, uint32_t *cp)
{
	size_t L = ref_seq_len(u[0]);

	if (L == 0)
		return -1;
	if (n >= L && ref_valid(u, L, cp))
		return (int)L;
	for (size_t k = (n < L - 1 ? n : L - 1); k > 1; k--)
		if (ref_prefix(u, k, L))
			return -(int)k;
	return -1;
}

static size_t encode(uint32_t c, char *out)
{
	if (c < 0x80) {
		out[0] = (char)c;
		return 1;
	}
	if (c < 0x800) {
		out[0] = (char)(0xc0 | c >> 6);
		out[1] = (char)(0x80 | (c & 0x3f));
		return 2;
	}
	if (c < 0x10000) {
		out[0] = (char)(0xe0 | c >> 12);
		out[1] = (char)(0x80 | (c >> 6 & 0x3f));
		out[2] = (char)(0x80 | (c & 0x3f));
		return 3;
	}
	out[0] = (char)(0xf0 | c >> 18);
	out[1] = (char)(0x80 | (c >> 12 & 0x3f));
	out[2] = (char)(0x80 | (c >> 6 & 0x3f));
	out[3] = (char)(0x80 | (c & 0x3f));
	return 4;
}

/* --- properties of the outputs ------------------------------------------ */

/* Valid UTF-8 and nothing hidden in it; counts its characters. */
static bool clean(const char *s, size_t n, size_t *chars)
{
	uint32_t cp;
	size_t i = 0, c = 0;

	while (i < n) {
		int len = lr_text_decode(s + i, n - i, &cp);
		if (len < 0 || lr_text_hidden(cp))
			return false;
		i += (size_t)len;
		c++;
	}
	if (chars)
		*chars = c;
	return true;
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

/* Undoes LR_TEXT_RECORD into out; false on anything a record never has. */
static bool unrecord(const char *s, size_t n, char *out, size_t *outlen)
{
	size_t o = 0;

	for (size_t i = 0; i < n; i++) {
		if (s[i] != '\\') {
			out[o++] = s[i];
		} else if (i + 1 < n && s[i + 1] == '\\') {
			out[o++] = '\\';
			i++;
		} else if (i + 3 < n && s[i + 1] == 'x' && hexval(s[i + 2]) >= 0 &&
		           hexval(s[i + 3]) >= 0) {
			out[o++] = (char)(hexval(s[i + 2]) << 4 | hexval(s[i + 3]));
			i += 3;
		} else {
			return false;
		}
	}
	*outlen = o;
	return true;
}

/* Decodes a JSON string literal (as lr_text_json writes it) into UTF-8. */
static bool unjson(const char *s, char *out, size_t *outlen)
{
	size_t n = strlen(s), o = 0;

	if (n < 2 || s[0] != '"' || s[n - 1] != '"')
		return false;
	for (size_t i = 1; i < n - 1; i++) {
		unsigned char c = (unsigned char)s[i];
		if (c < 0x20 || c == '"')
			return false;
		if (c != '\\') {
			out[o++] = (char)c;
		} else if (s[i + 1] == '"' || s[i + 1] == '\\') {
			out[o++] = s[++i];
		} else if (s[i + 1] == 'u') {
			uint32_t cp = 0;
			for (int k = 2; k < 6; k++) {
				if (hexval(s[i + k]) < 0)
					return false;
				cp = cp << 4 | (uint32_t)hexval(s[i + k]);
			}
			if (cp >= 0xd800 && cp <= 0xdfff)
				return false; /* never a lone surrogate */
			o += encode(cp, out + o);
			i += 5;
		} else {
			return false;
		}
	}
	*outlen = o;
	return true;
}

static const char *escaped(struct lr_sb *sb, const char *s, size_t n, enum lr_text_mode mode)
{
	size_t budget = SIZE_MAX;

	lr_sb_reset(sb);
	lr_text_escape(sb, s, n, mode, &budget);
	return lr_sb_str(sb);
}

static const char *json(struct lr_sb *sb, const char *s)
{
	lr_sb_reset(sb);
	lr_text_json(sb, s);
	return lr_sb_str(sb);
}

static size_t chars_of(const char *s)
{
	size_t c = 0;
	clean(s, strlen(s), &c);
	return c;
}

int main(void)
{
	struct lr_sb sb;
	char buf[64], out[64], big[2048];
	size_t olen;
	int bad;

	lr_sb_init(&sb);

	/* Every single byte, in each form. */
	bad = 0;
	for (int b = 0; b < 256; b++) {
		char in[1] = {(char)b}, want[16];
		bool plain = b >= 0x20 && b < 0x7f;
		snprintf(want, sizeof(want), "\\x%02x", b);
		if (plain)
			snprintf(want, sizeof(want), "%c", b);
		if (b == '\\')
			snprintf(want, sizeof(want), "\\\\");
		bad += strcmp(escaped(&sb, in, 1, LR_TEXT_RECORD), want) != 0;
		if (b == '\\')
			snprintf(want, sizeof(want), "\\");
		bad += strcmp(escaped(&sb, in, 1, LR_TEXT_SHOW), want) != 0;
		if (b == 0)
			continue;
		snprintf(want, sizeof(want), "\"%c\"", b);
		if (b == '"' || b == '\\')
			snprintf(want, sizeof(want), "\"\\%c\"", b);
		else if (b < 0x20 || b == 0x7f)
			snprintf(want, sizeof(want), "\"\\u%04x\"", b);
		else if (b >= 0x80)
			snprintf(want, sizeof(want), "\"\\ufffd\"");
		bad += strcmp(json(&sb, (char[]){(char)b, 0}), want) != 0;
	}
	ok(bad == 0, "every byte value alone: record, show and JSON forms (%d wrong)", bad);
	is_str(escaped(&sb, "caf\xe9", 4, LR_TEXT_RECORD), "caf\\xe9", "Latin-1 byte: \\xe9");
	is_str(escaped(&sb, "a\\b", 3, LR_TEXT_RECORD), "a\\\\b", "record doubles a backslash");
	is_str(escaped(&sb, "a\\b", 3, LR_TEXT_SHOW), "a\\b", "show keeps a backslash");
	is_str(escaped(&sb, "\x1b[2J\n", 5, LR_TEXT_RECORD), "\\x1b[2J\\x0a", "ESC and newline");
	is_str(escaped(&sb, "x\0y", 3, LR_TEXT_RECORD), "x\\x00y", "NUL inside a length");
	is_str(escaped(&sb, "caf\xc3\xa9 \xf0\x9f\x98\x80", 10, LR_TEXT_RECORD),
	       "caf\xc3\xa9 \xf0\x9f\x98\x80", "valid UTF-8 stays as it is (2 and 4 bytes)");
	is_str(escaped(&sb,
	               "\xc2\x9b"
	               "1m",
	               4, LR_TEXT_SHOW),
	       "\\xc2\\x9b1m", "a C1 control (CSI) is escaped byte by byte");
	is_str(escaped(&sb,
	               "a\xe2\x80\xae"
	               "b",
	               5, LR_TEXT_SHOW),
	       "a\\xe2\\x80\\xaeb", "a bidi override is escaped");
	is_str(escaped(&sb, "\xe2\x80\xa8", 3, LR_TEXT_SHOW), "\\xe2\\x80\\xa8",
	       "the line separator is escaped");
	is_str(escaped(&sb, "\xed\xa0\x80", 3, LR_TEXT_RECORD), "\\xed\\xa0\\x80",
	       "an encoded surrogate is invalid");
	is_str(escaped(&sb, "\xc0\xaf", 2, LR_TEXT_RECORD), "\\xc0\\xaf",
	       "overlong '/' is invalid");
	is_str(escaped(&sb, "\xe2\x82", 2, LR_TEXT_RECORD), "\\xe2\\x82",
	       "a truncated sequence is escaped");
	is_str(escaped(&sb, "\xf4\x90\x80\x80", 4, LR_TEXT_RECORD), "\\xf4\\x90\\x80\\x80",
	       "above U+10FFFF is invalid");

	/* The decoder against the reference: every sequence of 1 to 3
	 * bytes, and 4-byte ones with every lead and second byte. */
	bad = 0;
	for (uint32_t v = 0; v < (1u << 24); v++) {
		unsigned char u[3] = {(unsigned char)(v >> 16), (unsigned char)(v >> 8),
		                      (unsigned char)v};
		for (size_t n = 1; n <= 3; n++) {
			uint32_t a = 0, b = 0;
			int got, want;
			if (n < 3 && (v & ((1u << (8 * (3 - n))) - 1)))
				continue; /* shorter inputs once each */
			got = lr_text_decode((const char *)u, n, &a);
			want = ref_decode(u, n, &b);
			bad += got != want || (got > 0 && a != b);
		}
	}
	ok(bad == 0, "decoder matches the reference on all 1-3 byte inputs (%d differ)", bad);
	bad = 0;
	{
		static const unsigned char tail[] = {0x00, 0x7f, 0x80, 0x8f, 0x90,
		                                     0x9f, 0xa0, 0xbf, 0xc0, 0xff};
		for (unsigned lead = 0; lead < 256; lead++)
			for (unsigned second = 0; second < 256; second++)
				for (size_t i = 0; i < sizeof(tail); i++)
					for (size_t j = 0; j < sizeof(tail); j++) {
						unsigned char u[4] = {(unsigned char)lead,
						                      (unsigned char)second,
						                      tail[i], tail[j]};
						uint32_t a = 0, b = 0;
						int got = lr_text_decode((const char *)u, 4, &a);
						int want = ref_decode(u, 4, &b);
						bad += got != want || (got > 0 && a != b);
					}
	}
	ok(bad == 0, "decoder matches the reference on 4-byte inputs (%d differ)", bad);
	ok(lr_text_decode("\xe0\xa0", 2, &(uint32_t){0}) == -2 &&
	       lr_text_decode("\xe0\x9f\x80", 3, &(uint32_t){0}) == -1 &&
	       lr_text_decode("\xf0\x90\x80", 3, &(uint32_t){0}) == -3 &&
	       lr_text_decode("\xed\xa0\x80", 3, &(uint32_t){0}) == -1,
	   "maximal subparts: truncated E0 A0 is 2, overlong E0 9F 1, F0 90 80 3, surrogate 1");

	/* Every scalar value: escaped exactly when hidden, and JSON gives
	 * it back. */
	bad = 0;
	for (uint32_t c = 1; c <= 0x10ffff; c++) {
		size_t n;
		const char *r;
		if (c >= 0xd800 && c <= 0xdfff)
			continue;
		n = encode(c, buf);
		buf[n] = '\0';
		r = escaped(&sb, buf, n, LR_TEXT_RECORD);
		if (c == '\\' || lr_text_hidden(c))
			bad += strcmp(r, buf) == 0 || !unrecord(r, strlen(r), out, &olen) ||
			       olen != n || memcmp(out, buf, n) != 0;
		else
			bad += strcmp(r, buf) != 0;
		bad += !unjson(json(&sb, buf), out, &olen) || olen != n || memcmp(out, buf, n);
		bad += !clean(lr_sb_str(&sb), sb.len, NULL);
	}
	ok(bad == 0, "every scalar value: record, and a JSON round trip (%d wrong)", bad);
	ok(lr_text_hidden(0x1b) && lr_text_hidden(0x7f) && lr_text_hidden(0x9b) &&
	       lr_text_hidden(0x202e) && lr_text_hidden(0x2066) && !lr_text_hidden(' ') &&
	       !lr_text_hidden(0xa0) && !lr_text_hidden(0x1f600),
	   "hidden: controls, C1, bidi; not space, NBSP or an emoji");

	/* Any two bytes: the record reads back exactly and is clean; JSON
	 * is clean and decodes to the input wherever the input was valid. */
	bad = 0;
	for (uint32_t v = 0; v < (1u << 16); v++) {
		char in[3] = {(char)(v >> 8), (char)v, 0};
		const char *r = escaped(&sb, in, 2, LR_TEXT_RECORD);
		bad += !clean(r, strlen(r), NULL) || !unrecord(r, strlen(r), out, &olen) ||
		       olen != 2 || memcmp(out, in, 2) != 0;
		r = escaped(&sb, in, 2, LR_TEXT_SHOW);
		bad += !clean(r, strlen(r), NULL);
		if (in[0] && in[1]) {
			uint32_t cp;
			bool valid = lr_text_decode(in, 2, &cp) == 2 ||
			             (lr_text_decode(in, 2, &cp) == 1 &&
			              lr_text_decode(in + 1, 1, &cp) == 1);
			bad += !unjson(json(&sb, in), out, &olen) ||
			       !clean(lr_sb_str(&sb), sb.len, NULL) ||
			       (valid && (olen != 2 || memcmp(out, in, 2) != 0));
		}
	}
	ok(bad == 0, "every 2-byte input: record reads back, all forms clean (%d wrong)", bad);
	is_str(json(&sb, "\"q\" \\ \n\t\x1b[31m\xe9\xed\xa0\x80 \xc3\xa9"),
	       "\"\\\"q\\\" \\\\ \\u000a\\u0009\\u001b[31m\\ufffd\\ufffd\\ufffd\\ufffd \xc3\xa9\"",
	       "JSON: quotes, backslash, controls, one U+FFFD per maximal subpart");
	is_str(json(&sb, NULL), "\"\"", "JSON: NULL is the empty string");

	/* Records fit their column: at most max characters, cut only between
	 * escapes, marked with \... when cut. */
	{
		char *r;
		memset(big, 'a', 1024);
		big[1024] = '\0';
		r = lr_text_record(big, 1024);
		ok(r && strcmp(r, big) == 0, "1024 characters fit 1024 exactly");
		free(r);
		big[1024] = 'b';
		big[1025] = '\0';
		r = lr_text_record(big, 1024);
		ok(r && chars_of(r) == 1024 && strncmp(r, big, 1020) == 0 &&
		       strcmp(r + 1020, "\\...") == 0,
		   "1025 characters: 1020 kept, then the mark");
		free(r);
		memset(big, 'a', 1019);
		strcpy(big + 1019, "\x1b"
		                   "bcd");
		r = lr_text_record(big, 1024);
		ok(r && chars_of(r) == 1023 && strcmp(r + 1019, "\\...") == 0,
		   "an escape that does not fit is left out whole");
		free(r);
		for (int i = 0; i < 700; i++)
			memcpy(big + 2 * i, "\xc3\xa9", 2);
		big[1400] = '\0';
		r = lr_text_record(big, 1024);
		ok(r && chars_of(r) == 700 && strcmp(r, big) == 0,
		   "the limit counts characters, not bytes");
		free(r);
		for (int i = 0; i < 600; i++)
			big[i] = (char)(0x80 + i % 64);
		big[600] = '\0';
		r = lr_text_record(big, 1024);
		ok(r && chars_of(r) == 1024 && clean(r, strlen(r), NULL) &&
		       strcmp(r + 1020, "\\...") == 0 && strncmp(r, "\\x80\\x81", 8) == 0,
		   "600 invalid bytes: 255 escapes and the mark, all valid UTF-8");
		free(r);
		r = lr_text_record("ab", 1);
		is_str(r, "a", "no room for the mark: cut without it");
		free(r);
	}
	{
		size_t w;
		char *r;
		lr_sb_reset(&sb);
		w = lr_text_show(&sb, "h\x1bst\xc3\xa9xyz", 4);
		ok(w == 1 && strcmp(lr_sb_str(&sb), "h") == 0,
		   "show: the width counts escapes, never splits one (%zu)", w);
		lr_sb_reset(&sb);
		w = lr_text_show(&sb, "\xc3\xa9t\xc3\xa9", 10);
		ok(w == 3 && strcmp(lr_sb_str(&sb), "\xc3\xa9t\xc3\xa9") == 0,
		   "show: a multibyte character is one column");
		lr_sb_reset(&sb);
		w = lr_text_show(&sb, "\xe6\xbc\xa2\xe5\xad\x97\xe6\xbc\xa2", 5);
		ok(w == 4 && strcmp(lr_sb_str(&sb), "\xe6\xbc\xa2\xe5\xad\x97") == 0,
		   "show: a wide character is two columns, and never half shown");
		r = lr_text_record("\xe6\xbc\xa2\xe5\xad\x97\xe6\xbc\xa2", 2);
		is_str(r, "\xe6\xbc\xa2\xe5\xad\x97", "record: a wide character is one character");
		free(r);
	}
	{
		/* A message line: what show gives, into a fixed buffer, never an
		 * escape cut in two. */
		char line[16];
		size_t n;

		n = lr_text_line(line, sizeof(line), "a\x1b]0;x\a\\\xc3\xa9\n");
		is_str(line, "a\\x1b]0;x\\x07\\", "line: a character is never cut in two (%s)",
		       line);
		ok(n == strlen(line), "line: returns its length");
		lr_text_line(line, sizeof(line), "\xe2\x80\xae\\\xc3\xa9");
		is_str(line, "\\xe2\\x80\\xae\\\xc3\xa9", "line: bidi escaped, backslash kept (%s)",
		       line);
		lr_text_line(line, sizeof(line), "x\ny\r\t\x7f");
		is_str(line, "x\\x0ay\\x0d\\x09", "line: no line ends, tabs or DEL raw (%s)", line);
		ok(lr_text_line(line, 1, "abc") == 0 && line[0] == '\0', "line: room for nothing");
	}

	lr_sb_finish(&sb);
	return tap_done();
}
