#!/usr/bin/env bash
# Installs what edge0 needs to build, test and fuzz, if anything is missing:
# Debian packages (apt), and the official `openai` npm client and the `ajv`
# JSON schema validator (the oracle of the structured-output tests) at
# pinned versions into a cache outside the repository ($EDGE0_NPM, default
# ~/.cache/edge0-npm) for tests/node. Safe to run repeatedly: it asks apt and
# npm only when something is absent.
set -eu
pkgs="gcc make pkg-config libcjson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libmicrohttpd-dev libedit-dev clang libclang-rt-14-dev curl tmux"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
# Node from anywhere (Debian's nodejs 18, or another build that brings npm along)
command -v node >/dev/null || missing="$missing nodejs"
command -v npm >/dev/null || missing="$missing npm"
if [ -n "$missing" ]; then
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
fi

# openai 4.x: the last major that runs on Debian 12's Node 18 (5 and later want newer Node)
OPENAI_VERSION=4.95.0
npm_dir=${EDGE0_NPM:-$HOME/.cache/edge0-npm}
have=$(node -p "try { require('$npm_dir/node_modules/openai/package.json').version } catch (e) { '' }" 2>/dev/null || true)
if [ "$have" != "$OPENAI_VERSION" ]; then
    echo "edge0: installing openai@$OPENAI_VERSION (npm) into $npm_dir"
    mkdir -p "$npm_dir"
    npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "openai@$OPENAI_VERSION" >/dev/null
fi

# ajv: validates the structured outputs of tests/node/openai_constrained.cjs
AJV_VERSION=8.17.1
have=$(node -p "try { require('$npm_dir/node_modules/ajv/package.json').version } catch (e) { '' }" 2>/dev/null || true)
if [ "$have" != "$AJV_VERSION" ]; then
    echo "edge0: installing ajv@$AJV_VERSION (npm) into $npm_dir"
    mkdir -p "$npm_dir"
    npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "ajv@$AJV_VERSION" >/dev/null
fi
