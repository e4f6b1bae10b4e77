#!/usr/bin/env bash
# Sets up everything jupyter-sandbox needs on a fresh Debian machine (as root); safe to re-run.
#   - Debian packages: docker.io (engine), runsc (gVisor, the "gvisor" isolation level),
#     podman, uidmap, slirp4netns, fuse-overlayfs (rootless Podman, the other engine),
#     debootstrap (base image without a registry), iproute2 (the allow-list tests' namespaces),
#     chromium (browser tests, only with --browser), nodejs + npm when missing (the
#     JupyterLab extension is built from labextension/).
#   - runsc registered with the engine as the runtime "runsc" (merged into daemon.json)
#   - a running Docker engine (reuses one that answers; otherwise starts dockerd)
#   - .venv from the lock requirements/dev.txt (hashes), the project installed editable
#   - the local Python base image (built once per machine, then cached by Docker), and the
#     allow-list proxy's image on it (Debian's squid, installed by apt inside the build)
# Sourced or run by scripts/demo.sh and scripts/test.sh.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WANT_BROWSER=0
for arg in "$@"; do [ "$arg" = "--browser" ] && WANT_BROWSER=1; done

log() { printf '\033[1m[bootstrap]\033[0m %s\n' "$*" >&2; }

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v runsc >/dev/null 2>&1 || missing+=(runsc)
command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
# Rootless Podman: the engine for users outside the docker group (the tests' `podman` variant
# runs the container-side tests on it as a non-root user).
command -v podman >/dev/null 2>&1 || missing+=(podman uidmap slirp4netns fuse-overlayfs)
command -v npm >/dev/null 2>&1 || missing+=(nodejs npm)
# the tests' podman fixture stops a service a killed run left (pkill/pgrep)
command -v pkill >/dev/null 2>&1 || missing+=(procps)
# tests/sandbox/test_allowlist.py puts its servers in network namespaces of their own (`ip netns`)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# tests/e2e/test_install.py gives a non-root user a venv of Debian's Python (root's may be private).
/usr/bin/python3 -c 'import ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [ "$WANT_BROWSER" = 1 ] && ! command -v chromium >/dev/null 2>&1; then missing+=(chromium); fi
if [ ${#missing[@]} -gt 0 ]; then
  log "installing Debian packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# gVisor (isolation="gvisor"): runsc merged into daemon.json as the engine's runtime "runsc",
# every other setting kept; a running dockerd is reloaded below.
DAEMON_JSON=/etc/docker/daemon.json
/usr/bin/python3 scripts/register_runsc.py "$DAEMON_JSON" "$(command -v runsc)" >/dev/null

if ! docker info >/dev/null 2>&1; then
  log "starting dockerd (log: /var/log/jupyter-sandbox-dockerd.log)"
  nohup setsid dockerd >/var/log/jupyter-sandbox-dockerd.log 2>&1 </dev/null &
  for _ in $(seq 1 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null 2>&1 || { log "dockerd did not come up; see /var/log/jupyter-sandbox-dockerd.log"; exit 1; }
fi
has_runsc() { [[ "$(docker info --format '{{json .Runtimes}}' 2>/dev/null)" == *'"runsc"'* ]]; }
if ! has_runsc; then
  # SIGHUP makes a running dockerd re-read daemon.json (runtimes included); containers keep running.
  log "registering runsc with the running engine (reloading dockerd's configuration)"
  kill -HUP "$(cat /var/run/docker.pid 2>/dev/null || pidof -s dockerd)"
  for _ in $(seq 1 20); do has_runsc && break; sleep 0.5; done
  has_runsc || { log "the engine does not list the runsc runtime: see $DAEMON_JSON and dockerd's log"; exit 1; }
fi

if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  python3 -m venv .venv
fi
log "installing the locked development environment (requirements/dev.txt) into .venv"
# pip warns once per package about this machine's (empty) local find-links folders: drop only
# that line so real warnings stay visible.
quiet_pip() { .venv/bin/pip "$@" 2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2); }
# Exact versions with hashes: a fresh machine gets what CI tested, next month too
# (bash scripts/lock.sh refreshes the lock; .ci/run fails when it is stale).
quiet_pip install -q --require-hashes --no-deps -r requirements/dev.txt
# The project itself, editable, built by the locked backend just installed (no isolated build
# environment that would fetch whatever is newest); its npm script runs .venv's jupyter-builder.
PATH="$ROOT/.venv/bin:$PATH" quiet_pip install -q --no-deps --no-build-isolation -e .
.venv/bin/pip check >/dev/null || { .venv/bin/pip check >&2; log "the lock does not satisfy pyproject.toml: bash scripts/lock.sh"; exit 1; }

# The JupyterLab extension: `pip install -e` above rebuilds it from labextension/ into
# jupyter_sandbox/labextension on every run (hatch-jupyter-builder; npm install + tsc + rspack),
# but editable installs do not install shared data: link the build where JupyterLab looks
# (what `jupyter labextension develop` does), so tests run the extension from these sources.
mkdir -p .venv/share/jupyter/labextensions
# A real folder there (left by a wheel install) would get the link put inside it: replace it.
link=.venv/share/jupyter/labextensions/jupyter-sandbox
[ -L "$link" ] || rm -rf "$link"
ln -sfn "$ROOT/jupyter_sandbox/labextension" "$link"

log "making sure the base image exists"
.venv/bin/python -m jupyter_sandbox base-image
# Allow-listed networks (network=[hosts]) run behind Debian's squid, in an image built on the
# base (apt inside the build); built here so the first allow-listed run does not wait for it.
log "making sure the allow-list proxy image (squid) exists"
.venv/bin/python -c 'from jupyter_sandbox.sandbox import _client, _egress
print(_egress.proxy_image(_client.client(), lambda event: None))' >/dev/null
# Secrets the proxy adds (create(secrets=[Secret(..., hosts=[...])])) intercept TLS to their
# hosts: Squid with OpenSSL (squid-openssl), an image of its own.
log "making sure the intercepting proxy image (squid-openssl) exists"
.venv/bin/python -c 'from jupyter_sandbox.sandbox import _client, _egress, _inject
print(_egress.proxy_image(_client.client(), lambda event: None, _inject.TLS_PACKAGES))' >/dev/null
