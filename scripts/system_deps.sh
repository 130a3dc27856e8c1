#!/usr/bin/env bash
# The Debian packages `make serve` and `make test` need: checked on every run (a few
# milliseconds), installed when running as root with apt-get, otherwise one message that names
# the exact command to run, and exit 1 before anything else happens.
#
#   scripts/system_deps.sh serve|test
#
# serve: python3-venv (the venv), ffmpeg (PyAV decoding of MP3/M4A/WebM), libsndfile1
#        (soundfile), espeak-ng (the demo's speech).
# test:  the above and sox, chromium + chromium-driver (the page tests drive Debian's chromium),
#        fonts-dejavu-core (text in the browser screenshots), postgresql (the cluster tests start
#        a throwaway server from /usr/lib/postgresql/*/bin), make, gcc (the ONNX tests compile a
#        tiny custom-op library).
#
# Environment: PYTHON (python3) is the interpreter the venv will use; SYSTEM_DEPS_CHECK_ONLY=1
# never installs, even as root (the check CI-style images and tests use to see the refusal).
set -euo pipefail

SERVE_PACKAGES=(python3-venv ffmpeg libsndfile1 espeak-ng)
TEST_PACKAGES=("${SERVE_PACKAGES[@]}" sox chromium chromium-driver fonts-dejavu-core postgresql make gcc)
PYTHON=${PYTHON:-python3}

case "${1:-}" in
  serve) packages=("${SERVE_PACKAGES[@]}"); target="make serve" ;;
  test) packages=("${TEST_PACKAGES[@]}"); target="make test" ;;
  *) echo "usage: $0 serve|test" >&2; exit 2 ;;
esac

# Python first: apt cannot give an older Debian a newer python3, so that is its own message.
# One interpreter start answers both questions (version, and whether it can make a venv).
py_info=$("$PYTHON" -c '
import sys
try:
    import ensurepip, venv
    can_venv = "venv"
except ImportError:
    can_venv = "no-venv"
print("%d.%d" % sys.version_info[:2], int(sys.version_info >= (3, 11)), can_venv)' 2>/dev/null) || py_info=""
read -r py_version py_new_enough py_venv <<<"${py_info:-none 0 no-venv}"
if [ "$py_new_enough" != 1 ]; then
  echo "Recall needs Python 3.11 or newer as '$PYTHON' (Debian 12 has it: apt-get install python3)." >&2
  echo "Point make at another interpreter with: $target PYTHON=/path/to/python3.11" >&2
  exit 1
fi
if [ "$py_version" != 3.11 ]; then
  echo "note: requirements.lock was made on Python 3.11; this is Python $py_version, which may need other versions." >&2
fi

# Is one package there? dpkg's word where there is a dpkg, else what the package provides.
# python3-venv is always checked by use: a Python not from Debian (pyenv, python:3.11-slim)
# makes venvs without it, and Debian's own python3 cannot make one until it is installed.
# make too: one built elsewhere is as good.
installed() {
  local package=$1
  if [ "$package" = python3-venv ]; then
    [ "$py_venv" = venv ]
    return
  fi
  if [ "$package" = make ]; then  # any make will do (.ci/run calls this before make exists)
    command -v make >/dev/null
    return
  fi
  if [ -n "$dpkg_installed" ]; then
    [[ " $dpkg_installed " == *" $package "* ]]
    return
  fi
  case $package in
    libsndfile1) /sbin/ldconfig -p 2>/dev/null | grep -q 'libsndfile\.so\.1' ;;
    chromium) command -v chromium >/dev/null || command -v chromium-browser >/dev/null ;;
    chromium-driver) command -v chromedriver >/dev/null ;;
    fonts-dejavu-core) [ -e /usr/share/fonts/truetype/dejavu/DejaVuSans.ttf ] ;;
    postgresql) compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || command -v initdb >/dev/null ;;
    *) command -v "$package" >/dev/null ;;
  esac
}

# one dpkg-query for all of them: the names of those installed, space-separated. dpkg-query
# exits 1 when a package was never known to dpkg (the usual case on a fresh machine), so its
# status must not end the script under pipefail: what it printed is the answer.
dpkg_installed=""
if command -v dpkg-query >/dev/null 2>&1; then
  dpkg_installed=" $( (dpkg-query -W -f='${db:Status-Status} ${Package}\n' "${packages[@]}" 2>/dev/null || true) \
    | awk '$1 == "installed" {printf "%s ", $2}')"
fi

missing=()
for package in "${packages[@]}"; do
  installed "$package" || missing+=("$package")
done
[ ${#missing[@]} -eq 0 ] && exit 0

list="${missing[*]}"
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1 && [ "${SYSTEM_DEPS_CHECK_ONLY:-0}" != 1 ]; then
  echo "Installing the missing Debian packages: $list" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  # shellcheck disable=SC2086  # one word per package
  apt-get install -y -q --no-install-recommends $list
  exit 0
fi

if command -v apt-get >/dev/null 2>&1; then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo "
  {
    echo
    echo "$target needs Debian packages that are not installed: $list"
    echo "Install them with this command, then run $target again:"
    echo
    echo "    ${sudo}apt-get update && ${sudo}apt-get install -y --no-install-recommends $list"
    echo
  } >&2
else
  {
    echo
    echo "$target needs these packages (Debian names; this system has no apt-get): $list"
    echo "Install their equivalents with your package manager, then run $target again."
    echo
  } >&2
fi
exit 1
