#ifndef CTLS_SHIM_H
#define CTLS_SHIM_H
// OpenSSL's TLS side (libssl) for the Redis TLS stream; COpenSSL stays libcrypto-only for verification.
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
static inline int ctls_SSL_set_tlsext_host_name(SSL *ssl, const char *name) { return (int)SSL_set_tlsext_host_name(ssl, name); }

#endif
