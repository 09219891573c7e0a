#!/usr/bin/env bash
# Make this Raspberry Pi one edgelab device: a venv with edgelab's worker
# dependencies, a Dask config that keeps MALLOC_TRIM_THRESHOLD_ unset, and the
# systemd unit edgelab-worker.service, enabled and started. Run it as root from
# a checkout of the repository on the Pi:
#
#   sudo cluster/pi/install-worker.sh --scheduler tcp://192.168.1.10:8786 --device pi3b-0
#
# Needs a 64-bit OS (aarch64) and Python 3.11 or later, e.g. 64-bit Raspberry Pi
# OS bookworm: PyPI has TensorFlow wheels for aarch64 but none for 32-bit ARM.
# tflite-runtime does install on 32-bit ARM, but it only runs inference, and
# edgelab's devices train, so it is no substitute here.
#
# --print-unit prints the unit it would install and changes nothing.
# Undo: systemctl disable --now edgelab-worker; rm /etc/systemd/system/edgelab-worker.service
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
unit_name="edgelab-worker.service"

scheduler=""
device=""
tier="edge"
user="edgelab"
venv="/opt/edgelab/venv"
print_unit=false

usage() {
    cat <<USAGE
usage: $0 --scheduler tcp://HOST:8786 --device NAME [--tier edge] [--user edgelab] [--venv /opt/edgelab/venv] [--print-unit]
  --scheduler  the Dask scheduler's address (tcp:// or tls://)
  --device     this board's device name, e.g. pi3b-0: the worker's name and its resource device-NAME
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
        --print-unit) print_unit=true; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; fail "unknown argument '$1'" ;;
    esac
done

# Checked before anything is written; they also keep the sed substitutions below literal.
[[ -n "$scheduler" ]] || { usage >&2; fail "--scheduler is required"; }
[[ -n "$device" ]] || { usage >&2; fail "--device is required"; }
[[ "$scheduler" =~ ^(tcp|tls)://[][A-Za-z0-9.:_-]+$ ]] ||
    fail "--scheduler must look like tcp://HOST:PORT, got '$scheduler'"
[[ "$device" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || fail "--device must be a name like pi3b-0, got '$device'"
[[ "$tier" =~ ^[A-Za-z0-9][A-Za-z0-9._-]*$ ]] || fail "--tier must be a name like edge, got '$tier'"
[[ "$user" =~ ^[a-z_][a-z0-9_-]*$ ]] || fail "--user must be a user name, got '$user'"
[[ "$venv" =~ ^/[A-Za-z0-9._/-]+$ ]] || fail "--venv must be an absolute path, got '$venv'"

render_unit() {
    sed -e "s|^User=.*|User=$user|" \
        -e "s|^Environment=SCHEDULER=.*|Environment=SCHEDULER=$scheduler|" \
        -e "s|^Environment=DEVICE=.*|Environment=DEVICE=$device|" \
        -e "s|^Environment=TIER=.*|Environment=TIER=$tier|" \
        -e "s|/opt/edgelab/venv/|$venv/|g" \
        "$here/$unit_name"
}

if $print_unit; then
    render_unit
    exit 0
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

render_unit >"/etc/systemd/system/$unit_name"
systemctl daemon-reload
systemctl enable "$unit_name"
# restart, not start: a second run picks up the new unit and venv.
systemctl restart "$unit_name"
echo "install-worker.sh: $device joins $scheduler; follow it with: journalctl -u $unit_name -f"
