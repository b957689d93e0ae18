# Helpers shared by the scripts in this folder. Sourced, not run.

step() { printf '\n==> %s\n' "$*"; }

# Where cargo puts what it builds: the scripts read binaries from here and keep their own
# outputs here too, so a caller's CARGO_TARGET_DIR is honoured.
target_dir=${CARGO_TARGET_DIR:-target}

# apt_install PACKAGE... : installs the Debian packages that are missing (one apt-get update).
apt_updated=
apt_install() {
  local missing=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local sudo=
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  if [ -z "$apt_updated" ]; then
    timeout 600 $sudo apt-get update -qq
    apt_updated=1
  fi
  echo "installing ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive timeout 1200 $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# tree_commit : the checked-out commit, short, and whether the working tree differs from it
# (untracked files included): what a measurement of the working tree measured.
tree_commit() {
  local commit
  commit=$(git rev-parse --short HEAD 2>/dev/null) || { echo "an unknown commit (not a git checkout)"; return; }
  if ! git diff --quiet HEAD || [ -n "$(git ls-files --others --exclude-standard)" ]; then
    commit="$commit with uncommitted changes"
  fi
  echo "$commit"
}

# rust_target TRIPLE : makes sure rustup has the target; returns 1 when it cannot be added.
rust_target() {
  local installed
  installed="$(rustup target list --installed 2>/dev/null || true)"
  grep -qx "$1" <<<"$installed" && return 0
  echo "adding rust target $1"
  timeout 300 rustup target add "$1"
}
