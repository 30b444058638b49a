#!/bin/sh
# Entrypoint of the mpijob-worker image.
#
#   no arguments   a worker: sshd in the foreground on port 2222, waiting for the launcher's
#                  mpirun to start ranks over ssh
#   COMMAND ...    a launcher, or anything else: runs COMMAND (mpirun ... mpijob-worker train)
#
# Runs as root or as any user. Host keys are made for each container, so containers of one
# image never share them, in a directory the user can write:
#   MPIJOB_SSHD_CONFIG   sshd's config      (default /etc/ssh/sshd_config.mpijob)
#   MPIJOB_SSHD_DIR      host keys' folder  (default /tmp/mpijob-sshd-UID)
set -eu

if [ "$#" -gt 0 ]; then
    exec "$@"
fi

config=${MPIJOB_SSHD_CONFIG:-/etc/ssh/sshd_config.mpijob}
uid=$(id -u)
keydir=${MPIJOB_SSHD_DIR:-/tmp/mpijob-sshd-$uid}

if [ ! -r "$config" ]; then
    echo "mpijob-entrypoint: cannot read sshd config $config" >&2
    exit 1
fi

# sshd refuses host keys that others can read, so the folder and the keys are ours alone.
umask 077
mkdir -p "$keydir"
if [ ! -O "$keydir" ]; then
    echo "mpijob-entrypoint: $keydir belongs to another user; set MPIJOB_SSHD_DIR" >&2
    exit 1
fi
chmod 700 "$keydir"
set --
for type in ed25519 ecdsa; do
    key="$keydir/ssh_host_${type}_key"
    if [ ! -s "$key" ]; then
        rm -f "$key" "$key.pub"
        ssh-keygen -q -t "$type" -N '' -C "mpijob-worker host key" -f "$key"
    fi
    chmod 600 "$key"
    set -- "$@" -h "$key"
done

# As root, sshd separates privileges into /run/sshd, which a fresh /run may lack.
if [ "$uid" -eq 0 ]; then
    mkdir -p /run/sshd
    chmod 755 /run/sshd
fi

# -D: stay in the foreground as the container's process; -e: log to stderr (kubectl logs).
exec /usr/sbin/sshd -D -e -f "$config" "$@"
