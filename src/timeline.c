#include "timeline.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "duration.h"
#include "history.h"
#include "report.h"
#include "strbuf.h"
#include "text.h"

/* Grant rows drawn at most (by resource name, then time): beyond, the
 * picture says it was cut. */
#define MAX_BARS  20000
#define MAX_SLOTS 64

/* SVG geometry, in pixels. */
#define W_TOTAL 1200
#define W_LABEL 220
#define W_PLOT  940
#define H_TOP   56
#define H_LANE  26
#define H_FOOT  64

/* Text rendering: columns of the plot. */
#define TEXT_COLS 60

/* Columns of the query, in order. */
enum {
	C_ID,
	C_RES,
	C_KIND,
	C_PERMITS,
	C_FENCE,
	C_REQ_US,
	C_ACQ_US,
	C_END_US,
	C_REASON,
	C_STATUS,
	C_SIGNAL,
	C_HOST,
	C_PID,
	C_USER,
	C_CMD,
	C_REQ,
	C_ACQ,
	C_END,
	C_LAPSED,
	C_NCOLS
};

/* How a grant ended, for its colour and its text mark. */
enum how { H_RUNNING, H_OK, H_FAILED, H_KILLED, H_LOST, H_SKIPPED, H_COUNT };

static const struct {
	const char *cls, *fill, *label;
	char mark;
} hows[H_COUNT] = {
    [H_RUNNING] = {"running", "#3b82c4", "running", '='},
    [H_OK] = {"ok", "#3a9a48", "exited 0", '#'},
    [H_FAILED] = {"failed", "#e8912d", "exited non-zero", 'f'},
    [H_KILLED] = {"killed", "#d63c3c", "killed by a signal, aborted, spawn failed", 'k'},
    [H_LOST] = {"lost", "#8e44ad", "lost, expired or released by force", 'L'},
    [H_SKIPPED] = {"skipped", "#9a9a9a", "skipped (--once-per)", 's'},
};

struct bar {
	char *f[C_NCOLS];
	double req, acq, end; /* seconds from the window's start */
	enum how how;
	int lane;
};

/* floor and ceil without libm: times here are far within long long. */
static double fl(double x)
{
	double t = (double)(long long)x;
	return t > x ? t - 1 : t;
}

static double cl(double x)
{
	double t = (double)(long long)x;
	return t < x ? t + 1 : t;
}

static enum how how_of(char **f)
{
	const char *r = f[C_REASON];

	if (!r)
		return H_RUNNING;
	if (strcmp(r, "exited") == 0)
		return f[C_STATUS] && strcmp(f[C_STATUS], "0") == 0 ? H_OK : H_FAILED;
	if (strcmp(r, "skipped") == 0)
		return H_SKIPPED;
	if (strcmp(r, "lost") == 0 || strcmp(r, "expired") == 0 || strcmp(r, "force_released") == 0)
		return H_LOST;
	return H_KILLED;
}

/* Text for SVG: escaped as lockrunctl shows stored text (no control
 * character, valid UTF-8: a browser refuses a document with either), then
 * XML's five characters. */
static void xml_text(FILE *out, const char *s)
{
	struct lr_sb sb;

	lr_sb_init(&sb);
	lr_text_show(&sb, s ? s : "", SIZE_MAX);
	for (const char *p = lr_sb_str(&sb); *p; p++) {
		switch (*p) {
		case '&':
			fputs("&amp;", out);
			break;
		case '<':
			fputs("&lt;", out);
			break;
		case '>':
			fputs("&gt;", out);
			break;
		case '"':
			fputs("&quot;", out);
			break;
		case '\'':
			fputs("&apos;", out);
			break;
		default:
			fputc(*p, out);
		}
	}
	lr_sb_finish(&sb);
}

static void free_bars(struct bar *b, size_t n)
{
	for (size_t i = 0; b && i < n; i++)
		for (int k = 0; k < C_NCOLS; k++)
			free(b[i].f[k]);
	free(b);
}

/*
 * Reads the grants that overlap the window (their wait or their hold),
 * one row per grant and resource, by resource and grant time. One query,
 * plus one for the server's clock.
 */
