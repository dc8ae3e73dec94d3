# Sourced by the device scripts. start_overlapd LOG [overlapd flags...] starts
# overlapd on a fresh unix socket and state directory, sets $work, $addr and
# $pid, and returns once it answers (status 1 when it exits first or has not
# answered after 60 s).
# OVERLAPD_BACKEND picks the backend (default cuda; host to try a script here).
start_overlapd() {
  local log=$1
  shift
  work=$(mktemp -d /tmp/overlapd.XXXXXX)
  run_overlapd "$log" "$@"
}

# restart_overlapd LOG [flags...]: stops the daemon start_overlapd started and
# starts it again on the same socket and state directory (its log appended).
restart_overlapd() {
  kill -TERM "$pid" 2> /dev/null
  wait "$pid" 2> /dev/null
  run_overlapd "$@"
}

run_overlapd() {
  local log=$1
  shift
  addr="unix:$work/overlapd.sock"
  overlapd --backend "${OVERLAPD_BACKEND:-cuda}" --listen "$addr" --state-dir "$work/state" "$@" \
    >> "$log" 2>&1 &
  pid=$!
  for _ in $(seq 1 600); do
    overlapctl --addr "$addr" node > /dev/null 2>&1 && return 0
    if ! kill -0 "$pid" 2> /dev/null; then
      echo "overlapd exited at start; its log: $log" >&2
      tail -3 "$log" >&2
      return 1
    fi
    sleep 0.1
  done
  echo "overlapd did not answer within 60 s; its log: $log" >&2
  return 1
}
