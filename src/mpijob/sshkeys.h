/* The per-job SSH key pair stored in Secret `J-ssh` (SPEC.md section 2, item 3), which lets the
 * launcher's mpirun reach sshd on the workers.
 *
 * ECDSA on NIST P-521, the key type the Kubeflow MPI operator generates: images and sshd
 * configurations that accept that operator's keys accept ours. OpenSSH accepts it by default
 * (since 5.7), and it loads the private key by content, whatever the file is named (the Secret
 * mounts it as id_rsa). */
#ifndef MPIJOB_SSHKEYS_H
#define MPIJOB_SSHKEYS_H

#define SSH_KEY_TYPE "ecdsa-sha2-nistp521"

struct ssh_keypair {
    /* "-----BEGIN EC PRIVATE KEY-----" (SEC1) PEM, ending in '\n'. */
    char *private_pem;
    /* One authorized_keys line: "ecdsa-sha2-nistp521 <base64 wire blob>\n", no comment. */
    char *public_authorized;
};

/* Generates a fresh key pair into *out; both strings are malloc'd and NUL-terminated, and
 * ssh_keypair_free releases them. Returns 0, -ENOMEM, or -EIO when OpenSSL fails (its reason
 * is logged). On failure *out holds NULLs. Thread-safe. */
int ssh_keypair_generate(struct ssh_keypair *out);

/* Wipes the private key and frees both strings; the struct is left empty. Safe on an empty
 * struct. */
void ssh_keypair_free(struct ssh_keypair *kp);

#endif
