# Sourced by run-sanitizers.sh and fuzz-on-cores.sh: the libFuzzer options
# that differ by target, described once.
#
# fuzz_max_len TARGET: the largest input. Targets that read what a client or
# peer sends (a graph, a config) get the daemon's max_spec_bytes (1 MiB,
# common/config.h) so that they reach the inputs the daemon accepts, large
# nesting and long texts included; the others 4096. FUZZ_MAX_LEN overrides.
fuzz_max_len() {
  if [ -n "${FUZZ_MAX_LEN:-}" ]; then echo "$FUZZ_MAX_LEN"; return; fi
  case "$1" in
    job_spec | pinned_graph | peer_message | daemon_config | hf_config) echo 1048576 ;;
    *) echo 4096 ;;
  esac
}

# fuzz_dict_args TARGET: -dict=FILE for the targets with a dictionary
# (tests/fuzz/dict/): boundary integers and the keys that carry sizes.
fuzz_dict_args() {
  case "$1" in
    job_spec | pinned_graph | peer_message) echo "-dict=tests/fuzz/dict/graph.dict" ;;
  esac
}
