#!/usr/bin/env bash
# Installs what Kiln's build needs from Debian's packages, only what is missing.
# --sanitizers adds clang-22 and its sanitizer/libFuzzer runtimes (scripts/sanitize.sh,
# scripts/fuzz.sh).
set -euo pipefail
packages=(cmake ninja-build g++ python3 llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
          googletest libgtest-dev)
if [[ ${1:-} == --sanitizers ]]; then
  packages+=(clang-22 libclang-rt-22-dev)
fi
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if ((${#missing[@]})); then
  echo "kiln: installing ${missing[*]}"
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y "${missing[@]}"
fi
# ccache speeds up rebuilds; optional.
if ! command -v ccache >/dev/null; then
  SUDO=""; [[ $(id -u) -ne 0 ]] && SUDO=sudo
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y ccache >/dev/null 2>&1 || true
fi
