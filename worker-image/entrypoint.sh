#!/bin/sh
# Entrypoint of the mpijob-worker image.
#
#   no arguments   a worker: sshd in the foreground on port 2222, waiting for the launcher's
#                  mpirun to start ranks over ssh
#   COMMAND ...    a launcher, or anything else: runs COMMAND (mpirun ... mpijob-worker train)
#
# Runs as root or as any user. The image's /usr/sbin/sshd (worker-image/sshd) makes host keys
# for each container, so containers of one image never share them:
#   MPIJOB_SSHD_CONFIG   sshd's config      (default /etc/ssh/sshd_config.mpijob)
#   MPIJOB_SSHD_DIR      host keys' folder  (default /tmp/mpijob-sshd-UID)
set -eu

if [ "$#" -gt 0 ]; then
    exec "$@"
fi

config=${MPIJOB_SSHD_CONFIG:-/etc/ssh/sshd_config.mpijob}
if [ ! -r "$config" ]; then
    echo "mpijob-entrypoint: cannot read sshd config $config" >&2
    exit 1
fi

# -D: stay in the foreground as the container's process; -e: log to stderr (kubectl logs).
exec /usr/sbin/sshd -D -e -f "$config"
