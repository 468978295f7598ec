# Sourced by scripts/tools and scripts/test: Debian tools unpacked into a cache
# directory (see scripts/tools). Defines ensure_tools and extends PATH and
# LD_LIBRARY_PATH with the cache so the tools run from there.

IDEMGATE_CACHE=${IDEMGATE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idemgate}
TOOLS_ROOT=$IDEMGATE_CACHE/debian-tools
export PATH="$TOOLS_ROOT/usr/bin:$TOOLS_ROOT/usr/sbin:$PATH"
export LD_LIBRARY_PATH="$TOOLS_ROOT/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# command -> the Debian packages that carry it and the libraries it needs
# beyond a base system.
declare -A TOOL_PACKAGES=(
  [promtool]="prometheus"
  [wrk]="wrk libluajit-5.1-2"
  [nginx]="nginx"
)

# ensure_tools [COMMAND...]: fetches each missing command (default: all).
ensure_tools() {
  local wanted=("$@") missing=() packages=() tool
  [ ${#wanted[@]} -eq 0 ] && wanted=("${!TOOL_PACKAGES[@]}")
  for tool in "${wanted[@]}"; do
    command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  for tool in "${missing[@]}"; do
    # shellcheck disable=SC2206
    packages+=(${TOOL_PACKAGES[$tool]})
  done
  if ! command -v apt-get >/dev/null 2>&1 || ! command -v dpkg-deb >/dev/null 2>&1; then
    echo "tools: ${missing[*]} missing, and this is not a Debian-like system to fetch them from;" >&2
    echo "tools: install them (Debian packages: ${packages[*]}) and run again" >&2
    return 1
  fi
  echo "tools: fetching ${missing[*]} (Debian packages ${packages[*]}, ~20 MB) into $TOOLS_ROOT"
  local apt_dir=$IDEMGATE_CACHE/apt log
  mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$apt_dir/debs" "$TOOLS_ROOT"
  log=$(mktemp)
  local apt=(apt-get -q -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
    -o Debug::NoLocking=1 -o APT::Sandbox::User="$(id -un)")
  if ! { "${apt[@]}" update && (cd "$apt_dir/debs" && "${apt[@]}" download "${packages[@]}"); } >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    echo "tools: could not download ${packages[*]} from Debian's archive; install them and run again" >&2
    return 1
  fi
  rm -f "$log"
  local deb
  for deb in "$apt_dir"/debs/*.deb; do
    dpkg-deb -x "$deb" "$TOOLS_ROOT"
  done
  rm -f "$apt_dir"/debs/*.deb
  for tool in "${missing[@]}"; do
    if ! command -v "$tool" >/dev/null 2>&1; then
      echo "tools: $tool is still missing after unpacking ${TOOL_PACKAGES[$tool]}" >&2
      return 1
    fi
  done
}
