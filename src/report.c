#include "report.h"

#include <stdint.h>
#include <string.h>

#include "strbuf.h"
#include "text.h"

/* s as a JSON string: valid whatever the bytes (see text.h). */
void lr_report_json(FILE *out, const char *s)
{
	struct lr_sb sb;

	lr_sb_init(&sb);
	lr_text_json(&sb, s);
	fputs(lr_sb_str(&sb), out);
	lr_sb_finish(&sb);
}

/* A nullable column: JSON null for SQL NULL. */
void lr_report_json_or_null(FILE *out, const char *s)
{
	if (s)
		lr_report_json(out, s);
	else
		fputs("null", out);
}

/* s for a terminal, control characters and invalid UTF-8 escaped, in at
 * most width columns and padded with spaces to pad columns. */
void lr_report_show(FILE *out, const char *s, size_t width, size_t pad)
{
	struct lr_sb sb;
	size_t used;

	lr_sb_init(&sb);
	used = lr_text_show(&sb, s ? s : "", width);
	fprintf(out, "%s%*s", lr_sb_str(&sb), used < pad ? (int)(pad - used) : 0, "");
	lr_sb_finish(&sb);
}

/* A resource's name as users wrote it: keys are stored with a prefix. */
const char *lr_report_name(const char *name, const char *kind)
{
	return strcmp(kind, "key") == 0 && strncmp(name, "id:", 3) == 0 ? name + 3 : name;
}
