#!/bin/sh
# install.sh installs one Redis server, Debian's build, for the tests of
# global rate limiting (the reference rate-limit service keeps its counters
# in Redis).
#
#   install.sh VERSION OUTDIR   install OUTDIR/redis-VERSION/, or nothing
#                               when the one there reports VERSION
#
# VERSION is Redis' own version (7.0.15), not Debian's revision: the
# newest Debian package of that upstream version is taken, so a security
# revision (…~deb12u10 → u11) needs no change here.
#
# The packages are fetched with `apt-get download` (no system install, root
# not needed) and unpacked with `dpkg-deb -x`: redis-tools (whose
# redis-check-rdb binary is the server: redis-server is only a symlink to
# it) and the two libraries it links that a base system lacks, liblzf1 and
# libjemalloc2. The result:
#
#   OUTDIR/redis-VERSION/redis-server    sh wrapper: LD_LIBRARY_PATH=lib, exec
#   OUTDIR/redis-VERSION/redis-cli       likewise
#   OUTDIR/redis-VERSION/libexec/        the two binaries
#   OUTDIR/redis-VERSION/lib/            liblzf.so.1, libjemalloc.so.2
#
# The wrappers exec, so the process a test starts is redis-server itself
# (same pid; killing it stops Redis). It is assembled in a temporary
# directory, checked with `redis-server --version`, and only then moved into
# place: an interrupted or failed install leaves nothing half-installed.
#
# Run Redis on loopback with no persistence:
#   redis-server --bind 127.0.0.1 --port PORT --save '' --appendonly no
set -eu

die() { echo "install.sh: $*" >&2; exit 2; }

[ $# -eq 2 ] || die "usage: $0 VERSION OUTDIR"
VERSION=$1
OUTDIR=$2
case $VERSION in
[0-9]*.[0-9]*.[0-9]*) ;;
*) die "VERSION must be a Redis release such as 7.0.15, got '$VERSION'" ;;
esac
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
dir=$OUTDIR/redis-$VERSION

# reports BIN prints the version BIN says it is ("Redis server v=7.0.15 …").
reports() {
	"$1" --version 2>/dev/null | sed -n 's/^Redis server v=\([^ ]*\) .*/\1/p' | head -1
}

if [ -x "$dir/redis-server" ] && [ "$(reports "$dir/redis-server")" = "$VERSION" ]; then
	exit 0
fi
for c in apt-get apt-cache dpkg-deb; do
	command -v $c >/dev/null 2>&1 || die "$c not found: Redis is installed from Debian's packages"
done

# debversion prints the newest Debian version of redis-tools whose upstream
# part is VERSION ([epoch:]VERSION-revision), or nothing.
debversion() {
	apt-cache madison redis-tools 2>/dev/null | awk -F'|' '{gsub(/ /, "", $2); print $2}' |
		grep -E "^([0-9]+:)?$(echo "$VERSION" | sed 's/\./\\./g')-" | head -1
}
deb=$(debversion)
if [ -z "$deb" ]; then
	# No package lists yet (a fresh machine) or old ones: refresh them once.
	if [ "$(id -u)" = 0 ]; then
		echo "install.sh: no redis-tools $VERSION in apt's lists; running apt-get update" >&2
		apt-get update -qq >/dev/null 2>&1 || die "apt-get update failed"
		deb=$(debversion)
	fi
fi
[ -n "$deb" ] || die "apt knows no redis-tools package of Redis $VERSION (apt-cache madison redis-tools: $(apt-cache madison redis-tools 2>/dev/null | awk -F'|' '{print $2}' | tr -d ' ' | tr '\n' ' '); not root, or apt-get update did not help)"

tmp=$(mktemp -d "$OUTDIR/.redis-$VERSION.XXXXXX")
trap 'rm -rf "$tmp"' EXIT INT TERM
echo "installing Redis $VERSION (Debian redis-tools $deb) into $dir" >&2
mkdir "$tmp/debs" "$tmp/root" "$tmp/out" "$tmp/out/libexec" "$tmp/out/lib"
# apt's download sandbox user (_apt) cannot write into a root-only temporary
# directory; as root, download as root (as apt itself falls back to, with a
# warning).
sandbox=
[ "$(id -u)" = 0 ] && sandbox="-o APT::Sandbox::User=root"
(cd "$tmp/debs" && apt-get -qq $sandbox download "redis-tools=$deb" liblzf1 libjemalloc2) ||
	die "apt-get download redis-tools=$deb liblzf1 libjemalloc2 failed (see its message above)"
for f in "$tmp"/debs/*.deb; do
	dpkg-deb -x "$f" "$tmp/root" || die "dpkg-deb -x $f failed"
done
[ -f "$tmp/root/usr/bin/redis-check-rdb" ] || die "redis-tools $deb has no usr/bin/redis-check-rdb"
# Redis runs as the server unless argv[0] names redis-check-rdb/-aof.
cp "$tmp/root/usr/bin/redis-check-rdb" "$tmp/out/libexec/redis-server"
cp "$tmp/root/usr/bin/redis-cli" "$tmp/out/libexec/redis-cli"
cp -P "$tmp"/root/usr/lib/x86_64-linux-gnu/liblzf.so* "$tmp"/root/usr/lib/x86_64-linux-gnu/libjemalloc.so* "$tmp/out/lib/" 2>/dev/null ||
	cp -P "$tmp"/root/usr/lib/*/liblzf.so* "$tmp"/root/usr/lib/*/libjemalloc.so* "$tmp/out/lib/" ||
	die "liblzf1/libjemalloc2 have no shared library where expected"
for b in redis-server redis-cli; do
	cat >"$tmp/out/$b" <<WRAP
#!/bin/sh
# $b $VERSION from Debian's redis-tools $deb, with its libraries beside it.
d=\$(dirname "\$0")
LD_LIBRARY_PATH=\$d/lib\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH} exec "\$d/libexec/$b" "\$@"
WRAP
	chmod 0755 "$tmp/out/$b" "$tmp/out/libexec/$b"
done
got=$(reports "$tmp/out/redis-server")
[ "$got" = "$VERSION" ] || die "redis-server from redis-tools $deb reports version '$got', expected $VERSION: $("$tmp/out/redis-server" --version 2>&1 | head -3)"
rm -rf "$dir"
mv "$tmp/out" "$dir"
echo "installed $dir/redis-server" >&2
