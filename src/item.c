#include "item.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Keys share the resources table with locks; the prefix keeps a key and a
 * lock of the same name apart. */
#define KEY_PREFIX "id:"

const char *lr_kind_name(enum lr_kind k)
{
	switch (k) {
	case LR_KIND_SEMAPHORE:
		return "semaphore";
	case LR_KIND_MUTEX:
		return "mutex";
	case LR_KIND_READ:
	case LR_KIND_WRITE:
		return "rwlock";
	case LR_KIND_KEY:
		return "key";
	case LR_KIND_NAMED:
		return "named lock";
	}
	return "?";
}

/* Names: 1-64 bytes of [A-Za-z0-9_.-], starting with a letter or digit.
 * Narrow on purpose: safe in SQL, shell, logs and file names alike. */
bool lr_name_valid(const char *name)
{
	size_t n = strlen(name);

	if (n == 0 || n > LR_NAME_MAX)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool alnum =
		    (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
		if (!alnum && (i == 0 || (c != '_' && c != '.' && c != '-')))
			return false;
	}
	return true;
}

/* Parses "NAME" or, for semaphores, "NAME:COUNT". */
bool lr_item_parse(struct lr_item *it, enum lr_kind kind, const char *arg, char *err, size_t errlen)
{
	const char *colon = kind == LR_KIND_SEMAPHORE ? strrchr(arg, ':') : NULL;
	size_t n = colon ? (size_t)(colon - arg) : strlen(arg);
	char name[LR_NAME_MAX + 1];

	memset(it, 0, sizeof(*it));
	it->kind = kind;
	it->count = 1;
	if (n > LR_NAME_MAX) {
		snprintf(err, errlen, "name '%.*s...' is longer than %d bytes", 20, arg,
		         LR_NAME_MAX);
		return false;
	}
	memcpy(name, arg, n);
	name[n] = '\0';
	if (!lr_name_valid(name)) {
		snprintf(err, errlen,
		         "invalid name '%s': use 1-%d letters, digits, '_', '.' or '-', "
		         "starting with a letter or digit",
		         name, LR_NAME_MAX);
		return false;
	}
	if (colon) {
		char *end;
		unsigned long c;
		errno = 0;
		c = strtoul(colon + 1, &end, 10);
		if (errno || !colon[1] || *end || colon[1] == '-' || colon[1] == '+' || c < 1 ||
		    c > 1000000) {
			snprintf(err, errlen,
			         "invalid count '%s' for '%s': use a whole number 1-1000000",
			         colon + 1, name);
			return false;
		}
		it->count = (unsigned)c;
	}
	/* lockrun's own named locks (schema, wake-ups) must not be taken
	 * by hand: a held "lockrun.schema" would block `lockrunctl init`. */
	if (kind == LR_KIND_NAMED && strncmp(name, "lockrun.", 8) == 0) {
		snprintf(err, errlen,
		         "named lock '%s': names starting with 'lockrun.' are reserved", name);
		return false;
	}
	snprintf(it->name, sizeof(it->name), "%s%s", kind == LR_KIND_KEY ? KEY_PREFIX : "", name);
	return true;
}

/* The name as the user gave it: keys without their "id:" prefix. */
const char *lr_item_display_name(const struct lr_item *it)
{
	return it->kind == LR_KIND_KEY ? it->name + strlen(KEY_PREFIX) : it->name;
}
