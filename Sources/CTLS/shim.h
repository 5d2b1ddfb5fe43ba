#ifndef CTLS_SHIM_H
#define CTLS_SHIM_H
// OpenSSL's TLS side (libssl) for the TLS target (Redis client connections, the listener's server side);
// COpenSSL stays libcrypto-only for verification.
#include <string.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

// Macro-only APIs, wrapped so Swift can call them.
static inline int ctls_SSL_CTX_set_min_proto_version(SSL_CTX *ctx, int version) {
    return (int)SSL_CTX_set_min_proto_version(ctx, version);
}
static inline void ctls_SSL_CTX_set_mode(SSL_CTX *ctx, long mode) { (void)SSL_CTX_set_mode(ctx, mode); }
static inline void ctls_SSL_CTX_disable_renegotiation(SSL_CTX *ctx) { (void)SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION); }
static inline void ctls_SSL_CTX_prefer_server_ciphers(SSL_CTX *ctx) { (void)SSL_CTX_set_options(ctx, SSL_OP_CIPHER_SERVER_PREFERENCE); }
static inline int ctls_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }
static inline void ctls_SSL_CTX_set_session_cache_server(SSL_CTX *ctx, long size) {
    (void)SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_SERVER);
    (void)SSL_CTX_sess_set_cache_size(ctx, size);
}
// SNI: the callback picks the certificate's context for the name the client asked for.
static inline void ctls_SSL_CTX_set_servername_callback(SSL_CTX *ctx, int (*callback)(SSL *, int *, void *), void *arg) {
    (void)SSL_CTX_set_tlsext_servername_callback(ctx, callback);
    (void)SSL_CTX_set_tlsext_servername_arg(ctx, arg);
}
// OCSP stapling: the callback attaches the staple when the client asked for one.
static inline void ctls_SSL_CTX_set_status_callback(SSL_CTX *ctx, int (*callback)(SSL *, void *), void *arg) {
    (void)SSL_CTX_set_tlsext_status_cb(ctx, callback);
    (void)SSL_CTX_set_tlsext_status_arg(ctx, arg);
}
static inline int ctls_SSL_client_asked_status(SSL *ssl) { return SSL_get_tlsext_status_type(ssl) == TLSEXT_STATUSTYPE_ocsp; }
/// OpenSSL takes ownership of the copy.
static inline int ctls_SSL_set_ocsp_response(SSL *ssl, const unsigned char *bytes, long count) {
    unsigned char *copy = OPENSSL_malloc(count);
    if (copy == NULL) return 0;
    memcpy(copy, bytes, count);
    if (SSL_set_tlsext_status_ocsp_resp(ssl, copy, count) != 1) { OPENSSL_free(copy); return 0; }
    return 1;
}
static inline int ctls_sni_ok(void) { return SSL_TLSEXT_ERR_OK; }
static inline int ctls_sni_noack(void) { return SSL_TLSEXT_ERR_NOACK; }
static inline int ctls_sni_fatal(void) { return SSL_TLSEXT_ERR_ALERT_FATAL; }

#endif
