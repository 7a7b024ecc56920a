/*
 * mkbackup FILE COUNT PASSPHRASE-FILE [SERVICES [sync]]: writes a keychainfs backup (format 1,
 * or 2 with "sync", as documented in Sources/KeychainBackup/BackupFile.swift and
 * BackupPayload.swift) holding COUNT generic passwords, so that scripts/bench fills big stores
 * with `keychainfs import` instead of one FUSE write per item.  Item i is service "bench" (or
 * "svcK", K = i mod SERVICES, when SERVICES > 1), account "item%07d", class when-unlocked, and
 * the 32-byte secret scripts/bench reads everywhere; with "sync" every item is synchronizable
 * (the sync rows).  scrypt cost 2^10: the bench times import, not the KDF.
 */
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/kdf.h>
#include <openssl/rand.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CHUNK (1 << 20)
#define HEADER 71

static const char secret[] = "0123456789abcdef0123456789abcdef";

static void die(const char *what)
{
	fprintf(stderr, "mkbackup: %s\n", what);
	exit(1);
}

static unsigned char *buf;
static size_t len, cap;

static void put(const void *p, size_t n)
{
	if (len + n > cap) {
		cap = (len + n) * 2;
		if (!(buf = realloc(buf, cap)))
			die("out of memory");
	}
	memcpy(buf + len, p, n);
	len += n;
}

static void be(uint64_t v, int n, unsigned char *out)
{
	for (int i = 0; i < n; i++)
		out[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
}

static void put_int(uint64_t v, int n)
{
	unsigned char b[8];
	be(v, n, b);
	put(b, n);
}

static void put_str(const char *s)
{
	put_int(strlen(s), 4);
	put(s, strlen(s));
}

static void hkdf(const unsigned char *master, const char *info, unsigned char *out)
{
	EVP_PKEY_CTX *ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_HKDF, NULL);
	size_t n = 32;
	if (!ctx || EVP_PKEY_derive_init(ctx) != 1 || EVP_PKEY_CTX_set_hkdf_md(ctx, EVP_sha256()) != 1 ||
	    EVP_PKEY_CTX_set1_hkdf_key(ctx, master, 32) != 1 ||
	    EVP_PKEY_CTX_add1_hkdf_info(ctx, (const unsigned char *)info, strlen(info)) != 1 ||
	    EVP_PKEY_derive(ctx, out, &n) != 1 || n != 32)
		die("HKDF failed");
	EVP_PKEY_CTX_free(ctx);
}

int main(int argc, char *argv[])
{
	if (argc < 4 || argc > 6)
		die("usage: mkbackup FILE COUNT PASSPHRASE-FILE [SERVICES [sync]]");
	long count = atol(argv[2]), services = argc >= 5 ? atol(argv[4]) : 1;
	int sync = argc == 6 && strcmp(argv[5], "sync") == 0;
	if (count < 0 || services < 1 || (argc == 6 && !sync))
		die("bad COUNT, SERVICES or sync");
	char pass[1024] = "";
	FILE *pf = fopen(argv[3], "r");
	if (!pf || !fgets(pass, sizeof pass, pf))
		die("cannot read the passphrase file");
	fclose(pf);
	pass[strcspn(pass, "\n")] = 0;

	/* The payload: count, then the items. */
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	double since2001 = now.tv_sec - 978307200.0 + now.tv_nsec / 1e9;
	uint64_t date;
	memcpy(&date, &since2001, 8);
	put_int(count, 8);
	for (long i = 0; i < count; i++) {
		char service[32], account[32];
		if (services > 1)
			snprintf(service, sizeof service, "svc%ld", i % services);
		else
			strcpy(service, "bench");
		snprintf(account, sizeof account, "item%07ld", i);
		put_int(1, 1); /* generic */
		put_int(1, 1); /* when-unlocked */
		put_str("");   /* access group */
		put_str(service);
		put_str(account);
		if (sync) {
			put_int(1 << 8, 2); /* format 2's two-byte mask: synchronizable (bit 8) */
			put_int(1, 1);      /* its flag: yes */
		} else {
			put_int(0, 1);      /* format 1's one-byte mask: no optional attributes */
		}
		put_int(date, 8);
		put_int(date, 8);
		put_int(sizeof secret - 1, 4);
		put(secret, sizeof secret - 1);
	}

	unsigned char header[HEADER + 9], master[32], check[32], key[32];
	memcpy(header, "KCFSBKUP", 8);
	be(sync ? 2 : 1, 2, header + 8);
	header[10] = 10;
	be(8, 4, header + 11);
	be(1, 4, header + 15);
	if (RAND_bytes(header + 19, 16) != 1)
		die("RAND_bytes failed");
	be(CHUNK, 4, header + 35);
	if (EVP_PBE_scrypt(pass, strlen(pass), header + 19, 16, 1 << 10, 8, 1, 64 << 20, master, 32) != 1)
		die("scrypt failed");
	hkdf(master, "keychainfs backup v1 check", check);
	hkdf(master, "keychainfs backup v1 seal", key);
	unsigned int maclen = 32;
	HMAC(EVP_sha256(), check, 32, header, 39, header + 39, &maclen);

	FILE *out = fopen(argv[1], "wb");
	if (!out || fwrite(header, 1, HEADER, out) != HEADER)
		die("cannot write the file");
	size_t chunks = (len + CHUNK - 1) / CHUNK;
	unsigned char *sealed = malloc(CHUNK + 28);
	for (size_t i = 0; i < chunks; i++) {
		size_t n = i == chunks - 1 ? len - i * CHUNK : CHUNK;
		int outl;
		be(i, 8, header + HEADER);
		header[HEADER + 8] = i == chunks - 1;
		EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
		if (!sealed || !ctx || RAND_bytes(sealed, 12) != 1 ||
		    EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), NULL, key, sealed) != 1 ||
		    EVP_EncryptUpdate(ctx, NULL, &outl, header, HEADER + 9) != 1 ||
		    EVP_EncryptUpdate(ctx, sealed + 12, &outl, buf + i * CHUNK, (int)n) != 1 ||
		    EVP_EncryptFinal_ex(ctx, sealed + 12 + n, &outl) != 1 ||
		    EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, 16, sealed + 12 + n) != 1)
			die("AES-GCM failed");
		EVP_CIPHER_CTX_free(ctx);
		if (fwrite(sealed, 1, n + 28, out) != n + 28)
			die("cannot write the file");
	}
	if (fclose(out) != 0)
		die("cannot write the file");
	return 0;
}
