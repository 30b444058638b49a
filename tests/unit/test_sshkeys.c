#include <criterion/criterion.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "mpijob/sshkeys.h"

static const char pem_begin[] = "-----BEGIN EC PRIVATE KEY-----\n";
static const char pem_end[] = "-----END EC PRIVATE KEY-----\n";

/* The public line without its trailing newline. */
static char *public_fields(const struct ssh_keypair *kp)
{
    char *s = strdup(kp->public_authorized);
    cr_assert_not_null(s);
    s[strcspn(s, "\n")] = '\0';
    return s;
}

Test(sshkeys, private_key_is_sec1_pem)
{
    struct ssh_keypair kp;
    cr_assert_eq(ssh_keypair_generate(&kp), 0);
    cr_assert_not_null(kp.private_pem);
    cr_assert_eq(strncmp(kp.private_pem, pem_begin, strlen(pem_begin)), 0, "%s", kp.private_pem);
    size_t len = strlen(kp.private_pem);
    cr_assert_gt(len, strlen(pem_end));
    cr_assert_str_eq(kp.private_pem + len - strlen(pem_end), pem_end);
    ssh_keypair_free(&kp);
    cr_assert_null(kp.private_pem);
    cr_assert_null(kp.public_authorized);
    ssh_keypair_free(&kp); /* an empty struct is fine */
}

/* The acceptance check: OpenSSH itself derives the same public key from the private one. */
Test(sshkeys, ssh_keygen_derives_the_same_public_key)
{
    struct ssh_keypair kp;
    cr_assert_eq(ssh_keypair_generate(&kp), 0);

    char path[] = "/tmp/mpijob-sshkey-XXXXXX";
    int fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(fchmod(fd, 0600), 0);
    size_t len = strlen(kp.private_pem);
    cr_assert_eq(write(fd, kp.private_pem, len), (ssize_t)len);
    close(fd);

    char cmd[256];
    snprintf(cmd, sizeof(cmd), "ssh-keygen -y -f %s 2>&1", path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    char line[4096] = "";
    char *got = fgets(line, sizeof(line), p);
    int status = pclose(p);
    unlink(path);
    cr_assert_not_null(got, "ssh-keygen printed nothing (is openssh-client installed?)");
    cr_assert_eq(status, 0, "ssh-keygen failed: %s", line);

    /* ssh-keygen prints "type base64 [comment]"; compare the first two fields. */
    line[strcspn(line, "\n")] = '\0';
    char *sp = strchr(line, ' ');
    cr_assert_not_null(sp);
    sp = strchr(sp + 1, ' ');
    if (sp)
        *sp = '\0';
    char *want = public_fields(&kp);
    cr_assert_str_eq(line, want);
    free(want);
    ssh_keypair_free(&kp);
}

static uint32_t get_u32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

Test(sshkeys, public_line_is_type_and_valid_wire_blob)
{
    struct ssh_keypair kp;
    cr_assert_eq(ssh_keypair_generate(&kp), 0);
    size_t len = strlen(kp.public_authorized);
    cr_assert_eq(kp.public_authorized[len - 1], '\n');
    cr_assert_eq(strchr(kp.public_authorized, '\n'), kp.public_authorized + len - 1,
                 "exactly one newline, at the end");

    char *fields = public_fields(&kp);
    int count = 0;
    char *save = NULL, *field[4] = {0};
    for (char *t = strtok_r(fields, " ", &save); t; t = strtok_r(NULL, " ", &save)) {
        cr_assert_lt(count, 4);
        field[count++] = t;
    }
    cr_assert(count == 2 || count == 3, "%d fields", count);
    cr_assert_str_eq(field[0], SSH_KEY_TYPE);

    /* Valid base64 that decodes to string type, string curve, string Q. */
    size_t b64 = strlen(field[1]);
    cr_assert_eq(b64 % 4, 0);
    cr_assert_eq(strspn(field[1], "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/="),
                 b64);
    unsigned char blob[512];
    cr_assert_leq(b64 / 4 * 3, sizeof(blob));
    int n = EVP_DecodeBlock(blob, (const unsigned char *)field[1], (int)b64);
    cr_assert_gt(n, 0);
    n -= (int)(strlen(field[1]) - strcspn(field[1], "=")); /* DecodeBlock counts padding */

    const char *want_strings[2] = {"ecdsa-sha2-nistp521", "nistp521"};
    const unsigned char *p = blob, *end = blob + n;
    for (int i = 0; i < 2; i++) {
        cr_assert_leq(p + 4, end);
        uint32_t l = get_u32(p);
        cr_assert_eq(l, strlen(want_strings[i]));
        cr_assert_eq(memcmp(p + 4, want_strings[i], l), 0);
        p += 4 + l;
    }
    cr_assert_leq(p + 4, end);
    uint32_t ql = get_u32(p);
    cr_assert_eq(ql, 1 + 2 * 66, "uncompressed P-521 point");
    cr_assert_eq(p[4], 0x04);
    cr_assert_eq(p + 4 + ql, end, "nothing after Q");

    free(fields);
    ssh_keypair_free(&kp);
}

Test(sshkeys, every_generation_is_fresh)
{
    struct ssh_keypair a, b;
    cr_assert_eq(ssh_keypair_generate(&a), 0);
    cr_assert_eq(ssh_keypair_generate(&b), 0);
    cr_assert_str_neq(a.private_pem, b.private_pem);
    cr_assert_str_neq(a.public_authorized, b.public_authorized);
    ssh_keypair_free(&a);
    ssh_keypair_free(&b);
}
