# Sourced by the benchmark scripts: quiet waits (up to 10 minutes) for a 1-minute load average
# under 1.5 before a timed run, and warns when the machine stays busy.
quiet() {
  for _ in $(seq 120); do
    awk '{exit !($1 < 1.5)}' /proc/loadavg && return 0
    sleep 5
  done
  echo "warning: load still $(cut -d' ' -f1 /proc/loadavg) after 10 minutes" >&2
}
