#!/usr/bin/env bash
# Installs the Debian packages tlaunch needs to build and test, only those not installed yet.
set -euo pipefail

packages=(
  g++ clang cmake ninja-build meson pkg-config
  libasio-dev libcereal-dev libssh-dev libssl-dev libfmt-dev doctest-dev
  openssh-server openssh-client procps python3 python3-yaml
  iproute2 nftables
  slurm-wlm munge tmux
  prometheus chromium
)

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: not root and no sudo; install these packages: ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi
apt_get=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=300)
"${apt_get[@]}" update
"${apt_get[@]}" install -y --no-install-recommends "${missing[@]}"
