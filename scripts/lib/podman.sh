# Sourced by scripts/container-bases and scripts/container-test: podman with the
# settings a container host of ours may need. Containers share the host's
# network (the tests talk to 127.0.0.1), get no ulimits beyond the host's own
# (raising them is refused inside an unprivileged container), and run under
# runc where it is installed (crun refuses a host with a hybrid cgroup v1/v2
# layout).
PODMAN_CONF=$(mktemp /tmp/idemgate-containers.XXXXXX.conf)
{
  echo '[containers]'
  echo 'default_ulimits = []'
  echo 'netns = "host"'
  if command -v runc >/dev/null 2>&1; then
    echo '[engine]'
    echo 'runtime = "runc"'
  fi
} >"$PODMAN_CONF"
export CONTAINERS_CONF=$PODMAN_CONF
