#!/bin/sh
# The project's layers: outside the library, code includes the public headers
# (libselfckpt/include) or the declared internal API (libselfckpt/internal), never the library's
# private sources (libselfckpt/src), which only the library and its white-box tests (tests/unit/lib,
# tests/mpi, tests/fuzz) include; and no module's build compiles another module's sources.
set -eu
root=${1:?usage: layering.sh SOURCE_ROOT}
cd "$root"
status=0
crossing=$(find bench daemon encoders examples hpl tools common tests/e2e tests/unit/enc \
  tests/unit/hpl tests/unit/run tests/unit/tools -type f \
  \( -name '*.cpp' -o -name '*.hpp' -o -name '*.c' -o -name '*.h' \) \
  -exec grep -Hn '#include "libselfckpt/src/' {} + 2>/dev/null || true)
if [ -n "$crossing" ]; then
  echo "these include the library's private headers (use libselfckpt/internal or the public API):"
  echo "$crossing"
  status=1
fi
foreign=$(find . -path ./libselfckpt -prune -o -name meson.build -print \
  | xargs grep -Hn "libselfckpt/src/[a-z_]*\.cpp" 2>/dev/null || true)
if [ -n "$foreign" ]; then
  echo "these builds compile the library's sources (link a library instead):"
  echo "$foreign"
  status=1
fi
[ "$status" -eq 0 ] && echo "layers: ok"
exit "$status"
