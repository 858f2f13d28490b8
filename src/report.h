/*
 * lockrunctl's output: stored text made safe for a terminal or for JSON,
 * and resource names as users wrote them. Everything a command prints
 * that came from the database goes through here, since any client may
 * have written those bytes.
 *
 * May use: strbuf, text.
 */
#ifndef LR_REPORT_H
#define LR_REPORT_H

#include <stddef.h>
#include <stdio.h>

/* What stands for a command line that the account may not see: lockrun's
 * own account reads through the procedures of sql/routines/75-views.sql,
 * which never show one (it often carries secrets). */
#define LR_REPORT_HIDDEN "(command hidden: operator account only)"

void lr_report_json(FILE *out, const char *s);
void lr_report_json_or_null(FILE *out, const char *s);
void lr_report_show(FILE *out, const char *s, size_t width, size_t pad);
const char *lr_report_name(const char *name, const char *kind);

#endif
