#!/usr/bin/env bash
# Make this Raspberry Pi one edgelab device: a venv with edgelab's worker
# dependencies, a Dask config that keeps MALLOC_TRIM_THRESHOLD_ unset, the
# cluster's certificates in /etc/edgelab/tls, and the systemd unit
# edgelab-worker.service, enabled and started. Run it as root from a checkout
# of the repository on the Pi, with a folder holding this board's share of the
# certificates (on the machine that makes them:
# python -m edgelab.cluster.tls OUT_DIR SCHEDULER_ADDRESS, then copy OUT_DIR's ca.pem,
# worker.pem and worker-key.pem to the board):
#
#   sudo cluster/pi/install-worker.sh --scheduler tls://192.168.1.10:8786 --device pi3b-0 --tls-dir ~/edgelab-tls
#
# TLS is the default and the only way in with a tls:// scheduler: a process
# without a certificate from the cluster's CA can neither join nor connect.
# --insecure-plain-tcp is the opt-out for a lab bench whose LAN you trust with
# running code on the boards: it takes a tcp:// scheduler and no certificates.
#
# Needs a 64-bit OS (aarch64) and Python 3.11 or later, e.g. 64-bit Raspberry Pi
# OS bookworm: PyPI has TensorFlow wheels for aarch64 but none for 32-bit ARM.
# tflite-runtime does install on 32-bit ARM, but it only runs inference, and
# edgelab's devices train, so it is no substitute here.
#
# --print-unit prints the unit it would install and changes nothing (it reads
# no certificate: the unit names where they are installed, /etc/edgelab/tls).
# Undo: systemctl disable --now edgelab-worker; rm /etc/systemd/system/edgelab-worker.service;
#   rm -r /etc/edgelab/tls
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
unit_name="edgelab-worker.service"
# Where the unit reads the certificates from (edgelab-worker.service names these paths).
tls_target="/etc/edgelab/tls"
tls_files=(ca.pem worker.pem worker-key.pem)

scheduler=""
device=""
tier="edge"
user="edgelab"
venv="/opt/edgelab/venv"
tls_dir=""
plain_tcp=false
print_unit=false

usage() {
    cat <<USAGE
usage: $0 --scheduler tls://HOST:8786 --device NAME --tls-dir DIR [--tier edge] [--user edgelab]
       [--venv /opt/edgelab/venv] [--print-unit]
       $0 --insecure-plain-tcp --scheduler tcp://HOST:8786 --device NAME [...]
  --scheduler  the Dask scheduler's address, tls://HOST:PORT (tcp:// only with --insecure-plain-tcp)
  --device     this board's device name, e.g. pi3b-0: the worker's name and its resource device-NAME
  --tls-dir    a folder with ca.pem, worker.pem and worker-key.pem as python -m edgelab.cluster.tls writes them;
               installed to $tls_target (the key readable by root and the worker's group only)
  --insecure-plain-tcp  no TLS (a lab bench only): any host that reaches the scheduler may join or run code
  --tier       the tier resource, tier-TIER (default edge)
  --user       the user the worker runs as; created as a system user if missing (default edgelab)
  --venv       where the virtualenv goes (default /opt/edgelab/venv)
  --print-unit print the systemd unit that would be installed, and change nothing
USAGE
}

fail() {
    echo "install-worker.sh: $*" >&2
    exit 2
}

while [[ $# -gt 0 ]]; do
    case "$1" in
        --scheduler) scheduler="${2-}"; shift 2 || fail "--scheduler needs a value" ;;
        --device) device="${2-}"; shift 2 || fail "--device needs a value" ;;
        --tier) tier="${2-}"; shift 2 || fail "--tier needs a value" ;;
        --user) user="${2-}"; shift 2 || fail "--user needs a value" ;;
        --venv) venv="${2-}"; shift 2 || fail "--venv needs a value" ;;
        --tls-dir) tls_dir="${2-}"; shift 2 || fail "--tls-dir needs a value" ;;
        --insecure-plain-tcp) plain_tcp=true; shift ;;
        --print-unit) print_unit=true; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; fail "unknown argument '$1'" ;;
    esac
done

