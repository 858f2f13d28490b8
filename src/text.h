/*
 * Untrusted bytes made safe to store, to show on a terminal and to put in
 * JSON. Command lines, host and user names are bytes: they need not be
 * UTF-8 and may hold terminal escapes.
 *
 * UTF-8 is decoded strictly (RFC 3629): overlong forms, surrogates
 * (U+D800-U+DFFF), code points above U+10FFFF and truncated sequences are
 * invalid. An invalid sequence is one "maximal subpart" (Unicode 15,
 * section 3.9): the longest prefix of a valid sequence, at least one byte.
 *
 * A character is "hidden" if showing it raw could change what a reader
 * sees beyond the character itself: C0 controls (U+0000-U+001F), DEL,
 * C1 controls (U+0080-U+009F, which some terminals obey like ESC [), the
 * line and paragraph separators U+2028 and U+2029, and the bidirectional
 * formatting characters (U+061C, U+200E, U+200F, U+202A-U+202E,
 * U+2066-U+2069), which reorder the text around them.
 *
 * Escaped text (lr_text_escape):
 *   - a printable, valid UTF-8 character stays as it is;
 *   - every byte of a hidden character or of an invalid sequence becomes
 *     \xHH (two lowercase hex digits): ESC is \x1b, the byte E9 is \xe9,
 *     U+202E is \xe2\x80\xae;
 *   - LR_TEXT_RECORD: a backslash becomes \\, so a backslash is always
 *     followed by '\' or 'x' and the original bytes can be recovered
 *     exactly (\\ -> \, \xHH -> byte HH, anything else as is). Any other
 *     character after a backslash is free for marks (see lr_text_record).
 *   - LR_TEXT_SHOW: a backslash stays as it is. For people: text already
 *     escaped for the record shows unchanged, and a raw control byte
 *     shows as \xHH, though it then reads like the four characters.
 *     Lengths are terminal columns: East Asian wide characters count two.
 * The result is valid UTF-8 without hidden characters.
 *
 * A message line (lr_text_line): escaped like LR_TEXT_SHOW, into a fixed
 * buffer. Every diagnostic goes through it (log.h), so that what a user or
 * a server gave shows on one line and never drives the terminal.
 *
 * JSON (lr_text_json): a string literal that is valid UTF-8 and valid
 * JSON (RFC 8259) whatever the input: '"' and '\' are escaped, a hidden
 * character is written \uXXXX (so it decodes to exactly that character),
 * and each invalid sequence becomes \ufffd (U+FFFD REPLACEMENT
 * CHARACTER). Valid input round-trips through a JSON parser unchanged.
 *
 * May use: strbuf.
 */
#ifndef LR_TEXT_H
#define LR_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "strbuf.h"

enum lr_text_mode {
	LR_TEXT_RECORD, /* reversible: a backslash is doubled */
	LR_TEXT_SHOW,   /* for a terminal: a backslash is kept */
};

int lr_text_decode(const char *s, size_t n, uint32_t *cp);
bool lr_text_hidden(uint32_t cp);
size_t lr_text_escape(struct lr_sb *sb, const char *s, size_t n, enum lr_text_mode mode,
                      size_t *budget);
char *lr_text_record(const char *s, size_t max_chars);
size_t lr_text_show(struct lr_sb *sb, const char *s, size_t max_cols);
size_t lr_text_line(char *dst, size_t size, const char *s);
void lr_text_json(struct lr_sb *sb, const char *s);

#endif
