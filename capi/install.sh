#!/bin/sh
# install.sh PREFIX: build goshmem's C library and install it under PREFIX:
# lib/libgoshmem.so and lib/libgoshmem.a, include/shmem.h, shmemx.h and pshmem.h,
# bin/goshcc and bin/goshc++, bin/goshmem-run. Needs cgo (a C compiler).
# With --shared-only, the static library is not built.
set -e
shared_only=
[ "$1" = --shared-only ] && { shared_only=1; shift; }
[ $# -eq 1 ] || { echo "usage: $0 [--shared-only] PREFIX" >&2; exit 2; }
prefix=$1
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$prefix/lib" "$prefix/include" "$prefix/bin"
prefix=$(cd "$prefix" && pwd)
cd "$here"
CGO_ENABLED=1 go build -buildmode=c-shared -tags goshmem_capi -o "$prefix/lib/libgoshmem.so" .
rm -f "$prefix/lib/libgoshmem.h"
if [ -z "$shared_only" ]; then
	CGO_ENABLED=1 go build -buildmode=c-archive -tags goshmem_capi -o "$prefix/lib/libgoshmem.a" .
	rm -f "$prefix/lib/libgoshmem.h"
fi
cp include/shmem.h include/shmemx.h include/pshmem.h "$prefix/include/"
cp goshcc "$prefix/bin/goshcc"
cp goshcc "$prefix/bin/goshc++"
go build -o "$prefix/bin/goshmem-run" ../launcher/cmd/goshmem-run
