#!/usr/bin/env bash
# Installs the Debian packages edge0 needs to build, test and fuzz, if any are missing.
# Safe to run repeatedly: it asks apt only when something is absent.
set -eu
pkgs="gcc make pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libmicrohttpd-dev libedit-dev clang libclang-rt-14-dev curl tmux"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
echo "edge0: installing missing Debian packages:$missing"
sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || { echo "edge0: need root or sudo to install:$missing" >&2; exit 1; }
    sudo=sudo
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# shellcheck disable=SC2086
$sudo apt-get install -y -qq --no-install-recommends $missing
