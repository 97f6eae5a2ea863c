/* sm_rpc_tls: TLS material for servers and channels, read and checked once.
 *
 * Each of cert, key and ca is a PEM file's path or PEM text itself (it
 * starts with "-----BEGIN"). Everything is checked here with OpenSSL's
 * libcrypto, the library gRPC itself uses, so that a wrong file is refused
 * at start with a sentence naming it instead of as a failed handshake on
 * some later connection: a file that cannot be read, that holds no PEM
 * certificate or key, a key that is not the certificate's. A certificate
 * that is expired, not yet valid or not signed by the CA only gets a
 * warning in the log (peers will refuse it, which may be the point of a
 * test). The checked PEM texts are what gRPC's credentials get. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>

#include "sm_log.h"
#include "sm_rpc_internal.h"

/* Largest PEM file read (a chain of a few certificates is a few KiB). */
#define TLS_FILE_MAX (1 << 20)

struct sm_rpc_tls {
    char *cert_pem, *key_pem, *ca_pem; /* NUL-terminated; cert and key may be NULL */
    char *server_name;                 /* NULL: the target's host */
    char what[256];                    /* for log lines: where the certificate came from */
};

static int is_pem_text(const char *s)
{
    return strncmp(s, "-----BEGIN", 10) == 0;
}

/* The PEM text of src (a path or PEM text) in *out (malloc'd). what names
 * the role in sentences ("TLS certificate"). */
static sm_err tls_read(const char *src, const char *what, char **out, char *err, size_t errlen)
{
    *out = NULL;
    if (is_pem_text(src)) {
        if (!(*out = strdup(src)))
            return sm_fail(err, errlen, SM_ENOMEM, "cannot copy the %s", what);
        return SM_OK;
    }
    FILE *f = fopen(src, "rb");
    if (!f)
        return sm_fail(err, errlen, SM_EIO, "cannot read the %s file '%s': %s", what, src,
                       strerror(errno));
    char *buf = malloc(TLS_FILE_MAX + 1);
    size_t n = buf ? fread(buf, 1, TLS_FILE_MAX + 1, f) : 0;
    int bad = buf && ferror(f);
    fclose(f);
    if (!buf)
        return sm_fail(err, errlen, SM_ENOMEM, "cannot read the %s file '%s'", what, src);
    if (bad || n > TLS_FILE_MAX) {
        free(buf);
        return sm_fail(err, errlen, SM_EIO, "cannot read the %s file '%s': %s", what, src,
                       bad ? "read error" : "larger than 1 MiB, not a PEM file");
    }
    buf[n] = 0;
    *out = buf;
    return SM_OK;
}

/* A name for a source in sentences: the path, or "(PEM text)". */
static const char *tls_src_name(const char *src)
{
    return is_pem_text(src) ? "(PEM text)" : src;
}

/* Every certificate of pem into a new stack (*out); SM_EFORMAT if none. */
static sm_err tls_certs(const char *pem, const char *what, const char *src, STACK_OF(X509) * *out,
                        char *err, size_t errlen)
{
    STACK_OF(X509) *st = sk_X509_new_null();
    BIO *b = BIO_new_mem_buf(pem, -1);
    X509 *x;
    *out = NULL;
    if (!st || !b) {
        BIO_free(b);
        sk_X509_free(st);
        return sm_fail(err, errlen, SM_ENOMEM, "cannot read the %s", what);
    }
    while ((x = PEM_read_bio_X509(b, NULL, NULL, NULL)))
        if (!sk_X509_push(st, x))
            X509_free(x);
    ERR_clear_error(); /* the end of the text reads as an error */
    BIO_free(b);
    if (sk_X509_num(st) == 0) {
        sk_X509_free(st);
        return sm_fail(
            err, errlen, SM_EFORMAT,
            "the %s file '%s' holds no PEM certificate (\"-----BEGIN CERTIFICATE-----\")", what,
            tls_src_name(src));
    }
    *out = st;
    return SM_OK;
}

static void tls_certs_free(STACK_OF(X509) * st)
{
    if (st)
        sk_X509_pop_free(st, X509_free);
}

/* Warns when leaf is outside its validity period or the CAs do not sign
 * it (peers that trust only those CAs will refuse it). */
