#!/usr/bin/env bash
# Builds a PostgreSQL server with symbols for run.sh's PROFILE, and prints
# its bindir: run.sh PGBIN=$(bench/instructions/postgres-symbols.sh) then
# names every function of a round's profile, PL/pgSQL's and PostgreSQL's
# static ones among them (a packaged server has them stripped: its profile
# shows addresses for most of the executor and all of PL/pgSQL). The build
# is the packaged one's version (pg_config --version, or VERSION=15.18)
# with -O2 -g, as packages build it, so that its counts are close to a
# packaged server's (compare binaries with one PGBIN either way).
#
# usage: bench/instructions/postgres-symbols.sh
# env:   VERSION  the PostgreSQL version to build (default: pg_config's)
#        DEST     where builds are kept (default ~/.cache/sluice-pg-symbols):
#                 DEST/VERSION, built once, reused
#        SRC_URL  the source tarball (default: the PostgreSQL project's, then
#                 Debian's archive of the version's orig tarball)
# Needs a C compiler, make, bison and flex, readline and zlib headers.
set -euo pipefail

VERSION=${VERSION:-$(pg_config --version 2>/dev/null | awk '{print $2}')}
[ -n "$VERSION" ] || { echo "postgres-symbols.sh: set VERSION (no pg_config)" >&2; exit 2; }
DEST=${DEST:-$HOME/.cache/sluice-pg-symbols}
prefix=$DEST/$VERSION
if [ -x "$prefix/bin/postgres" ]; then
	echo "$prefix/bin"
	exit 0
fi
major=${VERSION%%.*}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
tarball=$work/postgresql-$VERSION.tar.bz2
for url in ${SRC_URL:-} "https://ftp.postgresql.org/pub/source/v$VERSION/postgresql-$VERSION.tar.bz2" \
	"http://deb.debian.org/debian/pool/main/p/postgresql-$major/postgresql-${major}_$VERSION.orig.tar.bz2"; do
	if curl -fsSL --max-time 300 -o "$tarball" "$url"; then
		break
	fi
	rm -f "$tarball"
done
[ -f "$tarball" ] || { echo "postgres-symbols.sh: could not fetch PostgreSQL $VERSION's source" >&2; exit 1; }
tar -xjf "$tarball" -C "$work"
cd "$work/postgresql-$VERSION"
# (logs to stderr only on failure: stdout is the bindir)
log=$work/build.log
if ! { ./configure --prefix="$prefix" --without-icu CFLAGS="-O2 -g -fno-omit-frame-pointer" &&
	make -j"$(nproc)" && make install; } > "$log" 2>&1; then
	tail -30 "$log" >&2
	echo "postgres-symbols.sh: the build failed (above)" >&2
	exit 1
fi
echo "$prefix/bin"
