#!/usr/bin/env bash
# Build farmem's Debian package from this tree: target/farmem_VERSION_ARCH.deb.
#   /usr/bin/farmem                        the command
#   /usr/lib/ARCH/libfarmem.so             the C API (-lfarmem)
#   /usr/include/farmem.h                  its header
#   /usr/lib/ARCH/pkgconfig/farmem.pc      pkg-config --cflags --libs farmem
#   /usr/lib/farmem/libfarmem_preload.so   the shim `farmem run` preloads
#   /usr/lib/farmem/workloads/             the built-in workloads of `farmem bench`
#   /lib/systemd/system/farmem-serve.service  (not enabled: it needs a secret first)
#   /usr/share/farmem/slurm/               the one-node cluster script and the batch recipe
#   /usr/share/farmem/containers/          the seccomp profile tool (README, "In a container")
#   /usr/share/doc/farmem/                 README, docs/, copyright
# dpkg-deb only; no packaging tool beyond Debian's own.
# usage: scripts/package-deb.sh [--no-build]   (prints the package's path)
#   --no-build: package what target/release holds (its test does: cargo's
#   build lock is held while tests run).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --no-build ]; then
    [ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"
    cargo build --release --workspace --quiet
    make -C workloads >/dev/null
fi
version=$(sed -nE 's/^version = "([^"]+)"/\1/p' Cargo.toml | head -1)
arch=$(dpkg --print-architecture)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch)
T=target/release
root=target/deb/farmem_${version}_$arch
rm -rf "$root"
install -D -m 755 "$T/farmem" "$root/usr/bin/farmem"
install -D -m 644 "$T/libfarmem.so" "$root/usr/lib/$multiarch/libfarmem.so"
install -D -m 644 include/farmem.h "$root/usr/include/farmem.h"
install -D -m 644 "$T/libfarmem_preload.so" "$root/usr/lib/farmem/libfarmem_preload.so"
for w in "$T"/workloads/*; do
    [ -f "$w" ] && [ -x "$w" ] && install -D -m 755 "$w" "$root/usr/lib/farmem/workloads/$(basename "$w")"
done
mkdir -p "$root/usr/lib/$multiarch/pkgconfig"
cat > "$root/usr/lib/$multiarch/pkgconfig/farmem.pc" <<PC
prefix=/usr
includedir=\${prefix}/include
libdir=\${prefix}/lib/$multiarch

Name: farmem
Description: far memory for unmodified programs: fm_alloc, fm_free, fm_advise, fm_stats
Version: $version
Cflags: -I\${includedir}
Libs: -L\${libdir} -lfarmem
PC
sed 's|/usr/local/bin/farmem|/usr/bin/farmem|g; s|/usr/local/share/doc/farmem|/usr/share/doc/farmem|g' \
    contrib/systemd/farmem-serve.service > farmem-serve.service.tmp
install -D -m 644 farmem-serve.service.tmp "$root/lib/systemd/system/farmem-serve.service"
rm farmem-serve.service.tmp
install -D -m 755 contrib/slurm/one-node.sh "$root/usr/share/farmem/slurm/one-node.sh"
install -D -m 644 contrib/slurm/far-memory.sbatch "$root/usr/share/farmem/slurm/far-memory.sbatch"
install -D -m 755 contrib/containers/seccomp-allow-farmem "$root/usr/share/farmem/containers/seccomp-allow-farmem"
install -D -m 644 README.md "$root/usr/share/doc/farmem/README.md"
mkdir -p "$root/usr/share/doc/farmem/docs"
cp -r docs/. "$root/usr/share/doc/farmem/docs/"
find "$root/usr/share/doc/farmem" -type d -exec chmod 755 {} + -o -type f -exec chmod 644 {} +
cat > "$root/usr/share/doc/farmem/copyright" <<COPY
Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: farmem
License: $(sed -nE 's/^license = "([^"]+)"/\1/p' Cargo.toml | head -1)
COPY
mkdir -p "$root/DEBIAN"
size=$(du -sk "$root" | cut -f1)
cat > "$root/DEBIAN/control" <<CONTROL
Package: farmem
Version: $version
Architecture: $arch
Maintainer: farmem developers <farmem-dev@invalid>
Installed-Size: $size
Depends: libc6 (>= 2.36), libgcc-s1
Recommends: libucx0
Suggests: slurmd, slurmctld, slurm-client, munge
Section: admin
Priority: optional
Description: far memory for unmodified programs, and a measure of every tier
 farmem runs an unmodified program (C, C++, Fortran, OpenMP, Python/NumPy,
 the JVM) with its large allocations in far memory: pages live on memory
 servers on other machines (farmem serve) or in a file, are fetched on
 demand, prefetched and evicted within a local-memory budget. No kernel
 module, no root. It also measures every memory tier: latency, bandwidth,
 fault cost, NUMA placement and the far tiers.
CONTROL
# The library is in the linker's path: refresh its cache after install.
echo "activate-noawait ldconfig" > "$root/DEBIAN/triggers"
dpkg-deb --build --root-owner-group "$root" "target/farmem_${version}_$arch.deb" >/dev/null
echo "target/farmem_${version}_$arch.deb"
