#!/usr/bin/env bash
# Installs what edge0 needs to build, test and fuzz, if anything is missing:
# Debian packages (apt), and the official `openai` and `@anthropic-ai/sdk` npm
# clients and the `ajv` JSON schema validator (the oracle of the
# structured-output tests) at pinned versions into a cache outside the
# repository ($EDGE0_NPM, default
# ~/.cache/edge0-npm) for tests/node. Safe to run repeatedly: it asks apt and
# npm only when something is absent.
set -eu
pkgs="gcc make pkg-config wamerican libcjson-dev libpcre2-dev libutf8proc-dev libcmocka-dev
      libmicrohttpd-dev libedit-dev liburing-dev clang libclang-rt-14-dev curl tmux"
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

# openai 4.x: the last major that runs on Debian 12's Node 18 (5 and later want newer Node);
# @anthropic-ai/sdk 0.39: among the last that support Node 18 (its README), with
# thinking blocks and the stream helper's thinking_delta / signature_delta
npm_dir=${EDGE0_NPM:-$HOME/.cache/edge0-npm}
# ajv: validates the structured outputs of tests/node/openai_constrained.cjs
for want in openai@4.95.0 @anthropic-ai/sdk@0.39.0 ajv@8.17.1 ajv-formats@3.0.1; do
    name=${want%@*}
    version=${want##*@}
    have=$(node -p "try { require('$npm_dir/node_modules/$name/package.json').version } catch (e) { '' }" 2>/dev/null || true)
    if [ "$have" != "$version" ]; then
        echo "edge0: installing $want (npm) into $npm_dir"
        mkdir -p "$npm_dir"
        npm install --prefix "$npm_dir" --no-audit --no-fund --loglevel=error "$want" >/dev/null
    fi
done