# Checked before anything is written; they also keep the sed substitutions below literal.
[[ -n "$scheduler" ]] || { usage >&2; fail "--scheduler is required"; }
[[ -n "$device" ]] || { usage >&2; fail "--device is required"; }
[[ "$scheduler" =~ ^(tcp|tls)://[][A-Za-z0-9.:_-]+$ ]] ||
    fail "--scheduler must look like tls://HOST:PORT, got '$scheduler'"
[[ "$device" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || fail "--device must be a name like pi3b-0, got '$device'"
[[ "$tier" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || fail "--tier must be a name like edge, got '$tier'"
[[ "$user" =~ ^[a-z_][a-z0-9_-]*$ ]] || fail "--user must be a user name, got '$user'"
[[ "$venv" =~ ^/[A-Za-z0-9._/-]+$ ]] || fail "--venv must be an absolute path, got '$venv'"
if $plain_tcp; then
    [[ "$scheduler" == tcp://* ]] || fail "--insecure-plain-tcp takes a tcp:// scheduler, got '$scheduler'"
    [[ -z "$tls_dir" ]] || fail "--tls-dir and --insecure-plain-tcp contradict each other: choose one"
else
    [[ "$scheduler" == tls://* ]] ||
        fail "--scheduler must be tls://HOST:PORT, got '$scheduler' (plain tcp:// only with --insecure-plain-tcp)"
    [[ -n "$tls_dir" ]] || { usage >&2; fail "--tls-dir is required (or --insecure-plain-tcp on a lab bench)"; }
    [[ "$tls_dir" != -* ]] || fail "--tls-dir needs a folder, got '$tls_dir'"
fi

render_unit() {
    # The template speaks TLS; plain TCP drops its --tls-* options.
    local plain='s|^(ExecStart=.*) --tls-ca-file [^ ]+ --tls-cert [^ ]+ --tls-key [^ ]+|\1|'
    $plain_tcp || plain=''
    sed -E -e "s|^User=.*|User=$user|" \
        -e "s|^Environment=SCHEDULER=.*|Environment=SCHEDULER=$scheduler|" \
        -e "s|^Environment=DEVICE=.*|Environment=DEVICE=$device|" \
        -e "s|^Environment=TIER=.*|Environment=TIER=$tier|" \
        -e "s|/opt/edgelab/venv/|$venv/|g" \
        -e "$plain" \
        "$here/$unit_name"
}

if $print_unit; then
    render_unit
    exit 0
fi

# Before anything is written: the certificates must all be there.
if ! $plain_tcp; then
    for file in "${tls_files[@]}"; do
        [[ -f "$tls_dir/$file" ]] ||
            fail "--tls-dir $tls_dir has no $file (python -m edgelab.cluster.tls writes ca.pem, worker.pem, worker-key.pem)"
    done
fi

[[ "$(id -u)" -eq 0 ]] || fail "run as root (sudo): it creates a user and installs a systemd unit"
machine="$(uname -m)"
[[ "$machine" == aarch64 || "$machine" == x86_64 ]] ||
    fail "PyPI has no TensorFlow for $machine: install a 64-bit OS (aarch64) on this board"
python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
    fail "needs Python 3.11 or later, found $(python3 --version 2>&1)"
python3 -c 'import venv, ensurepip' 2>/dev/null || fail "python3 cannot make a venv: apt-get install python3-venv"

if ! id "$user" >/dev/null 2>&1; then
    useradd --system --create-home --home-dir "/var/lib/$user" --shell /usr/sbin/nologin "$user"
fi
home="$(getent passwd "$user" | cut -d: -f6)"
group="$(id -gn "$user")"

# The venv belongs to root: the worker can run its code but not change it.
echo "install-worker.sh: installing edgelab's worker dependencies into $venv (TensorFlow takes a while)"
python3 -m venv "$venv"
"$venv/bin/pip" install --no-cache-dir --upgrade pip
requirements="$(mktemp)"
trap 'rm -f "$requirements"' EXIT
python3 "$repo/cluster/compose/worker_requirements.py" "$repo/pyproject.toml" >"$requirements"
"$venv/bin/pip" install --no-cache-dir -r "$requirements"
# Workers import edgelab: they unpickle its tasks and its worker plugin.
"$venv/bin/pip" install --no-cache-dir --no-deps "$repo"

# As cluster/README.md shows: the nanny then starts the worker without MALLOC_TRIM_THRESHOLD_.
install -d -o "$user" -g "$group" "$home/.config" "$home/.config/dask"
cat >"$home/.config/dask/no-malloc-trim.yaml" <<'YAML'
distributed:
  nanny:
    pre-spawn-environ:
      MALLOC_TRIM_THRESHOLD_: null   # null: the nanny leaves it unset
YAML
chown "$user:$group" "$home/.config/dask/no-malloc-trim.yaml"

# The certificates: readable by all but the key, which only root and the worker's group read.
# Installed afresh each run (a new set from python -m edgelab.cluster.tls replaces the old one).
if ! $plain_tcp; then
    install -d -o root -g root -m 0755 /etc/edgelab "$tls_target"
    install -o root -g root -m 0644 "$tls_dir/ca.pem" "$tls_dir/worker.pem" "$tls_target/"
    install -o root -g "$group" -m 0640 "$tls_dir/worker-key.pem" "$tls_target/"
fi

render_unit >"/etc/systemd/system/$unit_name"
systemctl daemon-reload
systemctl enable "$unit_name"
# restart, not start: a second run picks up the new unit and venv.
systemctl restart "$unit_name"
echo "install-worker.sh: $device joins $scheduler; follow it with: journalctl -u $unit_name -f"
