#!/usr/bin/env bash
# Installs what Kiln's build needs from Debian's packages, only what is missing.
set -euo pipefail
packages=(cmake ninja-build g++ python3 llvm-22-dev llvm-22-tools libmlir-22-dev mlir-22-tools
          googletest libgtest-dev)
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
