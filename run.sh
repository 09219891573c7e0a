#!/usr/bin/env bash
# Set up the edgelab environment if needed, then reproduce results or run the tests.
set -euo pipefail

usage() {
    cat <<'EOF'
Usage: ./run.sh reproduce [args...]   run `edgelab reproduce --profile smoke [args...]`
       ./run.sh test [pytest args...]  run the test suite
       ./run.sh lab [jupyter args...]  open JupyterLab on notebooks/ (loopback only), Dask dashboard panels included
       ./run.sh cluster up|down|status [--devices N --rate-mbit R]
                                      shaped hosts on this machine (root): a network namespace per device
       ./run.sh -h | --help            show this help

Environment:
  EDGELAB_VENV      virtualenv to create/use (default: .venv in the repo root)
  EDGELAB_DATA_DIR  offline datasets (default: ../shared/data when it exists)
  EDGELAB_TEST_WORKERS  processes the tests run on (default 2; 0: in the pytest process itself)
  EDGELAB_DEVICE_SCHEDULING  batch (default) or normal: how the embedded devices share the cores
  EDGELAB_INSTALLER  uv (default) or pip: what installs edgelab into a new virtualenv
  KERAS_HOME, TF_CPP_MIN_LOG_LEVEL, MPLBACKEND are given defaults when unset.
EOF
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$ROOT"
VENV="${EDGELAB_VENV:-.venv}"
STAMP="$VENV/.edgelab-pyproject.sha256"
# Made with a virtualenv this script makes (holding the making run's PID), removed once edgelab is first
# installed into it: found by a later run, the making was cut short (Ctrl-C in ensurepip leaves a python
# whose pip does not import), unless that run is still going.
UNFINISHED="$VENV/.edgelab-unfinished"

die() {
    echo "run.sh: $*" >&2
    exit 1
}

case "${EDGELAB_INSTALLER:-uv}" in
    uv | pip) ;;
    *) die "EDGELAB_INSTALLER=$EDGELAB_INSTALLER: allowed are uv (the default) and pip" ;;
esac

# Print the first interpreter that is Python 3.11 or newer.
find_python() {
    local candidate
    for candidate in python3.13 python3.12 python3.11 python3; do
        if command -v "$candidate" >/dev/null 2>&1 \
            && "$candidate" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
            echo "$candidate"
            return 0
        fi
    done
    return 1
}

# Install edgelab and its dependencies into $VENV, byte-compiled. uv resolves the versions pip does
# (docs/running.md: the one exception) and a new .venv takes 45-86 s where pip takes 192 (measured 2026-11-28);
# pip does it where uv cannot be had (no wheel for this machine, no index) or EDGELAB_INSTALLER=pip.
install_project() {
    local log
    if [[ "${EDGELAB_INSTALLER:-uv}" == uv ]]; then
        log="$(mktemp)"
        if "$VENV/bin/python" -m pip install --quiet uv >"$log" 2>&1; then
            rm -f "$log"
            echo "run.sh: installing edgelab into $VENV (uv pip install -e .)" >&2
            if "$VENV/bin/uv" pip install --quiet --compile-bytecode --python "$VENV/bin/python" -e .; then
                return
            fi
            echo "run.sh: uv could not install edgelab (above); trying pip" >&2
        else
            echo "run.sh: could not install uv (pip said: $(tail -n 1 "$log")); installing with pip" >&2
            rm -f "$log"
        fi
    fi
    echo "run.sh: installing edgelab into $VENV (pip install -e .)" >&2
    # pip byte-compiles on one core; compileall writes the same .pyc files on every core
    # (measured: 171 s for pip alone, 105 s + 43 s this way). A file that does not compile
    # is skipped, as pip skips it: the .pyc files are only a cache.
    "$VENV/bin/python" -m pip install --quiet --no-compile -e .
    local site=()
    mapfile -t site < <("$VENV/bin/python" -c \
        'import sysconfig; print(*sorted({sysconfig.get_path(p) for p in ("purelib", "platlib")}), sep="\n")')
    "$VENV/bin/python" -m compileall -qq -j 0 "${site[@]}" || true
}