static void tls_warn_leaf(X509 *leaf, STACK_OF(X509) * cas, STACK_OF(X509) * chain,
                          const char *cert_src, const char *ca_src)
{
    if (X509_cmp_current_time(X509_get0_notAfter(leaf)) < 0)
        SM_WARN("the TLS certificate '%s' has expired: peers will refuse it",
                tls_src_name(cert_src));
    else if (X509_cmp_current_time(X509_get0_notBefore(leaf)) > 0)
        SM_WARN("the TLS certificate '%s' is not valid yet: peers will refuse it",
                tls_src_name(cert_src));
    if (!cas)
        return;
    X509_STORE *store = X509_STORE_new();
    X509_STORE_CTX *ctx = X509_STORE_CTX_new();
    int ok = 0;
    if (store && ctx) {
        for (int i = 0; i < sk_X509_num(cas); i++)
            X509_STORE_add_cert(store, sk_X509_value(cas, i));
        if (X509_STORE_CTX_init(ctx, store, leaf, chain) == 1) {
            /* the period was reported above */
            X509_STORE_CTX_set_flags(ctx, X509_V_FLAG_NO_CHECK_TIME);
            ok = X509_verify_cert(ctx) == 1;
        }
    }
    if (!ok && store && ctx)
        SM_WARN("the TLS certificate '%s' is not signed by a CA of '%s': peers that trust only "
                "those CAs will refuse it",
                tls_src_name(cert_src), tls_src_name(ca_src));
    ERR_clear_error();
    X509_STORE_CTX_free(ctx);
    X509_STORE_free(store);
}

/* Checks key_pem is a private key and the key of the first certificate of
 * chain. */
static sm_err tls_check_key(const char *key_pem, X509 *leaf, const char *key_src,
                            const char *cert_src, char *err, size_t errlen)
{
    BIO *b = BIO_new_mem_buf(key_pem, -1);
    EVP_PKEY *k = b ? PEM_read_bio_PrivateKey(b, NULL, NULL, (void *)"") : NULL;
    BIO_free(b);
    ERR_clear_error();
    if (!k)
        return sm_fail(err, errlen, SM_EFORMAT,
                       "the TLS key file '%s' holds no PEM private key (or one encrypted with a "
                       "passphrase, which shmap cannot use)",
                       tls_src_name(key_src));
    int match = X509_check_private_key(leaf, k) == 1;
    ERR_clear_error();
    EVP_PKEY_free(k);
    if (!match)
        return sm_fail(err, errlen, SM_EINVAL,
                       "the TLS key file '%s' is not the private key of the certificate '%s'",
                       tls_src_name(key_src), tls_src_name(cert_src));
    return SM_OK;
}

static int given(const char *s)
{
    return s && *s;
}

int sm_rpc_tls_opts_from_config(const sm_config_value *v, sm_rpc_tls_opts *o)
{
    int n = 0;
    for (int k = 0; k < 3; k++)
        n += v[k].s && *v[k].s;
    *o = (sm_rpc_tls_opts){v[0].s, v[1].s, v[2].s, v[3].s};
    return n && n < 3 ? -1 : 0;
}

