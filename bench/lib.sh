# Shared by bench/run and bench/compare: tools, the nginx upstream and
# nginx proxy, starting a gateway, and one wrk measurement. Sourced, not run.

need() {
  command -v "$1" >/dev/null 2>&1 && return 0
  # wrk and nginx come from Debian's archive, unpacked into a cache directory
  # (scripts/tools); anything else must be installed.
  if [ "$1" = wrk ] || [ "$1" = nginx ]; then
    # shellcheck source=scripts/lib/tools.sh
    . "$(dirname "${BASH_SOURCE[0]}")/../scripts/lib/tools.sh"
    ensure_tools "$1" && return 0
  fi
  echo "bench: $1 is missing; install the Debian package $2" >&2
  exit 1
}

# pgbench: /usr/bin/pgbench is a wrapper (postgresql-client-common) that fails
# when no version's binary is installed, so try it rather than look it up. Debian
# 12 ships the binary with the server package, which postgresql-contrib pulls in.
need_pgbench() {
  local pkg
  for pkg in postgresql-client postgresql-contrib; do
    pgbench --version >/dev/null 2>&1 && return 0
    echo "bench: installing $pkg for pgbench (apt-get)" >&2
    { apt-get update -qq && apt-get install -y -qq "$pkg"; } >/dev/null 2>&1 || true
  done
  pgbench --version >/dev/null 2>&1 && return 0
  echo "bench: pgbench is missing; install the Debian package postgresql-contrib" >&2
  exit 1
}

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

PIDS=()
declare -A PORT ADMIN_PORT PID
# The process whose CPU time `measure` charges to each listening port.
declare -A CPU_PID
cleanup() {
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}

# One nginx of one worker, keep-alive without limit, no access log: NAME.conf
# with the given http-level directives.
nginx_conf() { # name, http-level directives
  cat > "$WORK/nginx/$1.conf" <<CONF
worker_processes 1;
pid $WORK/nginx/$1.pid;
error_log $WORK/nginx/$1-error.log warn;
events { worker_connections 4096; }
http {
  access_log off;
  keepalive_requests 1000000;
  # Every temp path in the work directory: an nginx unpacked outside /
  # (scripts/tools) has no /var/lib/nginx to fall back on.
  client_body_temp_path $WORK/nginx/$1-body;
  fastcgi_temp_path $WORK/nginx/$1-fastcgi;
  uwsgi_temp_path $WORK/nginx/$1-uwsgi;
  scgi_temp_path $WORK/nginx/$1-scgi;
  proxy_temp_path $WORK/nginx/$1-proxy;
  $2
}
CONF
}

# Starts the nginx upstream (core 1) and the nginx proxy (core 0) in a fresh
# work directory, removed at exit with every process started here.
bench_setup() {
  WORK=$(mktemp -d /tmp/idemgate-bench.XXXXXX)
  trap cleanup EXIT
  UPSTREAM_PORT=$(port); NGINX_PROXY_PORT=$(port)

  # ~200-byte JSON answer with a Location, as a payment API would give.
  BODY='{"id":"ch_3NQ9x2LkdIwHu7ix0Zq1","object":"charge","amount":1000,"currency":"eur","customer":"cus_42","status":"succeeded","created":1700000000,"livemode":false,"description":"benchmark charge"}'

  mkdir -p "$WORK/nginx"
  nginx_conf upstream "
    server {
      listen 127.0.0.1:$UPSTREAM_PORT reuseport;
      location / {
        default_type application/json;
        add_header Location /v1/charges/ch_3NQ9x2LkdIwHu7ix0Zq1 always;
        return 201 '$BODY';
      }
    }"
  nginx_conf proxy "
    upstream api { server 127.0.0.1:$UPSTREAM_PORT; keepalive 128; }
    server {
      listen 127.0.0.1:$NGINX_PROXY_PORT;
      location / {
        proxy_pass http://api;
        proxy_http_version 1.1;
        proxy_set_header Connection \"\";
        proxy_set_header Host \$host;
        proxy_set_header X-Forwarded-For \$proxy_add_x_forwarded_for;
      }
    }"
  taskset -c 1 nginx -c "$WORK/nginx/upstream.conf" -g 'daemon off;' &
  PIDS+=($!)
  taskset -c 0 nginx -c "$WORK/nginx/proxy.conf" -g 'daemon off;' &
  PIDS+=($!)
  CPU_PID[$NGINX_PROXY_PORT]=$!

}