ensure_venv() {
    local fresh=0 python digest
    if [[ -f "$UNFINISHED" ]]; then
        local maker
        maker="$(cat "$UNFINISHED")"
        if [[ -n "$maker" ]] && ps -p "$maker" -o args= 2>/dev/null | grep -q "run\.sh"; then
            die "another run.sh (pid $maker) is still setting up $VENV; run this again once it has finished"
        fi
        echo "run.sh: $VENV was left half made by an earlier run; making it again" >&2
        rm -rf "$VENV"
    fi
    if [[ ! -x "$VENV/bin/python" ]]; then
        python="$(find_python)" \
            || die "need Python >= 3.11, found: $(python3 --version 2>&1 || echo 'no python3')"
        echo "run.sh: creating virtualenv $VENV with $python" >&2
        # Only a folder made here is ever removed as half made: never one a user pointed EDGELAB_VENV at.
        if [[ ! -e "$VENV" ]]; then
            mkdir -p "$VENV"
            echo "$$" >"$UNFINISHED"
        fi
        "$python" -m venv "$VENV"
        fresh=1
    fi
    digest="$(sha256sum pyproject.toml | cut -d' ' -f1)"
    # Reinstall only when the venv is new or pyproject.toml changed since the last install.
    if [[ $fresh -eq 1 || ! -f "$STAMP" || "$(cat "$STAMP")" != "$digest" ]]; then
        install_project
        echo "$digest" >"$STAMP"
        rm -f "$UNFINISHED"
    fi
}

export_defaults() {
    if [[ -z "${EDGELAB_DATA_DIR:-}" && -d "$ROOT/../shared/data" ]]; then
        EDGELAB_DATA_DIR="$(cd "$ROOT/../shared/data" && pwd)"
        export EDGELAB_DATA_DIR
        echo "run.sh: EDGELAB_DATA_DIR=$EDGELAB_DATA_DIR" >&2
    fi
    export KERAS_HOME="${KERAS_HOME:-$ROOT/data/cache/keras}"
    export TF_CPP_MIN_LOG_LEVEL="${TF_CPP_MIN_LOG_LEVEL:-2}"
    export MPLBACKEND="${MPLBACKEND:-Agg}"
}

if [[ $# -eq 0 ]]; then
    usage >&2
    exit 2
fi
cmd="$1"
shift

case "$cmd" in
    -h | --help)
        usage
        ;;
    reproduce)
        ensure_venv
        export_defaults
        exec "$VENV/bin/python" -m edgelab.cli reproduce --profile smoke "$@"
        ;;
    lab)
        ensure_venv
        export_defaults
        # The project's kernel is this venv's; the server listens on loopback only.
        lab_args=(--notebook-dir="$ROOT/notebooks" --ServerApp.ip=127.0.0.1)
        # Jupyter refuses root unless told; a container or a fresh board often runs as root.
        [[ "$(id -u)" -eq 0 ]] && lab_args+=(--allow-root)
        exec "$VENV/bin/jupyter" lab "${lab_args[@]}" "$@"
        ;;
    cluster)
        # `sudo ./run.sh cluster up`: root makes namespaces and links, never a virtualenv or an install in one.
        if [[ "$(id -u)" -eq 0 ]]; then
            [[ -x "$VENV/bin/python" && -f "$STAMP" && "$(cat "$STAMP")" == "$(sha256sum pyproject.toml | cut -d' ' -f1)" ]] \
                || die "$VENV is missing or out of date; make it as your own user first (./run.sh test), then run this again: the cluster command never installs packages as root"
        else
            ensure_venv
        fi
        export_defaults
        exec "$VENV/bin/python" -m edgelab.cli cluster "$@"
        ;;
    test)
        ensure_venv
        export_defaults
        status=0
        # Two processes, each test module or notebook whole on one (pyproject.toml's --dist loadfile: its
        # cluster fixture, its kernel); EDGELAB_TEST_WORKERS=0 runs them in this process.
        "$VENV/bin/python" -m pytest -n "${EDGELAB_TEST_WORKERS:-2}" "$@" || status=$?
        # pytest exits 5 when it collected no tests; an empty run must not pass.
        if [[ $status -eq 5 ]]; then
            echo "run.sh: pytest collected no tests; treating this as a failure" >&2
            exit 1
        fi
        exit "$status"
        ;;
    *)
        echo "run.sh: unknown command '$cmd'" >&2
        usage >&2
        exit 2
        ;;
esac
