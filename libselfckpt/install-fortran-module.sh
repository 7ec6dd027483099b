#!/bin/sh
# meson install: the compiled module file (selfckpt.mod) from the library's private build
# directory to its place under the prefix (Meson installs no .mod by itself).
set -eu
from=$1 to=$2
case $to in /*) ;; *) to=$MESON_INSTALL_PREFIX/$to ;; esac
dest=${DESTDIR:+$DESTDIR/}$to
mkdir -p "$dest"
cp "$from/selfckpt.mod" "$dest/"
