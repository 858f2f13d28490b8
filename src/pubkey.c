#include "pubkey.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define BEGIN "-----BEGIN PUBLIC KEY-----"
#define END   "-----END PUBLIC KEY-----"

/* rsaEncryption, 1.2.840.113549.1.1.1, as DER content octets. */
static const uint8_t rsa_oid[] = {0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d, 0x01, 0x01, 0x01};

/* One DER element: its tag and where its content lies. */
struct der {
	uint8_t tag;
	const uint8_t *p;
	size_t len;
};

/* Reads the element at *p (before end) into e and moves *p past it. DER
 * lengths are definite and minimal; longer than 2^24 is no key. */
static bool der_next(const uint8_t **p, const uint8_t *end, struct der *e)
{
	const uint8_t *q = *p;
	size_t len, n;

	if (end - q < 2)
		return false;
	e->tag = *q++;
	len = *q++;
	if (len & 0x80) {
		n = len & 0x7f;
		if (n == 0 || n > 3 || (size_t)(end - q) < n || *q == 0)
			return false;
		for (len = 0; n; n--)
			len = len << 8 | *q++;
		if (len < 0x80)
			return false;
	}
	if ((size_t)(end - q) < len)
		return false;
	e->p = q;
	e->len = len;
	*p = q + len;
	return true;
}

/* A positive INTEGER, as RSA's modulus and exponent are. */
static bool der_positive(const struct der *e)
{
	return e->tag == 0x02 && e->len > 0 && !(e->p[0] & 0x80) &&
	       !(e->len > 1 && e->p[0] == 0 && !(e->p[1] & 0x80));
}

/* SubjectPublicKeyInfo ::= SEQUENCE { algorithm AlgorithmIdentifier
 * (rsaEncryption, NULL parameters), subjectPublicKey BIT STRING holding
 * RSAPublicKey ::= SEQUENCE { modulus INTEGER, publicExponent INTEGER } },
 * each element filling its parent exactly. */
static bool rsa_spki(const uint8_t *p, const uint8_t *end)
{
	struct der spki, alg, oid, par, bits, rsa, n, e;
	const uint8_t *q;

	if (!der_next(&p, end, &spki) || spki.tag != 0x30 || p != end)
		return false;
	p = spki.p;
	end = spki.p + spki.len;
	if (!der_next(&p, end, &alg) || alg.tag != 0x30 || !der_next(&p, end, &bits) ||
	    bits.tag != 0x03 || p != end)
		return false;
	q = alg.p;
	if (!der_next(&q, alg.p + alg.len, &oid) || oid.tag != 0x06 || oid.len != sizeof(rsa_oid) ||
	    memcmp(oid.p, rsa_oid, sizeof(rsa_oid)) != 0 || !der_next(&q, alg.p + alg.len, &par) ||
	    par.tag != 0x05 || par.len != 0 || q != alg.p + alg.len)
		return false;
	/* The BIT STRING's first octet counts unused bits: none here. */
	if (bits.len < 2 || bits.p[0] != 0)
		return false;
	p = bits.p + 1;
	end = bits.p + bits.len;
	if (!der_next(&p, end, &rsa) || rsa.tag != 0x30 || p != end)
		return false;
	p = rsa.p;
	end = rsa.p + rsa.len;
	return der_next(&p, end, &n) && der_positive(&n) && der_next(&p, end, &e) &&
	       der_positive(&e) && p == end;
}

static int b64(char c)
{
	if (c >= 'A' && c <= 'Z')
		return c - 'A';
	if (c >= 'a' && c <= 'z')
		return c - 'a' + 26;
	if (c >= '0' && c <= '9')
		return c - '0' + 52;
	return c == '+' ? 62 : c == '/' ? 63 : -1;
}

/* Decodes the base64 of s[0, len) into out (room for len * 3 / 4 bytes),
 * whitespace skipped, '=' only as padding at the end. Returns the number
 * of bytes, or -1 if it is not base64. */
static long unbase64(const char *s, size_t len, uint8_t *out)
{
	unsigned long acc = 0;
	size_t bits = 0, pad = 0;
	long n = 0;

	for (size_t i = 0; i < len; i++) {
		char c = s[i];
		int v;
		if (c == ' ' || c == '\t' || c == '\r' || c == '\n')
			continue;
		if (c == '=') {
			pad++;
			continue;
		}
		if (pad || (v = b64(c)) < 0)
			return -1;
		acc = (acc << 6 | (unsigned long)v) & 0xffffff;
		bits += 6;
		if (bits >= 8) {
			bits -= 8;
			out[n++] = (uint8_t)(acc >> bits);
		}
	}
	/* Four characters make three bytes: a last group of two or three
	 * leaves 4 or 2 bits over, and its padding, if written, is "==" or
	 * "=". A single character over is no byte at all. */
	if (bits >= 6 || (pad && pad != (bits == 4 ? 2u : bits == 2 ? 1u : 0u)))
		return -1;
	return n;
}

/* Finds s (a NUL-free string) in text[0, len), or NULL. */
static const char *find(const char *text, size_t len, const char *s)
{
	size_t n = strlen(s);

	for (size_t i = 0; i + n <= len; i++)
		if (memcmp(text + i, s, n) == 0)
			return text + i;
	return NULL;
}

/*
 * Whether text[0, len) (a file's contents) holds an RSA public key in PEM,
 * as Connector/C's PEM_read_bio_PUBKEY() would read it: the first
 * "PUBLIC KEY" block, text around it ignored. The DER is walked, not
 * decoded into a key, so this says nothing of whether the modulus is a
 * good one; it catches a wrong file (a certificate, a private key, another
 * kind of key) and a damaged one. Called once per run on MySQL, where a
 * configuration names the key; costs a few microseconds, where OpenSSL 3's
 * decoder framework took about 9 million instructions (most of a run).
 */
bool lr_pubkey_check(const char *text, size_t len)
{
	const char *b = find(text, len, BEGIN), *e;
	uint8_t *der;
	long n;
	bool ok;

	if (!b)
		return false;
	b += strlen(BEGIN);
	if (!(e = find(b, len - (size_t)(b - text), END)) || !(der = malloc((size_t)(e - b))))
		return false;
	n = unbase64(b, (size_t)(e - b), der);
	ok = n > 0 && rsa_spki(der, der + n);
	free(der);
	return ok;
}
