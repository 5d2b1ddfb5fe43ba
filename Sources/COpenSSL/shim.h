#ifndef COPENSSL_SHIM_H
#define COPENSSL_SHIM_H
// Deprecation attributes only: the one-shot SHA256() is the fastest digest path and is still supported.
#define OPENSSL_SUPPRESS_DEPRECATED 1
#include <openssl/asn1.h>
#include <openssl/bio.h>
#include <openssl/bn.h>
#include <openssl/crypto.h>
#include <openssl/ec.h>
#include <openssl/ecdsa.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/objects.h>
#include <openssl/pem.h>
#include <openssl/pkcs7.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/x509_vfy.h>

// Macro-only APIs, wrapped so Swift can call them.
static inline STACK_OF(X509) *copenssl_sk_X509_new_null(void) { return sk_X509_new_null(); }
static inline int copenssl_sk_X509_push(STACK_OF(X509) *stack, X509 *cert) { return sk_X509_push(stack, cert); }
static inline void copenssl_sk_X509_free(STACK_OF(X509) *stack) { sk_X509_free(stack); }
static inline int copenssl_sk_X509_num(const STACK_OF(X509) *stack) { return sk_X509_num(stack); }
static inline X509 *copenssl_sk_X509_value(const STACK_OF(X509) *stack, int i) { return sk_X509_value(stack, i); }
static inline void copenssl_free(void *ptr) { OPENSSL_free(ptr); }
static inline EVP_PKEY *copenssl_EVP_EC_gen(const char *curve) { return EVP_EC_gen(curve); }
static inline int copenssl_EVP_PKEY_CTX_set_ec_paramgen_curve_nid(EVP_PKEY_CTX *ctx, int nid) {
    return EVP_PKEY_CTX_set_ec_paramgen_curve_nid(ctx, nid);
}

// The public point of a verification's scratch EC_KEY, copied into the point the key already owns:
// EC_KEY_set_public_key frees that point and allocates a new one (four allocations) on every call.
static inline int copenssl_EC_KEY_copy_public_key(EC_KEY *key, const EC_POINT *point) {
    EC_POINT *own = (EC_POINT *)EC_KEY_get0_public_key(key);
    if (own == NULL) return EC_KEY_set_public_key(key, point);
    return EC_POINT_copy(own, point);
}

#endif
