/* Per-job SSH keys with OpenSSL 3: the private key as SEC1 PEM, the public key in the SSH wire
 * format (RFC 5656 section 3.1) base64-encoded for authorized_keys. */
#include "mpijob/sshkeys.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/encoder.h>
#include <openssl/err.h>
#include <openssl/evp.h>

#include "util/log.h"

#define CURVE_OPENSSL "P-521"
#define CURVE_SSH "nistp521"
#define FIELD_BYTES 66                      /* ceil(521 / 8) */
#define POINT_BYTES (1 + 2 * FIELD_BYTES)   /* 0x04 || X || Y */

static int openssl_failed(const char *what)
{
    unsigned long e = ERR_peek_last_error();
    char reason[256] = "unknown";
    if (e)
        ERR_error_string_n(e, reason, sizeof(reason));
    log_error("ssh key generation failed", "step=%s openssl=\"%s\"", what, reason);
    ERR_clear_error(); /* the queue is per thread; leave nothing for the next caller */
    return -EIO;
}

/* SEC1 "EC PRIVATE KEY" PEM ("type-specific" structure), which OpenSSH loads as is. */
static int encode_private(EVP_PKEY *pkey, char **out)
{
    unsigned char *data = NULL;
    size_t len = 0;
    int rc = 0;
    OSSL_ENCODER_CTX *ctx =
        OSSL_ENCODER_CTX_new_for_pkey(pkey, EVP_PKEY_KEYPAIR, "PEM", "type-specific", NULL);
    if (!ctx || OSSL_ENCODER_CTX_get_num_encoders(ctx) == 0 ||
        !OSSL_ENCODER_to_data(ctx, &data, &len)) {
        rc = openssl_failed("encode private key");
        goto out;
    }
    *out = malloc(len + 1);
    if (!*out) {
        rc = -ENOMEM;
        goto out;
    }
    memcpy(*out, data, len);
    (*out)[len] = '\0';
out:
    OPENSSL_clear_free(data, len);
    OSSL_ENCODER_CTX_free(ctx);
    return rc;
}

static unsigned char *put_string(unsigned char *p, const void *s, size_t len)
{
    p[0] = (unsigned char)(len >> 24);
    p[1] = (unsigned char)(len >> 16);
    p[2] = (unsigned char)(len >> 8);
    p[3] = (unsigned char)len;
    memcpy(p + 4, s, len);
    return p + 4 + len;
}

/* "ecdsa-sha2-nistp521 " + base64(string type, string curve, string Q) + "\n". */
static int encode_public(EVP_PKEY *pkey, char **out)
{
    unsigned char point[POINT_BYTES + 1];
    size_t point_len = 0;
    if (!EVP_PKEY_get_octet_string_param(pkey, OSSL_PKEY_PARAM_ENCODED_PUBLIC_KEY, point,
                                         sizeof(point), &point_len))
        return openssl_failed("read public point");
    if (point_len != POINT_BYTES || point[0] != 0x04) {
        log_error("ssh key generation failed", "step=%s length=%zu", "public point not uncompressed",
                  point_len);
        return -EIO;
    }

    static const char type[] = SSH_KEY_TYPE, curve[] = CURVE_SSH;
    unsigned char blob[3 * 4 + sizeof(type) - 1 + sizeof(curve) - 1 + POINT_BYTES];
    unsigned char *p = put_string(blob, type, sizeof(type) - 1);
    p = put_string(p, curve, sizeof(curve) - 1);
    p = put_string(p, point, point_len);
    size_t blob_len = (size_t)(p - blob);

    size_t b64_len = 4 * ((blob_len + 2) / 3);
    size_t prefix = sizeof(type); /* the type and one space */
    char *line = malloc(prefix + b64_len + 2);
    if (!line)
        return -ENOMEM;
    memcpy(line, type, prefix - 1);
    line[prefix - 1] = ' ';
    int n = EVP_EncodeBlock((unsigned char *)line + prefix, blob, (int)blob_len);
    if (n != (int)b64_len) {
        free(line);
        return openssl_failed("base64 public key");
    }
    line[prefix + b64_len] = '\n';
    line[prefix + b64_len + 1] = '\0';
    *out = line;
    return 0;
}

int ssh_keypair_generate(struct ssh_keypair *out)
{
    int rc = 0;
    out->private_pem = NULL;
    out->public_authorized = NULL;

    EVP_PKEY *pkey = EVP_PKEY_Q_keygen(NULL, NULL, "EC", CURVE_OPENSSL);
    if (!pkey)
        return openssl_failed("generate " CURVE_OPENSSL " key");
    /* Uncompressed is the default; say so, since SSH requires it for Q. */
    if (!EVP_PKEY_set_utf8_string_param(pkey, OSSL_PKEY_PARAM_EC_POINT_CONVERSION_FORMAT,
                                        OSSL_PKEY_EC_POINT_CONVERSION_FORMAT_UNCOMPRESSED)) {
        rc = openssl_failed("set point format");
        goto out;
    }
    rc = encode_private(pkey, &out->private_pem);
    if (rc < 0)
        goto out;
    rc = encode_public(pkey, &out->public_authorized);
out:
    EVP_PKEY_free(pkey);
    if (rc < 0)
        ssh_keypair_free(out);
    return rc;
}

void ssh_keypair_free(struct ssh_keypair *kp)
{
    if (kp->private_pem) {
        OPENSSL_cleanse(kp->private_pem, strlen(kp->private_pem));
        free(kp->private_pem);
    }
    free(kp->public_authorized);
    kp->private_pem = NULL;
    kp->public_authorized = NULL;
}