# Deletes a run's Redis keys (a run's prefix as a SCAN pattern): left behind,
# they would stay for their retention, a day.
forget_redis_keys() { # redis url, pattern
  redis-cli -u "$1" --scan --pattern "$2" 2>/dev/null | xargs -r -n 1000 redis-cli -u "$1" del >/dev/null 2>&1
}

# idemgate, one process per store (or per build), each on core 0 while measured.
# GATEWAY_WRAP, when set, is a command the gateway runs under (bench/instructions:
# valgrind); it must exec the gateway in its own process, as valgrind does.
# ROUTE_EXTRA: more fields of the route (key and fingerprint options).
start_gateway() { # name, store-toml[, binary (default $BIN)]
  local name=$1 store=$2 bin=${3:-$BIN} listen admin
  listen=$(port); admin=$(port)
  cat > "$WORK/$name.toml" <<CONF
[server]
listen = "127.0.0.1:$listen"
admin_listen = "127.0.0.1:$admin"
max_connections = 20000

$store

[upstreams.api]
url = "http://127.0.0.1:$UPSTREAM_PORT"
timeout = "10s"

[defaults]
lock_timeout = "30s"
scope = []

[[routes]]
name = "charges"
upstream = "api"
match = { path_prefix = "/v1/charges" }
${ROUTE_EXTRA:-}
CONF
  # shellcheck disable=SC2086 # GATEWAY_WRAP is a command line, split on purpose
  taskset -c 0 ${GATEWAY_WRAP:-} "$bin" serve -c "$WORK/$name.toml" --log-level warn 2>"$WORK/$name.log" &
  PIDS+=($!)
  PORT[$name]=$listen; ADMIN_PORT[$name]=$admin; PID[$name]=$!; CPU_PID[$listen]=$!
  # Up to 30 s: under valgrind starting takes seconds.
  for _ in $(seq 300); do
    kill -0 "${PID[$name]}" 2>/dev/null || break
    curl -fsS "http://127.0.0.1:$admin/readyz" >/dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "bench: idemgate ($name) did not start:" >&2; cat "$WORK/$name.log" >&2; exit 1
}


# CPU time (user + system, in clock ticks) of a process, its threads and its
# children: the gateway's runtime and store threads, nginx's master and worker.
cpu_ticks() { # pid
  local pid total=0
  for pid in "$1" $(pgrep -P "$1" 2>/dev/null); do
    # utime and stime are the 14th and 15th fields; the 2nd, "(comm)", may hold spaces.
    total=$(( total + $(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ t = $12 + $13 } END { print t + 0 }') ))
  done
  echo "$total"
}

# One wrk run; prints "req/s p50_ms p99_ms non2xx cpu_us_per_request". The
# last is the CPU time the proxy on that port spent per answered request
# (threads and children included; a database's own work is not). On a
# saturated core it is about 1/req/s; where the proxy waits (on a database)
# it is what the proxy itself costs. One wrk thread: two on wrk's one core
# take turns, and every request of the waiting one was counted as slow
# (bench/README.md, "Fairness").
measure() { # port, lua, duration, connections
  local out pid=${CPU_PID[$1]:-} before=0 after=0
  [ -n "$pid" ] && before=$(cpu_ticks "$pid")
  out=$(BENCH_RUN="${BENCH_RUN:-r$RANDOM$RANDOM}" taskset -c 1 wrk -t1 -c"$4" -d"$3" --latency \
        -s "$ROOT/bench/lua/$2.lua" "http://127.0.0.1:$1" 2>&1)
  [ -n "$pid" ] && after=$(cpu_ticks "$pid")
  echo "$out" | awk -v ticks=$(( after - before )) -v hz="$(getconf CLK_TCK)" '
    function ms(v) { if (v ~ /us$/) return v/1000; if (v ~ /ms$/) return v+0; if (v ~ /s$/) return v*1000; return v }
    / requests in / { n=$1 }
    /Requests\/sec:/ { rps=$2 }
    /^ +50%/ { p50=ms($2) }
    /^ +99%/ { p99=ms($2) }
    /Non-2xx or 3xx responses:/ { non=$5 }
    END { printf "%s %s %s %s %.1f\n", rps+0, p50+0, p99+0, non+0, (n > 0 ? ticks * 1e6 / hz / n : 0) }'
}