static bool load(lr_db *db, const struct lr_timeline_query *q, struct bar **out, size_t *n,
                 double *now, char *err, size_t errlen)
{
	struct lr_sb sb;
	struct bar *b = NULL;
	MYSQL_ROW row;
	bool ok = false;

	*out = NULL;
	*n = 0;
	lr_sb_init(&sb);
	if (!lr_db_query(db, "SELECT UNIX_TIMESTAMP(NOW(6))") || !(row = lr_db_fetch(db)))
		goto fail;
	*now = strtod(row[0], NULL);
#define FROM    "(NOW(6) - INTERVAL %llu SECOND)"
#define US(col) "TIMESTAMPDIFF(MICROSECOND, " FROM ", " col ")"
#define TS(col) "DATE_FORMAT(" col ", '%%Y-%%m-%%dT%%H:%%i:%%S.%%fZ')"
	lr_sb_printf(
	    &sb,
	    "SELECT g.id, i.resource, i.kind, i.permits, COALESCE(i.fence, ''), " US(
	        "g.requested_"
	        "at") ", " US("g.acquired_at") ", " US("COALESCE(" LR_HISTORY_ENDED
	                                               ", NOW(6))") ", COALESCE(g.end_reason, "
	                                                            "IF(" LR_HISTORY_LAPSED
	                                                            ", 'expired', NULL)), "
	                                                            "g.exit_status, "
	                                                            "g.term_signal, g.host, g.pid, "
	                                                            "g.os_user, g.command, " TS(
	                                                                "g."
	                                                                "re"
	                                                                "qu"
	                                                                "es"
	                                                                "te"
	                                                                "d_"
	                                                                "a"
	                                                                "t") ", " TS("g."
	                                                                             "acquir"
	                                                                             "ed_"
	                                                                             "at") ", " TS(LR_HISTORY_ENDED) ","
	                                                                                                             " " LR_HISTORY_LAPSED
	                                                                                                             " FROM "
	                                                                                                             "lr_"
	                                                                                                             "grants "
	                                                                                                             "g JOIN "
	                                                                                                             "lr_"
	                                                                                                             "grant_"
	                                                                                                             "items i "
	                                                                                                             "ON "
	                                                                                                             "i.grant_"
	                                                                                                             "id = "
	                                                                                                             "g.id "
	                                                                                                             "LEFT "
	                                                                                                             "JOIN"
	                                                                                                             " " LR_HISTORY_HX
	                                                                                                             " hx ON "
	                                                                                                             "hx."
	                                                                                                             "grant_"
	                                                                                                             "id = "
	                                                                                                             "g.id "
	                                                                                                             "WHERE "
	                                                                                                             "g.ttl_"
	                                                                                                             "ms > 0 "
	                                                                                                             "AND "
	                                                                                                             "g."
	                                                                                                             "requeste"
	                                                                                                             "d_at < "
	                                                                                                             "NOW(6) "
	                                                                                                             "- "
	                                                                                                             "INTERVAL"
	                                                                                                             " %llu "
	                                                                                                             "SECOND "
	                                                                                                             "AND "
	                                                                                                             "COALESCE"
	                                                                                                             "(" LR_HISTORY_ENDED
	                                                                                                             ", "
	                                                                                                             "NOW(6)) "
	                                                                                                             "> " FROM,
	    q->since, q->since, q->since, q->until, q->since);
#undef TS
#undef US
#undef FROM
	if (q->nnames) {
		lr_sb_puts(&sb, " AND i.resource IN (");
		for (size_t k = 0; k < q->nnames; k++) {
			lr_sb_puts(&sb, k ? ", " : "");
			lr_db_sb_quote(db, &sb, q->names[k]);
			lr_sb_puts(&sb, ", CONCAT('id:', ");
			lr_db_sb_quote(db, &sb, q->names[k]);
			lr_sb_puts(&sb, ")");
		}
		lr_sb_puts(&sb, ")");
	}
	lr_sb_printf(&sb, " ORDER BY i.resource, g.acquired_at, g.id LIMIT %d", MAX_BARS);
	if (sb.oom || !lr_db_query(db, lr_sb_str(&sb)))
		goto fail;
	b = calloc(lr_db_num_rows(db) + 1, sizeof(*b));
	if (!b)
		goto fail;
	while ((row = lr_db_fetch(db))) {
		struct bar *r = &b[*n];
		for (int k = 0; k < C_NCOLS; k++)
			if (row[k] && !(r->f[k] = strdup(row[k])))
				goto fail;
		r->req = strtod(row[C_REQ_US], NULL) / 1e6;
		r->acq = strtod(row[C_ACQ_US], NULL) / 1e6;
		r->end = strtod(row[C_END_US], NULL) / 1e6;
		r->how = how_of(r->f);
		(*n)++;
	}
	*out = b;
	b = NULL;
	ok = true;
	goto out;
fail:
	snprintf(err, errlen, "%s", sb.oom ? "out of memory" : lr_db_error(db));
out:
	free_bars(b, *n);
	if (!ok)
		*n = 0;
	lr_sb_finish(&sb);
	return ok;
}

