#ifndef KEYCHAINFS_CSCRYPT_H
#define KEYCHAINFS_CSCRYPT_H

#include <stddef.h>
#include <stdint.h>

/* scrypt's ROMix (RFC 7914, section 5) on one block B of 128 * r bytes, in place, with N a
 * power of two. Only the memory-hard middle of scrypt: its two PBKDF2 steps, the only ones
 * that see the passphrase, are done by the caller in locked memory, so that the passphrase
 * is never handed to a library that copies it into its own heap for the whole derivation.
 * V (128 * r * N bytes) is mapped here, kept out of core dumps, and zeroed before it is
 * unmapped: its first block is PBKDF2's output, from which a passphrase could be guessed
 * cheaply. Returns 0, or -1 if V could not be mapped or the parameters are out of range
 * (errno set). */
int kcfs_scrypt_romix(uint8_t *block, uint32_t r, uint64_t n);

/* Zeroes 32 KiB of the stack below the caller, and on x86-64 with AVX the vector registers:
 * where a hash of the passphrase's padded key (OpenSSL's SHA-256 message schedule) was left
 * below the stack pointer, and in the registers it went through. */
void kcfs_scrub_stack(void);

#endif
