#include "CScrypt.h"

#include <errno.h>
#include <string.h>
#include <sys/mman.h>

static inline uint32_t rotl(uint32_t a, int b) { return (a << b) | (a >> (32 - b)); }

static inline uint32_t le32dec(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void le32enc(uint8_t *p, uint32_t x) {
    p[0] = (uint8_t)x; p[1] = (uint8_t)(x >> 8); p[2] = (uint8_t)(x >> 16); p[3] = (uint8_t)(x >> 24);
}

/* Salsa20/8's core (RFC 7914, section 3), in place on 16 words. */
static void salsa20_8(uint32_t b[16]) {
    uint32_t x[16];
    memcpy(x, b, sizeof x);
    for (int i = 0; i < 8; i += 2) {
        /* Columns. */
        x[4] ^= rotl(x[0] + x[12], 7);   x[8] ^= rotl(x[4] + x[0], 9);
        x[12] ^= rotl(x[8] + x[4], 13);  x[0] ^= rotl(x[12] + x[8], 18);
        x[9] ^= rotl(x[5] + x[1], 7);    x[13] ^= rotl(x[9] + x[5], 9);
        x[1] ^= rotl(x[13] + x[9], 13);  x[5] ^= rotl(x[1] + x[13], 18);
        x[14] ^= rotl(x[10] + x[6], 7);  x[2] ^= rotl(x[14] + x[10], 9);
        x[6] ^= rotl(x[2] + x[14], 13);  x[10] ^= rotl(x[6] + x[2], 18);
        x[3] ^= rotl(x[15] + x[11], 7);  x[7] ^= rotl(x[3] + x[15], 9);
        x[11] ^= rotl(x[7] + x[3], 13);  x[15] ^= rotl(x[11] + x[7], 18);
        /* Rows. */
        x[1] ^= rotl(x[0] + x[3], 7);    x[2] ^= rotl(x[1] + x[0], 9);
        x[3] ^= rotl(x[2] + x[1], 13);   x[0] ^= rotl(x[3] + x[2], 18);
        x[6] ^= rotl(x[5] + x[4], 7);    x[7] ^= rotl(x[6] + x[5], 9);
        x[4] ^= rotl(x[7] + x[6], 13);   x[5] ^= rotl(x[4] + x[7], 18);
        x[11] ^= rotl(x[10] + x[9], 7);  x[8] ^= rotl(x[11] + x[10], 9);
        x[9] ^= rotl(x[8] + x[11], 13);  x[10] ^= rotl(x[9] + x[8], 18);
        x[12] ^= rotl(x[15] + x[14], 7); x[13] ^= rotl(x[12] + x[15], 9);
        x[14] ^= rotl(x[13] + x[12], 13); x[15] ^= rotl(x[14] + x[13], 18);
    }
    for (int i = 0; i < 16; i++) b[i] += x[i];
    explicit_bzero(x, sizeof x);
}

/* BlockMix (section 4): b (2r blocks of 16 words) into y, the even blocks' results first. */
static void blockmix(const uint32_t *b, uint32_t *y, uint32_t r) {
    uint32_t x[16];
    memcpy(x, &b[(2 * r - 1) * 16], sizeof x);
    for (uint32_t i = 0; i < 2 * r; i++) {
        for (int k = 0; k < 16; k++) x[k] ^= b[i * 16 + k];
        salsa20_8(x);
        memcpy(&y[((i & 1) * r + (i >> 1)) * 16], x, sizeof x);
    }
    explicit_bzero(x, sizeof x);
}

__attribute__((noinline)) void kcfs_scrub_stack(void) {
    uint8_t area[32 * 1024];
    explicit_bzero(area, sizeof area);
    __asm__ volatile("" : : "r"(area) : "memory");
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx"))
        __asm__ volatile("vzeroall" : : : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7",
                         "xmm8", "xmm9", "xmm10", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15");
#endif
}

int kcfs_scrypt_romix(uint8_t *block, uint32_t r, uint64_t n) {
    size_t words = 32 * (size_t)r;
    size_t bytes = 128 * (size_t)r;
    /* Integerify reads 32 bits, so N fits in them; V and the two blocks after it fit in size_t. */
    if (r == 0 || r > (1u << 24) || n < 2 || (n & (n - 1)) != 0 || n > ((uint64_t)1 << 32)
        || n > SIZE_MAX / bytes - 2) { errno = EINVAL; return -1; }
    size_t vbytes = bytes * n;
    /* V, then X and Y: all of it derived from the passphrase. */
    uint32_t *v = mmap(NULL, vbytes + 2 * bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (v == MAP_FAILED) return -1;
    (void)madvise(v, vbytes + 2 * bytes, MADV_DONTDUMP);
    uint32_t *x = v + words * n, *y = x + words;
    for (size_t k = 0; k < words; k++) x[k] = le32dec(block + 4 * k);
    for (uint64_t i = 0; i < n; i += 2) {
        memcpy(&v[i * words], x, bytes);
        blockmix(x, y, r);
        memcpy(&v[(i + 1) * words], y, bytes);
        blockmix(y, x, r);
    }
    for (uint64_t i = 0; i < n; i += 2) {
        uint64_t j = x[(2 * r - 1) * 16] & (n - 1);
        for (size_t k = 0; k < words; k++) x[k] ^= v[j * words + k];
        blockmix(x, y, r);
        j = y[(2 * r - 1) * 16] & (n - 1);
        for (size_t k = 0; k < words; k++) y[k] ^= v[j * words + k];
        blockmix(y, x, r);
    }
    for (size_t k = 0; k < words; k++) le32enc(block + 4 * k, x[k]);
    explicit_bzero(v, vbytes + 2 * bytes);
    munmap(v, vbytes + 2 * bytes);
    return 0;
}