/*
 * Lanes: a resource's grants in the order they were granted, each in the
 * first of its slots that is free by then (so a mutex needs one lane, a
 * semaphore as many as it had holders at once). Sets each bar's lane;
 * returns the number of lanes.
 */
static int assign_lanes(struct bar *b, size_t n)
{
	double busy[MAX_SLOTS];
	int lanes = 0, first = 0, used = 0;

	for (size_t i = 0; i < n; i++) {
		if (i == 0 || strcmp(b[i].f[C_RES], b[i - 1].f[C_RES]) != 0) {
			first = lanes;
			used = 0;
		}
		int s = 0;
		while (s < used && busy[s] > b[i].acq + 1e-9)
			s++;
		if (s == used && used < MAX_SLOTS)
			used++;
		if (s >= MAX_SLOTS)
			s = MAX_SLOTS - 1;
		busy[s] = b[i].end;
		b[i].lane = first + s;
		if (first + used > lanes)
			lanes = first + used;
	}
	return lanes;
}

/* "backup-slots" or, for a key, its name without the "id:". */
static const char *shown_name(const struct bar *r)
{
	return strcmp(r->f[C_KIND], "key") == 0 && strncmp(r->f[C_RES], "id:", 3) == 0
	           ? r->f[C_RES] + 3
	           : r->f[C_RES];
}

/* A tick step for about 6-12 ticks over span seconds. */
static double tick_step(double span)
{
	static const double steps[] = {1,     2,     5,     10,    15,     30,    60,
	                               120,   300,   600,   900,   1800,   3600,  7200,
	                               10800, 21600, 43200, 86400, 172800, 604800};
	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++)
		if (span / steps[i] <= 12)
			return steps[i];
	return 2592000;
}

static void utc(double epoch, bool date, char *buf, size_t len)
{
	time_t t = (time_t)fl(epoch);
	struct tm tm;

	gmtime_r(&t, &tm);
	strftime(buf, len, date ? "%Y-%m-%d %H:%M:%S" : "%H:%M:%S", &tm);
}

/* The hover text of a bar: every detail of the grant, one per line. */
static void svg_title(FILE *out, const struct bar *r)
{
	char d1[32], d2[32];

	fprintf(out, "<title>grant %s: ", r->f[C_ID]);
	xml_text(out, shown_name(r));
	fprintf(out, " (%s", r->f[C_KIND]);
	if (strcmp(r->f[C_KIND], "semaphore") == 0)
		fprintf(out, " x%s", r->f[C_PERMITS]);
	fprintf(out, ")%s%s\n", *r->f[C_FENCE] ? ", token " : "", r->f[C_FENCE]);
	xml_text(out, r->f[C_USER]);
	fputc('@', out);
	xml_text(out, r->f[C_HOST]);
	fprintf(out, ":%s  ", r->f[C_PID]);
	xml_text(out, r->f[C_CMD]);
	fprintf(out, "\nrequested %s\ngranted %s\n", r->f[C_REQ], r->f[C_ACQ]);
	if (r->f[C_END])
		fprintf(out, "ended %s: %s", r->f[C_END], r->f[C_REASON] ? r->f[C_REASON] : "?");
	else
		fputs("running", out);
	if (r->f[C_STATUS])
		fprintf(out, " %s", r->f[C_STATUS]);
	if (r->f[C_SIGNAL])
		fprintf(out, " (signal %s)", r->f[C_SIGNAL]);
	if (r->f[C_LAPSED] && strcmp(r->f[C_LAPSED], "1") == 0)
		fputs(", not swept yet", out);
	fprintf(out, "\nwaited %s, held %s</title>",
	        lr_duration_format(r->acq - r->req, d1, sizeof(d1)),
	        lr_duration_format(r->end - r->acq, d2, sizeof(d2)));
}

/* Pixels from the window's start: clipped to the plot. */
static double px(double s, double span)
{
	double x = s / span * W_PLOT;
	return x < 0 ? 0 : x > W_PLOT ? W_PLOT : x;
}

