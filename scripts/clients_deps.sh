#!/usr/bin/env bash
# Installs what tests/clients needs, at pinned exact versions, into caches
# outside the repository, from the npm registry only:
#   - a Node runtime ($EDGE0_NODE, default ~/.cache/edge0-node): the current
#     clients want Node >= 22 and Debian 12 ships 18. The registry's
#     node-linux-<arch> package is the official Node build;
#   - the clients and the validators ($EDGE0_CLIENTS, default
#     ~/.cache/edge0-clients): openai, @anthropic-ai/sdk, @openai/codex,
#     @anthropic-ai/claude-code, @openai/agents, ai + @ai-sdk/openai-compatible +
#     zod, @langchain/openai + @langchain/core, ajv + ajv-formats.
# Idempotent: nothing is fetched when every pinned version is present.
# Prints the Node binary's path as its last line (tests/clients/run.sh uses it).
set -eu

node_version=24.21.0
pins="openai@7.60.0 @anthropic-ai/sdk@1.17.0 @openai/codex@0.171.0 @anthropic-ai/claude-code@2.1.332
      @openai/agents@0.20.0 ai@7.0.185 @ai-sdk/openai-compatible@3.0.97 zod@4.6.7
      @langchain/openai@1.6.0 @langchain/core@1.4.0 ajv@8.20.0 ajv-formats@3.0.1"

node_dir=${EDGE0_NODE:-$HOME/.cache/edge0-node}
clients_dir=${EDGE0_CLIENTS:-$HOME/.cache/edge0-clients}

die() { echo "edge0 clients_deps: $*" >&2; exit 1; }

command -v npm >/dev/null || die "npm is missing (scripts/deps.sh installs Debian's npm)"

case "$(uname -m)" in
    x86_64) arch=x64 ;;
    aarch64) arch=arm64 ;;
    *) die "no pinned Node build for $(uname -m)" ;;
esac

# npm install with a clear message when the registry cannot be reached.
npm_install() {
    local dir=$1
    shift
    mkdir -p "$dir"
    local log
    log=$(mktemp)
    if ! npm install --prefix "$dir" --no-audit --no-fund --loglevel=error --save-exact \
        --fetch-retries=2 --fetch-retry-mintimeout=2000 --fetch-retry-maxtimeout=10000 "$@" >"$log" 2>&1; then
        if grep -Eqi 'ENOTFOUND|ECONNREFUSED|ETIMEDOUT|EAI_AGAIN|ECONNRESET|network' "$log"; then
            echo "edge0 clients_deps: cannot reach the npm registry ($(npm config get registry)) to install $*:" >&2
            grep -E -m 3 'npm error (code|errno|FetchError|network)' "$log" >&2 || tail -n 5 "$log" >&2
        else
            echo "edge0 clients_deps: npm install $* into $dir failed:" >&2
            tail -n 20 "$log" >&2
        fi
        rm -f "$log"
        exit 1
    fi
    rm -f "$log"
}

# The installed version of package $2 under prefix $1, or nothing.
have_version() {
    local f="$1/node_modules/$2/package.json"
    [ -f "$f" ] && sed -n 's/^  "version": "\([^"]*\)".*/\1/p' "$f" | head -n 1
}

node_pkg=node-linux-$arch
node_bin=$node_dir/node_modules/$node_pkg/bin/node
if [ "$(have_version "$node_dir" "$node_pkg")" != "$node_version" ] || ! [ -x "$node_bin" ]; then
    echo "edge0: installing Node $node_version ($node_pkg, npm) into $node_dir" >&2
    npm_install "$node_dir" "$node_pkg@$node_version"
fi
[ "$("$node_bin" --version)" = "v$node_version" ] || die "$node_bin does not run as Node $node_version"

missing=""
for want in $pins; do
    name=${want%@*}
    [ "$(have_version "$clients_dir" "$name")" = "${want##*@}" ] || missing="$missing $want"
done
if [ -n "$missing" ]; then
    echo "edge0: installing (npm) into $clients_dir:$missing" >&2
    # The packages' install scripts (codex's and claude's native binaries) run
    # under the pinned Node.
    # shellcheck disable=SC2086
    PATH="$(dirname "$node_bin"):$PATH" npm_install "$clients_dir" $missing
    for want in $missing; do
        name=${want%@*}
        [ "$(have_version "$clients_dir" "$name")" = "${want##*@}" ] || die "$want did not install into $clients_dir"
    done
fi
echo "$node_bin"
