# Sourced by scripts/test: a throwaway PostgreSQL and Redis for one run of the
# suite, on free ports, in a temporary directory removed at the end. Nothing of
# the system is touched: no configuration file, no system service, no database
# of the machine's own server.
#
# Set IDEMGATE_TEST_PG_URL / IDEMGATE_TEST_REDIS_URL to use services of your own
# instead (each one given is not started here).

SERVICES_DIR=
PG_BIN=
PG_RUN_AS=()

services_log() { echo "services: $*"; }

# A port nothing on 127.0.0.1 answers on, below the kernel's range of
# ephemeral ports: a port there can be the local end of some connection,
# which answers nothing yet cannot be bound (Redis failed to start on one).
# A server may still lose its port to another process before it binds:
# start_postgres and start_redis try again on another.
free_port() {
  local port low
  low=$(cut -f1 /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
  [ "$low" -gt 12000 ] 2>/dev/null || low=32768
  for _ in $(seq 100); do
    port=$((10000 + RANDOM % (low - 10000)))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# How many ports a server is tried on before giving up.
START_TRIES=3

find_pg_bin() {
  local dir
  if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
    PG_BIN=$(pg_config --bindir)
    return 0
  fi
  for dir in $(ls -d /usr/lib/postgresql/*/bin /usr/local/pgsql/bin 2>/dev/null | sort -V -r); do
    if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then PG_BIN=$dir; return 0; fi
  done
  if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
    PG_BIN=$(dirname "$(command -v initdb)")
    return 0
  fi
  return 1
}

# Checks what the run needs before anything starts; says what to install.
services_preflight() {
  local missing=()
  if [ -z "${IDEMGATE_TEST_PG_URL:-}" ] && ! find_pg_bin; then
    missing+=("PostgreSQL server binaries (Debian: postgresql)")
  fi
  if [ -z "${IDEMGATE_TEST_REDIS_URL:-}" ] && ! command -v redis-server >/dev/null 2>&1; then
    missing+=("redis-server (Debian: redis-server)")
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    echo "scripts/test: the tests need a real PostgreSQL and Redis, started here for the run." >&2
    printf 'scripts/test: missing: %s\n' "${missing[@]}" >&2
    echo "scripts/test: install them, or point IDEMGATE_TEST_PG_URL / IDEMGATE_TEST_REDIS_URL at services you run" >&2
    return 1
  fi
}

start_postgres() {
  local port data owner
  port=$(free_port)
  data=$SERVICES_DIR/postgres
  mkdir -p "$data"
  # PostgreSQL refuses to run as root: as root, the cluster belongs to an
  # unprivileged user (postgres where it exists).
  if [ "$(id -u)" -eq 0 ]; then
    owner=postgres
    id -u "$owner" >/dev/null 2>&1 || owner=nobody
    chmod 755 "$SERVICES_DIR"
    chown "$owner" "$data"
    PG_RUN_AS=(runuser -u "$owner" --)
  fi
  if ! "${PG_RUN_AS[@]}" "$PG_BIN/initdb" -D "$data" -U postgres -A trust -E UTF8 \
      --locale=C --no-sync >"$SERVICES_DIR/initdb.log" 2>&1; then
    cat "$SERVICES_DIR/initdb.log" >&2
    echo "services: initdb failed" >&2
    return 1
  fi
  local try
  for try in $(seq "$START_TRIES"); do
    if "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$data" -l "$data/server.log" -w -t 60 \
        -o "-p $port -k $data -c listen_addresses=127.0.0.1 -c max_connections=200" \
        start >/dev/null; then
      break
    fi
    if [ "$try" -eq "$START_TRIES" ]; then
      cat "$data/server.log" >&2
      echo "services: PostgreSQL did not start" >&2
      return 1
    fi
    services_log "PostgreSQL did not start on port $port; trying another"
    port=$(free_port)
  done
  "$PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres test
  export IDEMGATE_TEST_PG_URL="postgres://postgres@127.0.0.1:$port/test"
  services_log "PostgreSQL $("$PG_BIN/postgres" --version | awk '{print $3}') on 127.0.0.1:$port (data in $data)"
}

start_redis() {
  local port try
  for try in $(seq "$START_TRIES"); do
    port=$(free_port)
    redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
      --daemonize yes --pidfile "$SERVICES_DIR/redis.pid" --dir "$SERVICES_DIR" \
      --logfile "$SERVICES_DIR/redis.log"
    for _ in $(seq 50); do
      if (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
        export IDEMGATE_TEST_REDIS_URL="redis://127.0.0.1:$port"
        services_log "Redis on 127.0.0.1:$port"
        return 0
      fi
      # It exits at once when the port is taken.
      grep -q "Failed listening on port" "$SERVICES_DIR/redis.log" 2>/dev/null && break
      sleep 0.2
    done
    if [ "$try" -lt "$START_TRIES" ]; then
      services_log "Redis did not start on port $port; trying another"
      if [ -f "$SERVICES_DIR/redis.pid" ]; then kill "$(cat "$SERVICES_DIR/redis.pid")" 2>/dev/null || true; fi
      mv "$SERVICES_DIR/redis.log" "$SERVICES_DIR/redis.log.$try" 2>/dev/null || true
    fi
  done
  cat "$SERVICES_DIR/redis.log" >&2
  echo "services: Redis did not start" >&2
  return 1
}

stop_services() {
  [ -n "$SERVICES_DIR" ] || return 0
  if [ -f "$SERVICES_DIR/postgres/postmaster.pid" ]; then
    "${PG_RUN_AS[@]}" "$PG_BIN/pg_ctl" -D "$SERVICES_DIR/postgres" -m immediate -w stop >/dev/null 2>&1 || true
  fi
  if [ -f "$SERVICES_DIR/redis.pid" ]; then
    local pid
    pid=$(cat "$SERVICES_DIR/redis.pid")
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  fi
  rm -rf "$SERVICES_DIR"
  SERVICES_DIR=
}

# Starts what is not given, and exports the URLs the tests and the bench read.
start_services() {
  SERVICES_DIR=$(mktemp -d /tmp/idemgate-services.XXXXXX)
  if [ -z "${IDEMGATE_TEST_PG_URL:-}" ]; then
    [ -n "$PG_BIN" ] || find_pg_bin
    start_postgres
  fi
  if [ -z "${IDEMGATE_TEST_REDIS_URL:-}" ]; then start_redis; fi
  export BENCH_DATABASE_URL=${BENCH_DATABASE_URL:-$IDEMGATE_TEST_PG_URL}
  export BENCH_REDIS_URL=${BENCH_REDIS_URL:-$IDEMGATE_TEST_REDIS_URL}
}