/*
 * The picture as a standalone SVG: a time axis in UTC, lane labels, a
 * thin grey bar for each wait and a coloured one for each hold, labelled
 * host:pid and token where they fit, hover text with the details, and a
 * legend.
 */
static void print_svg(FILE *out, const struct bar *b, size_t n, int lanes, double now,
                      const struct lr_timeline_query *q)
{
	double span = (double)(q->since - q->until), from = now - (double)q->since;
	double step = tick_step(span);
	int height = H_TOP + (lanes ? lanes : 1) * H_LANE + H_FOOT;
	char t1[32], t2[32];

	fprintf(out,
	        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
	        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" "
	        "viewBox=\"0 0 %d %d\" font-family=\"sans-serif\" font-size=\"12\">\n"
	        "<rect class=\"background\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
	        W_TOTAL, height, W_TOTAL, height, W_TOTAL, height);
	utc(from, true, t1, sizeof(t1));
	utc(now - (double)q->until, true, t2, sizeof(t2));
	fprintf(out,
	        "<text x=\"10\" y=\"20\" font-size=\"15\" font-weight=\"bold\">lockrun timeline: "
	        "%s to %s UTC, %zu grant%s%s</text>\n",
	        t1, t2, n, n == 1 ? "" : "s",
	        n >= MAX_BARS ? " (cut: the first by resource name; name fewer resources)" : "");
	/* Axis: ticks at round times of day. */
	fprintf(out, "<g class=\"axis\" stroke=\"#dddddd\">\n");
	for (double t = cl(from / step) * step; t <= from + span + 1e-6; t += step) {
		double x = W_LABEL + px(t - from, span);
		utc(t, span > 86400, t1, sizeof(t1));
		fprintf(out,
		        "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\"/>"
		        "<text x=\"%.1f\" y=\"%d\" stroke=\"none\" fill=\"#555555\" "
		        "text-anchor=\"middle\">%s</text>\n",
		        x, H_TOP - 8, x, H_TOP + lanes * H_LANE, x, H_TOP - 12, t1);
	}
	fputs("</g>\n", out);
	/* Lane labels, once per resource, and lane stripes. */
	for (size_t i = 0; i < n; i++) {
		int y = H_TOP + b[i].lane * H_LANE;
		bool first = i == 0 || strcmp(b[i].f[C_RES], b[i - 1].f[C_RES]) != 0;
		if (!first)
			continue;
		fprintf(out,
		        "<line x1=\"0\" y1=\"%d\" x2=\"%d\" y2=\"%d\" stroke=\"#bbbbbb\"/>"
		        "<text class=\"lane\" x=\"10\" y=\"%d\">",
		        y, W_TOTAL, y, y + 17);
		xml_text(out, shown_name(&b[i]));
		fprintf(out, " (%s)</text>\n", b[i].f[C_KIND]);
	}
	for (size_t i = 0; i < n; i++) {
		const struct bar *r = &b[i];
		int y = H_TOP + r->lane * H_LANE;
		double xw = W_LABEL + px(r->req, span), xa = W_LABEL + px(r->acq, span);
		double xe = W_LABEL + px(r->end, span), w = xe - xa < 1 ? 1 : xe - xa;
		fprintf(out, "<g class=\"grant %s\" id=\"grant-%s-%d\">", hows[r->how].cls,
		        r->f[C_ID], r->lane);
		if (xa - xw >= 0.5)
			fprintf(
			    out,
			    "<rect class=\"wait\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"6\" "
			    "fill=\"#c8c8c8\"/>",
			    xw, y + H_LANE - 9, xa - xw);
		fprintf(out,
		        "<rect class=\"hold\" x=\"%.1f\" y=\"%d\" width=\"%.1f\" height=\"%d\" "
		        "fill=\"%s\" stroke=\"#ffffff\" stroke-width=\"0.5\">",
		        xa, y + 3, w, H_LANE - 6, hows[r->how].fill);
		svg_title(out, r);
		fputs("</rect>", out);
		/* host:pid and the token, where there is room (~7 px a character). */
		size_t chars =
		    strlen(r->f[C_HOST]) + strlen(r->f[C_PID]) + strlen(r->f[C_FENCE]) + 3;
		if (w >= 7.0 * (double)chars) {
			fprintf(out, "<text x=\"%.1f\" y=\"%d\" fill=\"#ffffff\" font-size=\"11\">",
			        xa + 3, y + 17);
			xml_text(out, r->f[C_HOST]);
			fprintf(out, ":%s%s%s</text>", r->f[C_PID], *r->f[C_FENCE] ? " #" : "",
			        r->f[C_FENCE]);
		}
		fputs("</g>\n", out);
	}
	/* Legend. */
	int y = H_TOP + lanes * H_LANE + 28, x = 10;
	for (int h = 0; h < H_COUNT; h++) {
		fprintf(out,
		        "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"14\" fill=\"%s\"/>"
		        "<text x=\"%d\" y=\"%d\">%s</text>\n",
		        x, y - 11, hows[h].fill, x + 18, y, hows[h].label);
		x += 40 + 7 * (int)strlen(hows[h].label);
		if (x > W_TOTAL - 200) {
			x = 10;
			y += 20;
		}
	}
	fprintf(out,
	        "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"6\" fill=\"#c8c8c8\"/>"
	        "<text x=\"%d\" y=\"%d\">waiting</text>\n</svg>\n",
	        x, y - 6, x + 18, y);
}

