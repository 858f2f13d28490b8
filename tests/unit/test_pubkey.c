/* server_public_key files: what lr_pubkey_check takes for an RSA public
 * key in PEM, and, against OpenSSL's own reading (PEM_read_bio_PUBKEY, as
 * Connector/C reads the file), that it never takes a file OpenSSL would
 * not read as an RSA key, whatever byte of a good one is changed or
 * wherever it is cut. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>

#include "pubkey.h"
#include "tap.h"

static const char rsa[] = "-----BEGIN PUBLIC KEY-----\n"
                          "MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAkhMb4X/F6yZlxmOFRXwG\n"
                          "DZRmEDsxub0qEvakrrKApbxcAeqnvBJapuxNapJr/BNTKFdWagSZqCSs0aVtG/HD\n"
                          "zSx21IHrgEocO5Jis81cqYZ7DqDCF0IsPePN7gEHNzy4J8yJUXg9eK38CGwHm+rE\n"
                          "z56OZ2obD7z/flcmlUTmD24BtNlfuSh6H3BFkTvmQq0oH7B17J8QvDLFBFMJtrAZ\n"
                          "3YdN4HNHtHkxgb+J7yw28q5UKDbW/9MMDSMN9heSE0uuwK1BwwUPvFYW3gRvwC+Z\n"
                          "wwwPTli8Z3AzRgXy4MqQSZ6SfH81ary/5cwn3guvxuScrZFNe2fFpTFV9zCvHovC\n"
                          "DwIDAQAB\n"
                          "-----END PUBLIC KEY-----\n";

static const char ec[] = "-----BEGIN PUBLIC KEY-----\n"
                         "MFkwEwYHKoZIzj0CAQYIKoZIzj0DAQcDQgAE8hSA2Ka7Ao7T8+qaTVK9ob8/fKJv\n"
                         "fKc3f8wcp587O7EIWsatzJqd3Gb3UiiZXGk95mWc6sXuVpfNOC9bBq4s8A==\n"
                         "-----END PUBLIC KEY-----\n";

static bool check(const char *s)
{
	return lr_pubkey_check(s, strlen(s));
}

/* OpenSSL's verdict: an RSA key read from the first PUBLIC KEY block. */
static bool openssl_reads(const char *s, size_t len)
{
	BIO *b = BIO_new_mem_buf(s, (int)len);
	EVP_PKEY *pk = b ? PEM_read_bio_PUBKEY(b, NULL, NULL, NULL) : NULL;
	bool is_rsa = pk && EVP_PKEY_is_a(pk, "RSA");

	EVP_PKEY_free(pk);
	BIO_free(b);
	ERR_clear_error();
	return is_rsa;
}

/* s with "PUBLIC KEY" blocks spelled around: text and other blocks. */
static char *around(const char *before, const char *key, const char *after)
{
	size_t n = strlen(before) + strlen(key) + strlen(after) + 1;
	char *s = malloc(n);

	if (s)
		snprintf(s, n, "%s%s%s", before, key, after);
	return s;
}

int main(void)
{
	static const char b64[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	const char *body = strchr(rsa, '\n') + 1, *end = strstr(rsa, "-----END");
	char *s, buf[sizeof(rsa) + 64];
	int wrong = 0, tried = 0, taken = 0;

	ok(check(rsa), "an RSA public key in PEM is taken");
	ok(openssl_reads(rsa, strlen(rsa)), "and OpenSSL reads it (the test's own premise)");
	s = around("a comment line\r\n", rsa, "trailing text\n");
	ok(s && check(s), "with text before and after it");
	free(s);
	ok(!check(ec), "an EC public key is refused: the RSA exchange cannot use it");
	ok(!check(""), "an empty file is refused");
	ok(!check("MIIBIjANBgkqhkiG9w0BAQEFAAOCAQ8AMIIBCgKCAQEAkhMb4X\n"),
	   "base64 without PEM lines");
	s = around("", rsa, "");
	memcpy(strstr(s, "BEGIN PUBLIC"), "BEGIN RSA PUBL", 14);
	ok(!check(s), "a block of another name is refused");
	free(s);
	snprintf(buf, sizeof(buf), "%.*s-----END PUBLIC KEY-----\n", (int)(body - rsa + 10), rsa);
	ok(!check(buf), "a block cut short is refused");
	ok(!check("-----BEGIN PUBLIC KEY-----\n-----END PUBLIC KEY-----\n"), "an empty block");
	ok(!check("-----BEGIN PUBLIC KEY-----\nMII*\n-----END PUBLIC KEY-----\n"),
	   "a character outside base64");

	/* Every base64 character of the key changed to three others, and
	 * the body cut after every character: nothing OpenSSL would not
	 * read as an RSA key may pass. */
	for (const char *p = body; p < end; p++) {
		if (*p == '\n')
			continue;
		for (int k = 1; k <= 3; k++) {
			memcpy(buf, rsa, sizeof(rsa));
			buf[p - rsa] = b64[(strchr(b64, *p) - b64 + 21 * k) % 64];
			bool mine = check(buf), theirs = openssl_reads(buf, strlen(buf));
			tried++;
			taken += mine;
			if (mine && !theirs && wrong++ < 5)
				printf("# taken, but OpenSSL does not read it: byte %d to '%c'\n",
				       (int)(p - rsa), buf[p - rsa]);
		}
		snprintf(buf, sizeof(buf), "%.*s\n-----END PUBLIC KEY-----\n", (int)(p - rsa), rsa);
		bool mine = check(buf), theirs = openssl_reads(buf, strlen(buf));
		tried++;
		taken += mine;
		if (mine && !theirs && wrong++ < 5)
			printf("# taken, but OpenSSL does not read it: cut at byte %d\n",
			       (int)(p - rsa));
	}
	ok(wrong == 0, "of %d damaged keys, none taken that OpenSSL would not read (%d taken)",
	   tried, taken);
	return tap_done();
}
