/* sm_grant: see sm_grant.h. */
#include "sm_grant.h"

#include <string.h>
#include <time.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/sha.h>

#define SM_GRANT_TAG "shmap-grant-1"

void sm_grant_key_derive(const char *cluster_token, sm_grant_key *out)
{
    static const char what[] = "shmap transfer grant key 1";
    unsigned int n = sizeof out->k;
    HMAC(EVP_sha256(), cluster_token, (int)strlen(cluster_token), (const unsigned char *)what,
         sizeof what - 1, out->k, &n);
}

void sm_grant_holder(const void *token, size_t len, unsigned char out[32])
{
    SHA256(token, len, out);
}

int64_t sm_grant_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void put_be(unsigned char *p, uint64_t v, int n)
{
    for (int k = n - 1; k >= 0; k--, v >>= 8)
        p[k] = (unsigned char)v;
}

/* The MAC of the grant's fields, into out[32]. */
static void grant_mac(const sm_grant_key *k, const unsigned char holder[32], sm_grant_dir dir,
                      uint64_t array, int32_t device, int64_t expiry_ms, unsigned char out[32])
{
    unsigned char msg[sizeof SM_GRANT_TAG - 1 + 1 + 8 + 4 + 8 + 32], *p = msg;
    unsigned int n = 32;
    memcpy(p, SM_GRANT_TAG, sizeof SM_GRANT_TAG - 1);
    p += sizeof SM_GRANT_TAG - 1;
    *p++ = (unsigned char)dir;
    put_be(p, array, 8);
    put_be(p + 8, (uint32_t)device, 4);
    put_be(p + 12, (uint64_t)expiry_ms, 8);
    memcpy(p + 20, holder, 32);
    HMAC(EVP_sha256(), k->k, sizeof k->k, msg, sizeof msg, out, &n);
}

void sm_grant_make(const sm_grant_key *k, const unsigned char holder[32], sm_grant_dir dir,
                   uint64_t array, int32_t device, int64_t expiry_ms,
                   unsigned char out[SM_GRANT_LEN])
{
    put_be(out, (uint64_t)expiry_ms, 8);
    grant_mac(k, holder, dir, array, device, expiry_ms, out + 8);
}

sm_err sm_grant_check(const sm_grant_key *k, const unsigned char holder[32], sm_grant_dir dir,
                      uint64_t array, int32_t device, const void *grant, size_t len, int64_t now_ms,
                      char *err, size_t errlen)
{
    const unsigned char *g = grant;
    const char *what = dir == SM_GRANT_PUT ? "upload to" : "download of";
    unsigned char mac[32];
    int64_t expiry = 0;
    if (len != SM_GRANT_LEN)
        return sm_fail(err, errlen, SM_EPERM,
                       "the grant for the %s array %llu's shard on device %d is not a grant "
                       "(%zu bytes, not %d); ask the coordinator for the array again",
                       what, (unsigned long long)array, (int)device, len, SM_GRANT_LEN);
    for (int b = 0; b < 8; b++)
        expiry = (int64_t)(((uint64_t)expiry << 8) | g[b]);
    grant_mac(k, holder, dir, array, device, expiry, mac);
    if (CRYPTO_memcmp(mac, g + 8, sizeof mac) != 0)
        return sm_fail(err, errlen, SM_EPERM,
                       "the grant does not open the %s array %llu's shard on device %d (it was "
                       "made for another array, device, direction or token, or not by this "
                       "cluster's coordinator)",
                       what, (unsigned long long)array, (int)device);
    if (expiry < now_ms)
        return sm_fail(err, errlen, SM_EPERM,
                       "the grant for the %s array %llu's shard on device %d expired %lld ms ago "
                       "(grants last %d s); ask the coordinator for the array again",
                       what, (unsigned long long)array, (int)device, (long long)(now_ms - expiry),
                       SM_GRANT_TTL_MS / 1000);
    return SM_OK;
}
