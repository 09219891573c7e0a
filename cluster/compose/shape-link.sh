#!/bin/sh
# Entrypoint of an emulated device: hold what this container sends to a Pi 3B's
# Ethernet rate with a token bucket (and, when LINK_DELAY_MS or LINK_LOSS_PCT is
# set, delay and drop it with netem above the bucket), then run the command as
# the user edgelab.
# Needs root and the NET_ADMIN capability (docker-compose.yml grants both to workers).
# Only the sending side is shaped: a transfer between two devices crosses one
# shaped link, as in edgelab.cluster.shaped_hosts' veth pairs.
set -eu

rate_mbit="${LINK_MBIT:-100}"
delay_ms="${LINK_DELAY_MS:-0}"
loss_pct="${LINK_LOSS_PCT:-0}"
for setting in "LINK_MBIT=$rate_mbit" "LINK_DELAY_MS=$delay_ms" "LINK_LOSS_PCT=$loss_pct"; do
    case "${setting#*=}" in
        '' | *[!0-9]*)
            echo "shape-link: ${setting%%=*} must be a whole number, got '${setting#*=}'" >&2
            exit 2
            ;;
    esac
done
if [ "$loss_pct" -ge 100 ]; then
    echo "shape-link: LINK_LOSS_PCT must be below 100, got '$loss_pct'" >&2
    exit 2
fi
# A bucket of 1 ms at the rate, at least two full frames: as edgelab.cluster.shaped_hosts sizes it (12500 B at 100 Mbit/s).
burst=$((rate_mbit * 125))
if [ "$burst" -lt 3028 ]; then
    burst=3028
fi
# replace, not add: a restarted container may keep its network namespace and qdisc.
if [ "$delay_ms" -gt 0 ] || [ "$loss_pct" -gt 0 ]; then
    # netem first, the bucket under it: as edgelab.cluster.shaped_hosts does where the kernel has netem.
    tc qdisc replace dev eth0 root handle 1: netem delay "${delay_ms}ms" loss "${loss_pct}%"
    tc qdisc replace dev eth0 parent 1:1 handle 10: tbf rate "${rate_mbit}mbit" burst "$burst" latency 50ms
else
    tc qdisc replace dev eth0 root tbf rate "${rate_mbit}mbit" burst "$burst" latency 50ms
fi

export HOME=/home/edgelab
# Changing to a non-root uid drops every capability, NET_ADMIN included.
exec setpriv --reuid=edgelab --regid=edgelab --init-groups -- "$@"
