#!/bin/sh
# Checks of worker-image/ that need processes: run from the repository root (MPIJOB_SRC_DIR).
#
#   check-worker-image.sh lint       the entrypoint parses as POSIX sh (and passes shellcheck
#                                    when it is installed)
#   check-worker-image.sh config     sshd accepts sshd_config and its effective settings are the
#                                    ones the image promises (port, key-only login, ...)
#   check-worker-image.sh login      the entrypoint starts sshd with that config; a key in
#                                    authorized_keys logs in, a password never does
#   check-worker-image.sh launcher   the entrypoint with arguments runs them
#
# Runs as root or as any user. As root, sshd runs in a private mount namespace with its own
# /run, so the host's /run is left alone. Exit 0 on success, 77 when the check cannot run here
# (said why), anything else on failure.
set -eu

src=${MPIJOB_SRC_DIR:-$(pwd)}
image="$src/worker-image"
sshd=/usr/sbin/sshd
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mpijob-image-check.XXXXXX")
sshd_pid=""

cleanup() {
    if [ -n "$sshd_pid" ]; then
        kill "$sshd_pid" 2>/dev/null || true
        wait "$sshd_pid" 2>/dev/null || true
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT INT TERM

fail() {
    echo "check-worker-image: $*" >&2
    exit 1
}

skip() {
    echo "check-worker-image: skipped: $*" >&2
    exit 77
}

need_sshd() {
    [ -x "$sshd" ] || skip "$sshd is not installed (openssh-server)"
    command -v ssh-keygen >/dev/null || skip "ssh-keygen is not installed"
}

# Runs sshd's own checks as root in a mount namespace whose /run is private (sshd -t wants its
# privilege separation directory there); as a user, directly.
in_private_run() {
    if [ "$(id -u)" -eq 0 ]; then
        command -v unshare >/dev/null || skip "unshare is not installed"
        # shellcheck disable=SC2016 # "$@" is the inner shell's
        unshare -m sh -c 'mount -t tmpfs mpijob-run /run && mkdir -p /run/sshd && exec "$@"' sh "$@"
    else
        "$@"
    fi
}

check_lint() {
    for script in entrypoint.sh sshd; do
        sh -n "$image/$script" || fail "$script does not parse"
        if command -v dash >/dev/null; then
            dash -n "$image/$script" || fail "$script does not parse as dash"
        fi
        head -n 1 "$image/$script" | grep -qx '#!/bin/sh' || fail "$script must start with #!/bin/sh"
        grep -q '^set -eu$' "$image/$script" || fail "$script must 'set -eu'"
        if command -v shellcheck >/dev/null; then
            shellcheck -s sh "$image/$script" || fail "shellcheck found problems in $script"
        fi
        echo "$script: ok"
    done
}

# The effective value of one setting in `sshd -T` output ($1), lower case as sshd prints it.
setting() {
    awk -v k="$2" '$1 == k { $1 = ""; sub(/^ /, ""); print; exit }' "$1"
}

expect() {
    got=$(setting "$tmp/effective" "$1")
    [ "$got" = "$2" ] || fail "sshd_config: $1 is '$got', want '$2'"
}

check_config() {
    need_sshd
    ssh-keygen -q -t ed25519 -N '' -f "$tmp/hostkey"
    in_private_run "$sshd" -t -f "$image/sshd_config" -h "$tmp/hostkey" ||
        fail "sshd -t refuses worker-image/sshd_config"
    in_private_run "$sshd" -T -f "$image/sshd_config" -h "$tmp/hostkey" >"$tmp/effective" ||
        fail "sshd -T refuses worker-image/sshd_config"
    expect port 2222
    expect pubkeyauthentication yes
    expect passwordauthentication no
    expect kbdinteractiveauthentication no
    expect permitemptypasswords no
    expect permitrootlogin without-password
    expect usepam no
    expect strictmodes no
    expect pidfile none
    expect authorizedkeysfile '%h/.ssh/authorized_keys'
    # The host keys are the entrypoint's alone (-h): none named in the file.
    keys=$(grep -c '^hostkey ' "$tmp/effective" || true)
    [ "$keys" = 1 ] || fail "sshd_config names host keys of its own ($keys in all, want only -h's)"
    expect hostkey "$tmp/hostkey"
    echo "sshd_config: ok"
}

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

ssh_to() {
    ssh -F /dev/null -p "$port" -o BatchMode=yes -o StrictHostKeyChecking=no \
        -o UserKnownHostsFile=/dev/null -o ConnectTimeout=5 -o LogLevel=ERROR "$@"
}

check_login() {
    need_sshd
    command -v ssh >/dev/null || skip "ssh is not installed (openssh-client)"
    command -v python3 >/dev/null || skip "python3 is not installed (used to find a free port)"
    user=$(id -un)
    shell=$(getent passwd "$user" | cut -d: -f7)
    case "$shell" in
    */nologin | */false | "") skip "user $user has no login shell ($shell)" ;;
    esac
    port=$(free_port)
    ssh-keygen -q -t ed25519 -N '' -f "$tmp/id_test"
    cp "$tmp/id_test.pub" "$tmp/authorized_keys"
    # The image's config, on a free port and loopback only, reading the test's key.
    sed -e "s/^Port .*/Port $port/" \
        -e "s|^AuthorizedKeysFile .*|AuthorizedKeysFile $tmp/authorized_keys|" \
        "$image/sshd_config" >"$tmp/sshd_config"
    echo "ListenAddress 127.0.0.1" >>"$tmp/sshd_config"
    # The image's /usr/sbin/sshd is worker-image/sshd in front of OpenSSH's (sshd.real there):
    # here the pair runs with this machine's sshd behind it.
    sed -e "s|^real=.*|real=$sshd|" "$image/sshd" >"$tmp/sshd"
    sed -e "s|/usr/sbin/sshd |sh $tmp/sshd |" "$image/entrypoint.sh" >"$tmp/entrypoint.sh"
    grep -q "sh $tmp/sshd " "$tmp/entrypoint.sh" || fail "entrypoint.sh does not run /usr/sbin/sshd"
    if [ "$(id -u)" -eq 0 ]; then
        command -v unshare >/dev/null || skip "unshare is not installed"
        # shellcheck disable=SC2016 # $1 is the inner shell's
        MPIJOB_SSHD_CONFIG="$tmp/sshd_config" MPIJOB_SSHD_DIR="$tmp/hostkeys" \
            unshare -m sh -c 'mount -t tmpfs mpijob-run /run && exec sh "$1"' sh \
            "$tmp/entrypoint.sh" >"$tmp/sshd.log" 2>&1 &
    else
        MPIJOB_SSHD_CONFIG="$tmp/sshd_config" MPIJOB_SSHD_DIR="$tmp/hostkeys" \
            sh "$tmp/entrypoint.sh" >"$tmp/sshd.log" 2>&1 &
    fi
    sshd_pid=$!
    tries=0
    until ssh_to -i "$tmp/id_test" -o IdentitiesOnly=yes "$user@127.0.0.1" true 2>"$tmp/ssh.err"; do
        tries=$((tries + 1))
        if [ "$tries" -ge 50 ] || ! kill -0 "$sshd_pid" 2>/dev/null; then
            cat "$tmp/sshd.log" "$tmp/ssh.err" >&2
            fail "no key login to the entrypoint's sshd on port $port"
        fi
        sleep 0.2
    done
    out=$(ssh_to -i "$tmp/id_test" -o IdentitiesOnly=yes "$user@127.0.0.1" 'echo login-ok')
    [ "$out" = "login-ok" ] || fail "key login ran the command but printed '$out'"
    for f in ssh_host_ed25519_key ssh_host_ecdsa_key; do
        [ -s "$tmp/hostkeys/$f" ] || fail "the image's sshd made no $f"
        mode=$(stat -c %a "$tmp/hostkeys/$f")
        [ "$mode" = 600 ] || fail "$f has mode $mode, want 600"
    done
    # Only publickey is offered: a client that has no key is refused without a password prompt.
    if ssh_to -o PubkeyAuthentication=no -o PreferredAuthentications=password,keyboard-interactive \
        "$user@127.0.0.1" true 2>"$tmp/nokey.err"; then
        fail "a login without a key succeeded"
    fi
    grep -q 'Permission denied (publickey)' "$tmp/nokey.err" ||
        fail "a login without a key was not refused as publickey-only: $(cat "$tmp/nokey.err")"
    echo "entrypoint sshd: key login ok, password refused"
}

check_launcher() {
    out=$(sh "$image/entrypoint.sh" echo launcher-ok)
    [ "$out" = "launcher-ok" ] || fail "entrypoint with a command printed '$out'"
    code=0
    sh "$image/entrypoint.sh" sh -c 'exit 3' || code=$?
    [ "$code" -eq 3 ] || fail "entrypoint did not pass the command's exit status (got $code)"
    echo "entrypoint launcher mode: ok"
}

case "${1:-}" in
lint) check_lint ;;
config) check_config ;;
login) check_login ;;
launcher) check_launcher ;;
*)
    echo "usage: check-worker-image.sh lint|config|login|launcher" >&2
    exit 2
    ;;
esac