sm_err sm_rpc_tls_create(const sm_rpc_tls_opts *o, sm_rpc_tls **out, char *err, size_t errlen)
{
    STACK_OF(X509) *chain = NULL, *cas = NULL;
    sm_rpc_tls *t = NULL;
    sm_err e;

    *out = NULL;
    if (!o || (!given(o->cert) && !given(o->key) && !given(o->ca)))
        return SM_OK; /* plaintext */
    if (given(o->cert) != given(o->key))
        return sm_fail(err, errlen, SM_EINVAL, "a TLS %s was given without its %s",
                       given(o->cert) ? "certificate" : "private key",
                       given(o->cert) ? "private key" : "certificate");
    if (!given(o->ca))
        return sm_fail(err, errlen, SM_EINVAL,
                       "TLS needs the CA certificate that signs the peers' certificates");
    if (!(t = calloc(1, sizeof *t)))
        return sm_fail(err, errlen, SM_ENOMEM, "cannot allocate TLS settings");
    if ((e = tls_read(o->ca, "TLS CA", &t->ca_pem, err, errlen)) ||
        (e = tls_certs(t->ca_pem, "TLS CA", o->ca, &cas, err, errlen)))
        goto fail;
    if (given(o->cert)) {
        if ((e = tls_read(o->cert, "TLS certificate", &t->cert_pem, err, errlen)) ||
            (e = tls_read(o->key, "TLS key", &t->key_pem, err, errlen)) ||
            (e = tls_certs(t->cert_pem, "TLS certificate", o->cert, &chain, err, errlen)) ||
            (e = tls_check_key(t->key_pem, sk_X509_value(chain, 0), o->key, o->cert, err, errlen)))
            goto fail;
        tls_warn_leaf(sk_X509_value(chain, 0), cas, chain, o->cert, o->ca);
        char subject[160] = "";
        X509_NAME_oneline(X509_get_subject_name(sk_X509_value(chain, 0)), subject, sizeof subject);
        snprintf(t->what, sizeof t->what, "certificate %s (%s), CA %s", tls_src_name(o->cert),
                 subject, tls_src_name(o->ca));
    } else {
        snprintf(t->what, sizeof t->what, "CA %s, no client certificate", tls_src_name(o->ca));
    }
    if (given(o->server_name) && !(t->server_name = strdup(o->server_name))) {
        e = sm_fail(err, errlen, SM_ENOMEM, "cannot allocate TLS settings");
        goto fail;
    }
    tls_certs_free(chain);
    tls_certs_free(cas);
    *out = t;
    return SM_OK;
fail:
    tls_certs_free(chain);
    tls_certs_free(cas);
    sm_rpc_tls_free(t);
    return e;
}

void sm_rpc_tls_free(sm_rpc_tls *t)
{
    if (!t)
        return;
    if (t->key_pem) {
        memset(t->key_pem, 0, strlen(t->key_pem));
        free(t->key_pem);
    }
    free(t->cert_pem);
    free(t->ca_pem);
    free(t->server_name);
    free(t);
}

int sm_rpc_addr_is_loopback(const char *addr)
{
    if (!addr)
        return 0;
    return strncmp(addr, "127.", 4) == 0 || strncmp(addr, "localhost:", 10) == 0 ||
           strncmp(addr, "[::1]:", 6) == 0;
}

int sm_rpc_tls_has_cert(const sm_rpc_tls *t)
{
    return t && t->cert_pem;
}

const char *sm_rpc_tls_describe(const sm_rpc_tls *t)
{
    return t ? t->what : "plaintext";
}

grpc_channel_credentials *sm_rpc_tls_channel_creds(const sm_rpc_tls *t)
{
    if (!t)
        return grpc_insecure_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {t->key_pem, t->cert_pem};
    return grpc_ssl_credentials_create(t->ca_pem, t->cert_pem ? &pair : NULL, NULL, NULL);
}

const char *sm_rpc_tls_server_name(const sm_rpc_tls *t)
{
    return t ? t->server_name : NULL;
}

grpc_server_credentials *sm_rpc_tls_server_creds(const sm_rpc_tls *t, int require_client_cert)
{
    if (!t)
        return grpc_insecure_server_credentials_create();
    grpc_ssl_pem_key_cert_pair pair = {t->key_pem, t->cert_pem};
    return grpc_ssl_server_credentials_create_ex(
        t->ca_pem, &pair, 1,
        require_client_cert ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
                            : GRPC_SSL_REQUEST_CLIENT_CERTIFICATE_AND_VERIFY,
        NULL);
}

int sm_rpc_tls_peer_has_cert(grpc_call *call)
{
    grpc_auth_context *ctx = grpc_call_auth_context(call);
    if (!ctx)
        return 0;
    /* A certificate the handshake accepted (it is verified against the CA
     * or the handshake fails) shows as the PEM property; the identity
     * (CN or SAN) alone would miss a certificate without either. */
    grpc_auth_property_iterator it =
        grpc_auth_context_find_properties_by_name(ctx, GRPC_X509_PEM_CERT_PROPERTY_NAME);
    int has = grpc_auth_property_iterator_next(&it) != NULL;
    grpc_auth_context_release(ctx);
    return has;
}