/*
 * The compact text rendering: per lane, the resource's name (on its first
 * lane) and TEXT_COLS columns across the window, each the mark of the
 * grant holding then ('.' a wait, ' ' nothing); then the times at both
 * ends and the marks' legend.
 */
static void print_text(FILE *out, const struct bar *b, size_t n, int lanes, double now,
                       const struct lr_timeline_query *q)
{
	double span = (double)(q->since - q->until), from = now - (double)q->since;
	char t1[32], t2[32], line[TEXT_COLS + 1];

	utc(from, true, t1, sizeof(t1));
	utc(now - (double)q->until, true, t2, sizeof(t2));
	fprintf(out, "%-22s%-*s%s UTC\n", "", TEXT_COLS - 6, t1, t2 + 11);
	for (int lane = 0; lane < lanes; lane++) {
		const struct bar *first = NULL;
		memset(line, ' ', TEXT_COLS);
		line[TEXT_COLS] = '\0';
		for (size_t k = 0; k < n; k++) {
			const struct bar *r = &b[k];
			if (r->lane != lane)
				continue;
			if (!first)
				first = r;
			int cw = (int)(px(r->req, span) / W_PLOT * TEXT_COLS);
			int ca = (int)(px(r->acq, span) / W_PLOT * TEXT_COLS);
			int ce = (int)cl(px(r->end, span) / W_PLOT * TEXT_COLS);
			for (int c = cw; c < ca && c < TEXT_COLS; c++)
				if (line[c] == ' ')
					line[c] = '.';
			for (int c = ca; c < (ce > ca ? ce : ca + 1) && c < TEXT_COLS; c++)
				line[c] = hows[r->how].mark;
		}
		/* The name on a resource's first lane only: the first of its
		 * rows (by grant time) is always in its first lane. */
		bool named = false;
		for (size_t k = 0; first && k < n; k++)
			if (strcmp(b[k].f[C_RES], first->f[C_RES]) == 0) {
				named = b[k].lane == lane;
				break;
			}
		fputs(" ", out);
		if (named)
			lr_report_show(out, shown_name(first), 20, 20);
		else
			fprintf(out, "%-20s", "");
		fprintf(out, " |%s|\n", line);
	}
	if (n >= MAX_BARS)
		fprintf(out, "cut at %d grants, the first by resource name: name fewer resources\n",
		        MAX_BARS);
	fputs("marks: ", out);
	for (int h = 0; h < H_COUNT; h++)
		fprintf(out, "%s%c %s", h ? ", " : "", hows[h].mark, hows[h].label);
	fputs(", . waiting\n", out);
}

/*
 * Prints the timeline of the window q asks for: SVG (svg) or text.
 * *shown: the grants drawn (a grant of several resources counts once per
 * resource). Two queries.
 */
bool lr_timeline_print(lr_db *db, const struct lr_timeline_query *q, bool svg, FILE *out,
                       size_t *shown, char *err, size_t errlen)
{
	struct bar *b = NULL;
	size_t n = 0;
	double now = 0;
	int lanes;

	*shown = 0;
	if (!load(db, q, &b, &n, &now, err, errlen))
		return false;
	lanes = assign_lanes(b, n);
	if (svg)
		print_svg(out, b, n, lanes, now, q);
	else if (n)
		print_text(out, b, n, lanes, now, q);
	*shown = n;
	free_bars(b, n);
	return true;
}
