#!/bin/sh
# Entrypoint of an emulated device: hold what this container sends to a Pi 3B's
# Ethernet rate with a token bucket, then run the command as the user edgelab.
# Needs root and the NET_ADMIN capability (docker-compose.yml grants both to workers).
# Only the sending side is shaped: a transfer between two devices crosses one
# shaped link, as in edgelab.shaped_hosts' veth pairs.
set -eu

rate_mbit="${LINK_MBIT:-100}"
case "$rate_mbit" in
    '' | *[!0-9]*)
        echo "shape-link: LINK_MBIT must be a whole number of Mbit/s, got '$rate_mbit'" >&2
        exit 2
        ;;
esac
# A bucket of 1 ms at the rate, at least two full frames: as edgelab.shaped_hosts sizes it (12500 B at 100 Mbit/s).
burst=$((rate_mbit * 125))
if [ "$burst" -lt 3028 ]; then
    burst=3028
fi
# replace, not add: a restarted container may keep its network namespace and qdisc.
tc qdisc replace dev eth0 root tbf rate "${rate_mbit}mbit" burst "$burst" latency 50ms

export HOME=/home/edgelab
# Changing to a non-root uid drops every capability, NET_ADMIN included.
exec setpriv --reuid=edgelab --regid=edgelab --init-groups -- "$@"
