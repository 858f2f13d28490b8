/*
 * The check of a server_public_key file: whether it holds what Connector/C
 * will read from it, a PEM block "PUBLIC KEY" (RFC 7468) whose DER is an
 * RSA SubjectPublicKeyInfo (RFC 5280, RFC 8017), the only kind MySQL's
 * caching_sha2_password and sha256_password encrypt with. Done here, not
 * with OpenSSL: OpenSSL 3 decodes a key through its decoder framework,
 * which costs more than the rest of a run (see pubkey.c).
 *
 * May use: nothing of lockrun's.
 */
#ifndef LR_PUBKEY_H
#define LR_PUBKEY_H

#include <stdbool.h>
#include <stddef.h>

bool lr_pubkey_check(const char *text, size_t len);

#endif
