# Shared by tools/check.sh and tools/demo.sh: the Debian packages the project needs, installed
# only when missing, and the environment MPI runs need here.

SKT_PACKAGES=(
  g++ gfortran meson ninja-build pkg-config python3
  libopenmpi-dev openmpi-bin
  libisal-dev libopenblas-dev libscalapack-openmpi-dev
  libgtest-dev libgmock-dev
  libcli11-dev libtomlplusplus-dev libfmt-dev libspdlog-dev nettle-dev help2man
  pybind11-dev python3-numpy python3-mpi4py
)

skt_say() { printf '\033[1m==> %s\033[0m\n' "$*"; }

# Root's tools live in the sbin directories (slurmctld, slurmd and munged for tools/cluster,
# useradd and runuser for the tests), which a PATH made for an ordinary user lacks (env -i with
# PATH=/usr/bin:/bin, cron, some containers): e2e-slurm then failed with "slurmctld: command not
# found". Appended, so that nothing the caller chose is shadowed.
for skt_sbin in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in
    *":$skt_sbin:"*) ;;
    *) PATH=$PATH:$skt_sbin ;;
  esac
done
unset skt_sbin
export PATH

# Installs whichever of SKT_PACKAGES (and any extra names given) are missing, saying which.
skt_ensure_packages() {
  local missing=() pkg
  for pkg in "${SKT_PACKAGES[@]}" "$@"; do
    if ! dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$pkg")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    skt_say "all ${#SKT_PACKAGES[@]} required Debian packages are installed"
    return 0
  fi
  local sudo=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo=(sudo)
    else
      echo "missing packages: ${missing[*]}; install them as root (apt-get install ${missing[*]})" >&2
      return 1
    fi
  fi
  skt_say "installing ${#missing[@]} missing Debian package(s): ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  "${sudo[@]}" apt-get update -qq
  "${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# Open MPI refuses to run as root without these. The runs stay on this host, where PMIx's native
# security is enough (a stale munge socket delays each launch). Nothing here oversubscribes: a
# command that runs more ranks than cores says so (mpirun --oversubscribe; skt-run does it for
# virtual nodes by itself).
skt_mpi_environment() {
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  export PMIX_MCA_psec=${PMIX_MCA_psec:-native}
  export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
}

# A build and the suite need a few GiB. Shared memory left by killed jobs stays until removed and
# counts as used memory; say so before a compile is starved of it.
skt_check_free_memory() {
  local available_kib
  available_kib=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
  if [ "$available_kib" -lt $((4 * 1024 * 1024)) ]; then
    skt_say "only $((available_kib / 1024)) MiB of memory available; SysV shared memory in use:" \
      "$(ipcs -m | awk 'NR > 3 {n++; b += $5} END {printf "%d segments, %.1f GiB", n, b / 2^30}')" \
      "(see skt-shm list; remove stale ones with skt-shm clean --job TAG)"
  fi
}

skt_build() {
  local source=$1 build=$2
  if [ ! -f "$build/build.ninja" ]; then
    meson setup "$build" "$source" --buildtype=release
  fi
  meson compile -C "$build"
}
